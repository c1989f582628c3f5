"""The refusal journal: every refused write, append-only, on a ref of its own.

A refusal changes nothing in the state, so without a record it leaves no trace: the dozen
patrols that tried to write 254 over 262 would be invisible. Each refused write becomes one
commit on ``refs/gitstate/refusals`` whose tree holds ``refusal.json`` (the record) and
whose message is a one-line summary followed by ``Gitstate-Refusal: <record as JSON>`` and
``Gitstate-Seq: <n>``. It never touches main or the working tree, and takes its own kernel
lock (``.git/gitstate-refusals.flock``), never main's: a refusal storm does not queue behind
main's writers, nor they behind it.

Retention: a generation holds at most :data:`RETAIN` records. The record after that starts a
new chain (a root commit) and the full one moves to ``refs/gitstate/refusals-previous``,
replacing the generation before it, which git's gc then drops. So the journal keeps the last
``RETAIN`` to ``2 * RETAIN`` refusals, in at most two chains.

Recording is best effort by design: a refusal is answered to the caller whether or not the
journal could be written (a full disk must not turn a clean refusal into a crash), and a
failure is counted in ``.git/gitstate-refusals.failed`` for ``verify``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from . import locking
from .trailers import encode_json

if TYPE_CHECKING:
    from .store import GitStore

REF = "refs/gitstate/refusals"
PREVIOUS = "refs/gitstate/refusals-previous"
FILE = "refusal.json"
RETAIN = 10_000
FIELDS = ("time", "rule", "op", "key", "attempted", "expected", "head_value", "actor",
          "writer", "reason", "request_id", "run_id", "message")
_TEXT_MAX = 2000


def _clip(value: Any) -> Any:
    """Records keep what was attempted, bounded: a refused 1 MiB value is not kept whole."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return value if len(text) <= _TEXT_MAX else {"clipped": text[:_TEXT_MAX]}


def record(store: GitStore, identity: bytes, **fields: Any) -> str | None:
    """Append one refusal; returns its commit (None when it could not be written)."""
    entry = {name: _clip(fields.get(name)) for name in FIELDS}
    entry["time"] = entry["time"] or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        with locking.exclusive(store.git_dir / "gitstate-refusals.flock"):
            head = store.ref(REF)
            seq = _seq(store, head) + 1 if head else 1
            if seq > RETAIN:
                store.move_ref(PREVIOUS, store.ref(PREVIOUS), head)
                head, seq = None, 1
            data = (json.dumps(entry, ensure_ascii=False, indent=2, sort_keys=True)
                    + "\n").encode()
            summary = f"refused {entry['op'] or 'write'} of {entry['key'] or '-'}: " \
                      f"{entry['rule']}"
            message = (summary.replace("\n", " ")[:200] + "\n\nGitstate-Refusal: "
                       + encode_json(entry) + f"\nGitstate-Seq: {seq}\n").encode()
            when = int(datetime.now(UTC).timestamp())
            commit = store.commit(head, {FILE: data}, message, identity, when, ref=REF)
        store.consolidate()  # outside the journal's lock, as after any write
        return commit
    except Exception:  # the refusal itself must still reach the caller
        with contextlib.suppress(OSError), open(store.git_dir / "gitstate-refusals.failed",
                                                "a", encoding="utf-8") as f:
            f.write(datetime.now(UTC).isoformat() + "\n")
        return None


def _seq(store: GitStore, head: str) -> int:
    for line in store.commit_info(head).message.decode("utf-8", "replace").splitlines():
        if line.startswith("Gitstate-Seq: ") and line[14:].strip().isdigit():
            return int(line[14:])
    return 0


def parse(message: bytes) -> dict[str, Any]:
    """The record a journal commit carries (ValueError when it is not one)."""
    for line in message.decode("utf-8").splitlines():
        if line.startswith("Gitstate-Refusal: "):
            entry = json.loads(line[18:])
            if isinstance(entry, dict) and set(entry) == set(FIELDS):
                return entry
    raise ValueError("not a refusal record")


def entries(store: GitStore) -> Iterator[dict[str, Any]]:
    """Every record kept, newest first (the current generation, then the previous)."""
    for ref in (REF, PREVIOUS):
        head = store.ref(ref)
        if head is None:
            continue
        for info in store.walk(head):
            try:
                yield {"commit": info.id, **parse(info.message)}
            except ValueError:
                yield {"commit": info.id, "damaged": True}


def problems(store: GitStore) -> list[str]:
    """What verify reports: unreadable records, a chain longer than its retention, a
    record whose file and trailer disagree, and journal writes that failed."""
    out = []
    for ref in (REF, PREVIOUS):
        head = store.ref(ref)
        for n, info in enumerate(store.walk(head) if head else (), 1):
            try:
                entry = parse(info.message)
                stored = json.loads(store.read_file(info.id, FILE) or b"null")
                if stored != entry:
                    out.append(f"{info.id[:12]}: {FILE} differs from its trailer")
            except ValueError as exc:
                out.append(f"{info.id[:12]}: {exc}")
            if n > RETAIN:
                out.append(f"{ref} holds more than {RETAIN} records")
                break
    failed = store.git_dir / "gitstate-refusals.failed"
    if failed.exists():
        out.append(f"{len(failed.read_text().splitlines())} refusals could not be recorded "
                   "(state/.git/gitstate-refusals.failed)")
    return out
