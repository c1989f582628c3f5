"""The refusal journal: every refused write, append-only, on a ref of its own.

A refusal changes nothing in the state, so without a record it leaves no trace: the dozen
patrols that tried to write 254 over 262 would be invisible. Each refused write becomes one
commit on ``refs/gitstate/refusals`` whose tree holds ``refusal.json`` (the record) and
whose message is a one-line summary followed by ``Gitstate-Refusal: <record as JSON>`` and
``Gitstate-Seq: <n>``. It never touches main or the working tree, and takes its own kernel
lock (``.git/gitstate-refusals.flock``), never main's: a refusal storm does not queue behind
main's writers, nor they behind it.

Retention: a generation holds at most :data:`RETAIN` records. The record after that starts a
new chain (a root commit whose ``Gitstate-Previous`` trailer names the full chain's head)
and the full one moves to ``refs/gitstate/refusals-previous``, replacing the generation
before it, which git's gc then drops. So the journal keeps the last ``RETAIN`` to
``2 * RETAIN`` refusals, in at most two chains.

From elsewhere (a pull, a push to the server) a journal only grows: :func:`check_update`
takes a fast-forward, or a new generation whose root names the head held so far, and each
record's fields by the input rules (:func:`field_problem`); readers skip a record that fails
them as damaged, with the problem named.

Recording is best effort by design: a refusal is answered to the caller whether or not the
journal could be written (a full disk must not turn a clean refusal into a crash), and a
record that could not be written is kept in ``.git/gitstate-refusals.failed``, which
``verify`` reports until ``gitstate repair-journal`` (:func:`repair`) journals it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import layout, secretscan, textsafe
from ..core.errors import InvalidInput, Refused, StoreError
from ..core.rules import check_key
from ..core.trailers import encode_json
from ..system import locking, safefile
from .backlog import failed as _failed
from .backlog import failures

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from ..store import GitStore

REF = "refs/gitstate/refusals"
PREVIOUS = "refs/gitstate/refusals-previous"
REMOTE_PREFIX = "refs/gitstate/refusals/"  # on the remote: one journal per clone
PULLED_PREFIX = "refs/gitstate/pulled-refusals/"  # here: the other clones' journals
TRACKING = "refs/remotes/origin/gitstate-refusals"
ORIGIN_FILE = layout.ORIGIN_FILE
FAILED_FILE = layout.REFUSALS_FAILED_FILE
FILE = "refusal.json"
RETAIN = 10_000
FIELDS = ("time", "rule", "op", "key", "attempted", "expected", "head_value", "actor",
          "writer", "reason", "request_id", "run_id", "message")
_TEXT_MAX = 2000
PREVIOUS_TRAILER = "Gitstate-Previous: "  # on a new generation's root: the full chain's head
_NAME_RE = re.compile(r"[a-z][a-z0-9_-]*(\.[a-z0-9_-]+)*")  # rules and ops, as errors.py names
_TIME_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_RUN_KEY_RE = re.compile(r"runs/[A-Za-z0-9._-]{1,64}")
_TEXTS = ("actor", "writer", "reason", "request_id", "run_id", "message")
WITHHELD = "[withheld: refused as a secret]"
_BASELINE_ENV = "GITSTATE_BENCH_NO_REFUSAL_JOURNAL"


def _clip(value: Any) -> Any:
    """Records keep what was attempted, bounded: a refused 1 MiB value is not kept whole.
    A value clipped already stays as it is (so a record is what keeping it again gives)."""
    if _clipped(value):
        return value
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return value if len(text) <= _TEXT_MAX else {"clipped": text[:_TEXT_MAX]}


def _clipped(value: Any) -> bool:
    return isinstance(value, dict) and list(value) == ["clipped"] and \
        isinstance(value["clipped"], str) and len(value["clipped"]) == _TEXT_MAX


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


def keep(fields: dict[str, Any]) -> dict[str, Any]:
    """The record of a refusal as it enters history: every field of :data:`FIELDS`, a
    secret withheld (:func:`withhold`), a hidden character shown, each value clipped, the
    time now when none is given. A record gitstate wrote is what keeping it again gives."""
    kept = {name: withhold(name, fields) for name in FIELDS}
    for name in (*_TEXTS, "key"):  # a hidden character is kept, shown (field_problem)
        if isinstance(kept[name], str) and not _plain(kept[name]):
            kept[name] = textsafe.visible(kept[name])
    entry = {name: _clip(value) for name, value in kept.items()}
    entry["time"] = entry["time"] or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return entry


def written(entry: dict[str, Any], seq: int, previous: str | None,
            parent_time: int | None) -> tuple[bytes, bytes, int]:
    """One record's commit, byte for byte: (refusal.json, the message, the commit time).
    The message is a summary line, ``Gitstate-Refusal: <record>``, ``Gitstate-Seq: <n>``
    and, on a new generation's root, ``Gitstate-Previous: <head>``; the time is the
    record's, or the parent's when that is later (commit times never go back within a
    ref). :func:`record` writes with it and :func:`check_chain` re-derives with it."""
    data = (json.dumps(entry, ensure_ascii=False, indent=2, sort_keys=True) + "\n").encode()
    summary = f"refused {entry['op'] or 'write'} of {entry['key'] or '-'}: {entry['rule']}"
    message = (summary.replace("\n", " ")[:200] + "\n\nGitstate-Refusal: "
               + encode_json(entry) + f"\nGitstate-Seq: {seq}\n"
               + (f"{PREVIOUS_TRAILER}{previous}\n" if previous else "")).encode()
    when = int(datetime.fromisoformat(str(entry["time"]).replace("Z", "+00:00")).timestamp())
    return data, message, when if parent_time is None else max(when, parent_time)


def record(store: GitStore, identity: bytes, **fields: Any) -> str | None:
    """Append one refusal; returns its commit (None when it could not be written: the
    record is then kept in :data:`FAILED_FILE`, gitstate/history/backlog.py, for :func:`repair`)."""
    if os.environ.get(_BASELINE_ENV):  # bench/refusal_storm.py's baseline: no journal
        return None
    entry = keep(fields)
    try:
        with locking.exclusive(store.git_dir / layout.REFUSALS_LOCK_FILE):
            try:
                commit = _journal(store, identity, entry)
            except Exception:  # under the journal's lock: a repair never misses it
                _failed(store, entry)
                return None
    except Exception:  # the lock itself; the refusal must still reach the caller
        _failed(store, entry)
        return None
    with contextlib.suppress(Exception):
        store.consolidate()  # outside the journal's lock, as after any write
    return commit


def _journal(store: GitStore, identity: bytes, entry: dict[str, Any]) -> str:
    """One record's commit on the journal (its lock held)."""
    head = store.ref(REF)
    seq = _seq(store, head) + 1 if head else 1
    previous = None
    if seq > RETAIN:  # a new generation: the full one becomes the previous
        store.move_ref(PREVIOUS, store.ref(PREVIOUS), head)
        store.move_ref(REF, head, None)
        previous, head, seq = head, None, 1
    data, message, when = written(entry, seq, previous, None if head is None
                                  else store.commit_times(head)[1])
    commit = store.commit(head, {FILE: data}, message, identity, when, ref=REF)
    if commit is None:  # the ref moved under the journal's lock: another tool writes it
        raise StoreError("refs/gitstate/refusals moved while a record was written",
                         rule="store.contention")
    return commit


