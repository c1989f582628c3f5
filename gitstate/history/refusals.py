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
record's fields by the input rules (the record itself, its fields and its commit bytes, is
``refusalrecord.py``'s); readers skip a record that fails them as damaged, with the problem
named.

Recording is best effort by design: a refusal is answered to the caller whether or not the
journal could be written (a full disk must not turn a clean refusal into a crash), and a
record that could not be written is kept in ``.git/gitstate-refusals.failed``, which
``verify`` reports until ``gitstate repair-journal`` (:func:`repair`) journals it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import layout
from ..core.errors import Refused, StoreError
from ..system import locking, safefile
from .backlog import failed as _failed
from .backlog import failures
from .refusalrecord import PREVIOUS_TRAILER, keep, parse, written

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
_BASELINE_ENV = "GITSTATE_BENCH_NO_REFUSAL_JOURNAL"


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
            if previous is not None and not layout.is_commit_id(previous):
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
