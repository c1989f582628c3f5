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
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import locking, secretscan
from .errors import Refused
from .trailers import encode_json

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from .store import GitStore

REF = "refs/gitstate/refusals"
PREVIOUS = "refs/gitstate/refusals-previous"
REMOTE_PREFIX = "refs/gitstate/refusals/"  # on the remote: one journal per clone
PULLED_PREFIX = "refs/gitstate/pulled-refusals/"  # here: the other clones' journals
TRACKING = "refs/remotes/origin/gitstate-refusals"
ORIGIN_FILE = "gitstate-origin"
FILE = "refusal.json"
RETAIN = 10_000
FIELDS = ("time", "rule", "op", "key", "attempted", "expected", "head_value", "actor",
          "writer", "reason", "request_id", "run_id", "message")
_TEXT_MAX = 2000
WITHHELD = "[withheld: refused as a secret]"
_BASELINE_ENV = "GITSTATE_BENCH_NO_REFUSAL_JOURNAL"


def _clip(value: Any) -> Any:
    """Records keep what was attempted, bounded: a refused 1 MiB value is not kept whole."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return value if len(text) <= _TEXT_MAX else {"clipped": text[:_TEXT_MAX]}


def withhold(name: str, fields: dict[str, Any]) -> Any:
    """A field of a record as it may enter history: a value refused as a secret (or for a
    sensitive key) is withheld, and so is any field that trips the scan whatever rule
    refused the write (a reserved key, a stale compare-and-swap, a value too long): the
    record keeps that it was tried, where and why, never the text. Scanned whole, before
    any clipping, so that no part of a token is kept either."""
    value = fields.get(name)
    if value is None or name in ("time", "rule"):
        return value
    if name in ("attempted", "expected") and str(fields.get("rule") or "").startswith(
            "secret."):
        return WITHHELD
    return WITHHELD if secretscan.find(value) is not None else value


def record(store: GitStore, identity: bytes, **fields: Any) -> str | None:
    """Append one refusal; returns its commit (None when it could not be written)."""
    if os.environ.get(_BASELINE_ENV):  # bench/refusal_storm.py's baseline: no journal
        return None
    entry = {name: _clip(withhold(name, fields)) for name in FIELDS}
    entry["time"] = entry["time"] or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        with locking.exclusive(store.git_dir / "gitstate-refusals.flock"):
            head = store.ref(REF)
            seq = _seq(store, head) + 1 if head else 1
            if seq > RETAIN:  # a new generation: the full one becomes the previous
                store.move_ref(PREVIOUS, store.ref(PREVIOUS), head)
                store.move_ref(REF, head, None)
                head, seq = None, 1
            data = (json.dumps(entry, ensure_ascii=False, indent=2, sort_keys=True)
                    + "\n").encode()
            summary = f"refused {entry['op'] or 'write'} of {entry['key'] or '-'}: " \
                      f"{entry['rule']}"
            message = (summary.replace("\n", " ")[:200] + "\n\nGitstate-Refusal: "
                       + encode_json(entry) + f"\nGitstate-Seq: {seq}\n").encode()
            when = int(datetime.fromisoformat(str(entry["time"]).replace("Z", "+00:00"))
                       .timestamp())
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


def _chain(store: GitStore, ref: str, origin: str) -> Iterator[dict[str, Any]]:
    head = store.ref(ref)
    for info in store.walk(head) if head else ():
        try:
            yield {"commit": info.id, "origin": origin, **parse(info.message)}
        except ValueError:
            yield {"commit": info.id, "origin": origin, "damaged": True, "time": ""}


def entries(store: GitStore) -> Iterator[dict[str, Any]]:
    """Every record kept, newest first: this clone's (the current generation, then the
    previous) and, once pulled, the other clones' journals, merged by time."""
    pulled = store.refs_under(PULLED_PREFIX)
    if not pulled:
        yield from _chain(store, REF, "local")
        yield from _chain(store, PREVIOUS, "local")
        return
    everything = [*_chain(store, REF, "local"), *_chain(store, PREVIOUS, "local")]
    for name in sorted(pulled):
        everything += _chain(store, PULLED_PREFIX + name, name)
    everything.sort(key=lambda e: str(e.get("time") or ""), reverse=True)
    yield from everything