def repair(store: GitStore, identity: bytes) -> tuple[int, int]:
    """Journal the records kept in :data:`FAILED_FILE` and remove it (the journal's lock
    held throughout): (records journaled, failures of which only the count was kept).
    On an error part-way the records not journaled yet stay for the next repair."""
    path = store.git_dir / FAILED_FILE
    with locking.exclusive(store.git_dir / layout.REFUSALS_LOCK_FILE):
        try:
            lines = safefile.read_regular(path, 64 << 20).splitlines() or [b""]
        except FileNotFoundError:
            return 0, 0
        except safefile.NotRegular:
            path.unlink()  # the link itself, never what it names: nothing readable to keep
            return 0, 1
        done = lost = 0
        for i, line in enumerate(lines):
            try:
                raw = json.loads(line)
                entry = keep(raw) if isinstance(raw, dict) and "rule" in raw else None
            except (ValueError, TypeError):
                entry = None  # an older version's time stamp, or a line cut short
            if entry is None:
                lost += 1
                continue
            try:
                _journal(store, identity, entry)
            except Exception:
                rest = b"".join(x + b"\n" for x in lines[i:])
                with contextlib.suppress(OSError):
                    safefile.write_atomic(path, rest)
                raise
            done += 1
        path.unlink()
    with contextlib.suppress(Exception):
        store.consolidate()
    return done, lost


def _seq(store: GitStore, head: str) -> int:
    for line in store.commit_info(head).message.decode("utf-8", "replace").splitlines():
        if line.startswith("Gitstate-Seq: ") and line[14:].strip().isdigit():
            return int(line[14:])
    return 0


def _plain(text: str) -> bool:
    """The text rules' test: nothing hidden; line breaks and tabs are text (a reason)."""
    return textsafe.plain(text.replace("\n", " ").replace("\t", " "))


def field_problem(entry: dict[str, Any]) -> str | None:
    """What in a record gitstate would not have written (None when nothing): the time is
    ISO 8601, the rule and the op are rule names, the key is a key (or ``runs/<id>``; any
    text under a ``key.*`` or ``secret.*`` rule, which refused the key itself), and the
    texts are bounded and hide nothing (``textsafe.plain``, line breaks allowed), as
    :func:`record` keeps them."""
    when = entry.get("time")
    try:
        if not isinstance(when, str) or not _TIME_RE.fullmatch(when):
            raise ValueError
        datetime.fromisoformat(when.replace("Z", "+00:00"))
    except ValueError:
        return f"time {str(when)[:40]!r} is not an ISO 8601 time as gitstate writes it " \
               "(YYYY-MM-DDTHH:MM:SSZ)"
    for name in ("rule", "op"):
        value = entry.get(name)
        if not (value is None and name == "op") and not (
                isinstance(value, str) and len(value) <= 100 and _NAME_RE.fullmatch(value)):
            return f"{name} {str(value)[:40]!r} is not a rule name"
    key, rule = entry.get("key"), str(entry.get("rule"))
    if key is not None and not rule.startswith(("key.", "secret.")):
        try:
            if not (isinstance(key, str) and _RUN_KEY_RE.fullmatch(key)):
                check_key(key)
        except InvalidInput as exc:
            return f"key: {exc.message}"
    for name in (*_TEXTS, "key"):
        value = entry.get(name)
        if isinstance(value, dict) and list(value) == ["clipped"]:  # as _clip cuts it
            value = value["clipped"]
        if value is not None and not (isinstance(value, str) and len(value) <= _TEXT_MAX
                                      and _plain(value)):
            return f"{name} is not a plain bounded text"
    return None


def parse(message: bytes) -> dict[str, Any]:
    """The record a journal commit carries (ValueError naming what is wrong when it is
    not one gitstate would write)."""
    for line in message.decode("utf-8").splitlines():
        if line.startswith("Gitstate-Refusal: "):
            entry = json.loads(line[18:])
            if isinstance(entry, dict) and set(entry) == set(FIELDS):
                problem = field_problem(entry)
                if problem is not None:
                    raise ValueError(f"[refusals.bad_record] {problem}")
                return entry
    raise ValueError("not a refusal record")


def _chain(store: GitStore, ref: str, origin: str) -> Iterator[dict[str, Any]]:
    head = store.ref(ref)
    for info in store.walk(head) if head else ():
        try:
            yield {"commit": info.id, "origin": origin, **parse(info.message)}
        except ValueError as exc:
            yield {"commit": info.id, "origin": origin, "damaged": True, "time": "",
                   "problem": str(exc)}


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
        text = safefile.read_regular(path, 64).decode("ascii").strip()
        if len(text) == 16 and all(c in "0123456789abcdef" for c in text):
            return text
    except (OSError, UnicodeDecodeError):
        pass
    text = os.urandom(8).hex()
    safefile.write_atomic(path, (text + "\n").encode("ascii"))
    return text