def origin_id(git_dir: Path) -> str:
    """This clone's journal name on the remote (random, made once)."""
    path = git_dir / ORIGIN_FILE
    try:
        text = path.read_text(encoding="ascii").strip()
        if len(text) == 16 and all(c in "0123456789abcdef" for c in text):
            return text
    except (OSError, UnicodeDecodeError):
        pass
    text = os.urandom(8).hex()
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(text + "\n", encoding="ascii")
    os.replace(tmp, path)
    return text


def check_chain(store: GitStore, head: str) -> list[str]:
    """A journal from elsewhere (a pull, a push to the server): every commit holds only
    refusal.json, equal to its trailer; no merge; no more than RETAIN records."""
    out = []
    for n, info in enumerate(store.walk(head), 1):
        if n > RETAIN:
            return [f"more than {RETAIN} records in one chain"]
        try:
            if len(info.parents) > 1:
                raise ValueError("a merge")
            entries = store.tree_entries(info.id)
            if [(n, m) for n, m, _ in entries] != [(FILE.encode(), 0o100644)]:
                raise ValueError(f"the tree must hold only {FILE}, a regular file")
            if store.object_size(entries[0][2]) > 64 << 10:  # before reading it whole
                raise ValueError(f"{FILE} is over 64 KiB")
            entry = parse(info.message)
            data = store.read_file(info.id, FILE) or b"null"
            if json.loads(data) != entry:
                raise ValueError(f"{FILE} differs from its trailer")
        except (ValueError, RecursionError, KeyError) as exc:
            out.append(f"{info.id[:12]}: {exc}")
            break
    return out


def push(store: GitStore, url: str,
         lock: Callable[[], AbstractContextManager[None]]) -> str | None:
    """Send this clone's journal to the remote as refusals/<origin>; None when done. The
    push waits on the network without ``lock`` (the write lock); the tracking ref moves
    under it."""
    head = store.ref(REF)
    seen = store.ref(TRACKING)
    if head is None or head == seen:
        return None
    name = REMOTE_PREFIX + origin_id(store.git_dir)
    refused = store.push_refs(url, {name: (seen, head)})
    if name in refused:
        return refused[name]
    with lock():
        store.move_ref(TRACKING, seen, head)
    return None


def pull(store: GitStore, url: str, *,
         lock: Callable[[], AbstractContextManager[None]]) -> list[str]:
    """Fetch the other clones' journals, each checked; returns the origins taken. The
    fetch waits on the network without ``lock`` (the write lock), held then for the checks
    and the ref moves; the names were checked by the transport (16 lowercase hex digits,
    ``layout.NAMESPACES["journals"]``) and bounded (``pull_max_new_journals``)."""
    mine = origin_id(store.git_dir)

    def check(incoming: GitStore, remote: dict[str, str]) -> dict[str, str]:
        accepted = {}
        for name, head in remote.items():
            if name == mine or len(name) != 16 or store.ref(PULLED_PREFIX + name) == head:
                continue
            problems = check_chain(incoming, head)
            if problems:
                raise Refused(f"the remote's refusal journal {name} is not one gitstate "
                              f"wrote: {problems[0]}", rule="remote.refusals_invalid")
            accepted[name] = head
        return accepted

    known = {REMOTE_PREFIX + name for name in store.refs_under(PULLED_PREFIX)}
    known.add(REMOTE_PREFIX + mine)
    with store.incoming(url, ("journals",), known=known, action="pull") as got:
        remote = {name[len(REMOTE_PREFIX):]: head for name, head in got.refs.items()}
        with lock():
            taken = check(got.store, remote) if remote else {}
            if taken:
                got.take()
            for name, head in taken.items():
                store.move_ref(PULLED_PREFIX + name, store.ref(PULLED_PREFIX + name), head)
    return sorted(taken)


def problems(store: GitStore) -> list[str]:
    """What verify reports: a record gitstate did not write or a chain past its retention
    (here or pulled), and journal writes that failed."""
    out = []
    chains = {REF: store.ref(REF), PREVIOUS: store.ref(PREVIOUS)}
    chains.update({PULLED_PREFIX + n: h for n, h in store.refs_under(PULLED_PREFIX).items()})
    for ref, head in chains.items():
        out += [f"{ref}: {p}" for p in (check_chain(store, head) if head else [])]
    failed = store.git_dir / "gitstate-refusals.failed"
    if failed.exists():
        out.append(f"{len(failed.read_text().splitlines())} refusals could not be recorded "
                   "(state/.git/gitstate-refusals.failed)")
    return out