def check_chain(store: GitStore, head: str) -> list[str]:
    """A journal from elsewhere (a pull, a push to the server), by re-derivation: every
    record is what :func:`keep` keeps for it, and every commit is exactly the one
    :func:`written` makes for it — refusal.json's bytes, the summary line and the trailers
    (``Gitstate-Seq`` counting from the chain's root), the commit time (the record's, or
    the parent's when later) with the author time equal to it (``refusals.rederive``); the
    tree holds only refusal.json; no merge; no more than RETAIN records; dated by the clock
    rule of every namespace (``rules.time_problem``)."""
    import time

    from ..core.rules import time_problem

    out: list[str] = []
    now, newer = time.time(), None
    chain = []
    for n, info in enumerate(store.walk(head), 1):
        if n > RETAIN:
            return [f"more than {RETAIN} records in one chain"]
        chain.append(info)
    for n, info in enumerate(chain):
        try:
            if len(info.parents) > 1:
                raise ValueError("a merge")
            entries = store.tree_entries(info.id)
            if [(n, m) for n, m, _ in entries] != [(FILE.encode(), 0o100644)]:
                raise ValueError(f"the tree must hold only {FILE}, a regular file")
            if store.object_size(entries[0][2]) > 64 << 10:  # before reading it whole
                raise ValueError(f"{FILE} is over 64 KiB")
            author_time, commit_time = store.commit_times(info.id)
            clock = time_problem(author_time, commit_time, None, now)
            if clock is None and newer is not None and newer < commit_time:
                clock = ("time.backwards", "a newer record is dated before this one: commit "
                         "times within a ref never go back")
            if clock is not None:
                raise ValueError(f"[{clock[0]}] {clock[1]}")
            newer = commit_time
            entry = parse(info.message)
            if keep(entry) != entry:
                raise ValueError("[refusals.rederive] the record is not what the journal "
                                 "keeps for it (a secret withheld, hidden characters shown, "
                                 "each field clipped)")
            previous = None if info.parents else _root_names(store, info.id)
            if previous is not None and not re.fullmatch(r"[0-9a-f]{40}", previous):
                raise ValueError(f"[refusals.rederive] {PREVIOUS_TRAILER.strip()} names no "
                                 "commit")
            data, message, when = written(entry, len(chain) - n, previous, store.commit_times(
                info.parents[0])[1] if info.parents else None)
            if store.read_file(info.id, FILE) != data:
                raise ValueError(f"[refusals.rederive] {FILE} is not the bytes the journal "
                                 "writes for its record")
            if info.message != message:
                raise ValueError("[refusals.rederive] the message is not the one the journal "
                                 "writes for its record (summary, trailers or Seq differ)")
            if commit_time != when or author_time != commit_time:
                raise ValueError("[refusals.rederive] the commit is not dated as the journal "
                                 "dates its record (the record's time, or the parent's when "
                                 "later; author time equal to commit time)")
        except (ValueError, RecursionError, KeyError) as exc:
            out.append(f"{info.id[:12]}: {exc}")
            break
    return out


def _root_names(store: GitStore, root: str) -> str | None:
    """The previous chain's head a new generation's root names (None when none)."""
    for line in store.commit_info(root).message.decode("utf-8", "replace").splitlines():
        if line.startswith(PREVIOUS_TRAILER):
            return line[len(PREVIOUS_TRAILER):].strip()
    return None


def check_update(store: GitStore, old: str | None, new: str) -> list[str]:
    """A journal from elsewhere moving from ``old`` (None: first seen) to ``new``, as a
    pull takes it and the pre-receive hook accepts it: every record checked
    (:func:`check_chain`), and the journal only grows: ``old`` is in ``new``'s chain, or
    ``new`` is a new generation whose root names ``old`` as the chain it follows, and that
    chain is full (a premature generation would hide the held records). A force
    push replacing records, even by one root commit, is refused (``refusals.rewritten``)."""
    out = check_chain(store, new)
    if out or old is None or old == new:
        return out
    root = new
    for info in store.walk(new):
        if info.id == old:
            return []
        root = info.id
    if _root_names(store, root) == old:
        held = sum(1 for _ in store.walk(old))
        if held >= RETAIN:
            return []
        return [f"[refusals.rewritten] {new[:12]} starts a new generation after {held} "
                f"records: a chain rolls over only when full ({RETAIN} records)"]
    return [f"[refusals.rewritten] {new[:12]} does not continue {old[:12]}: a journal only "
            f"grows (a fast-forward, or a new generation whose root names {old[:12]} in "
            f"its {PREVIOUS_TRAILER.strip()} trailer)"]


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
    previous = store.ref(PREVIOUS)
    if seen is not None and previous not in (None, seen) and \
            seen not in {i.id for i in store.walk(head)} and \
            seen in {i.id for i in store.walk(previous)}:
        # a new generation since the last push: the full chain's end first, so the root
        # of the new one names the head the remote holds
        refused = store.push_refs(url, {name: (seen, previous)})
        if name in refused:
            return refused[name]
        with lock():
            store.move_ref(TRACKING, seen, previous)
        seen = previous
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
            problems = check_update(incoming, store.ref(PULLED_PREFIX + name), head)
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
    failed = failures(store)
    if failed is not None:
        out.append(f"{failed} (state/.git/gitstate-refusals.failed): `gitstate "
                   "repair-journal` journals them")
    return out
