"""LangGraph threads to and from main's remote: ``push`` / ``pull`` / ``clone`` carry a
thread's refs when asked (``--thread ID``, or ``--threads`` for all), as run ledgers travel
(gitstate/runs/sync.py), and resume on the other side (docs/langgraph.md, "Threads travel").

A thread's ref only grows, so both ways are fast-forward only:

* push sends each asked-for thread ref that moved since it was last seen on the remote
  (``refs/remotes/origin/threads/...``, the lease), in one push; one the remote moved on
  is reported, never overwritten. Pending writes still in a thread's journal (an
  interrupted super-step) are not in a commit: ``GitCheckpointSaver.push`` and the CLI
  commit them first (the saver's ``commit_pending_writes``); push reports threads that
  still have some under ``pending``.
* pull fetches the remote's thread refs into a quarantine and checks every new commit of
  each asked-for thread with the one rule of foreign commits (gitstate/threads/check.py) before
  any of it is used; one thread that fails refuses the whole pull of threads, and no object
  of it enters the repository. A thread that diverged is reported and left as it is; one
  behind the local ref is left for push.

The server side (the pre-receive hook, ``server.verify_push``) checks a pushed thread the
same way and refuses a rewrite or a deletion.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..core import layout
from ..core.errors import InvalidInput, Refused
from ..system import locking
from .check import check_thread, parse_ref
from .format import PREFIX, check_ids, check_new_thread, digest
from .journal import Journal
from .wal import Shard, WriteAheadLog, shard_of

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from ..store import GitStore

TRACKING = layout.THREADS_TRACKING_PREFIX


Threads = Sequence[str] | bool  # the thread ids asked for, or True: all


def _chosen(refs: dict[str, str], threads: Threads) -> dict[str, tuple[str, str]]:
    """Full ref name -> (thread id, head) of the checkpoints refs of ``threads`` among
    ``refs`` (names under PREFIX)."""
    out = {}
    for rest, head in refs.items():
        where = parse_ref(PREFIX + rest)
        if where is not None and (threads is True or (threads and where[0] in threads)):
            out[PREFIX + rest] = (where[0], head)
    return out


def _lock(store: GitStore, thread_id: str) -> AbstractContextManager[int]:
    return locking.exclusive(store.git_dir / layout.THREAD_LOCK_FILE.format(
        digest=digest(thread_id)))


def _shown(ref: str, name: str) -> str:
    """``name`` (a thread ref's id, or the ref) as a refusal shows it: never when the
    ref's thread id or namespace is one the saver would refuse (a token, a control
    character); the ref's digest stands for it then."""
    where = parse_ref(ref)
    try:
        if where is not None:
            check_ids(*where)
    except InvalidInput:
        return f"<thread ref {digest(ref)}, its name withheld>"
    return name


def _look_alike(thread: str, mine: str | None, here: dict[str, str],
                others: set[str]) -> list[str]:
    """A thread new to this repository must not look like one it has (``here``: its refs
    under PREFIX) or one arriving with it (``others``: this pull's, this push's)
    (``format.check_new_thread``, as a put of that id is checked)."""
    threads = {where[0] for where in map(parse_ref, [PREFIX + r for r in here])
               if where is not None}
    if mine is not None or thread in threads:
        return []
    try:
        check_new_thread(thread, sorted(threads | others))  # (its own id is skipped)
    except InvalidInput as exc:
        return [f"[{exc.rule}] {exc.message}"]
    return []


def asked(store: GitStore, threads: Threads) -> list[str]:
    """The ids of this repository's threads that ``threads`` asks for."""
    return sorted({t for t, _ in _chosen(store.refs_under(PREFIX), threads).values()})


def pending(store: GitStore, thread_id: str) -> bool:
    """Whether the thread has pending writes not yet in a commit."""
    if Journal(store.git_dir / layout.THREAD_JOURNAL_FILE.format(
            digest=digest(thread_id))).read():
        return True
    shard = Shard(store.git_dir, shard_of(digest(thread_id)))
    try:
        return bool(shard.pending_of(thread_id))
    finally:
        shard.close()


def replayed(store: GitStore) -> None:
    """What the write-ahead log holds and git lacks (after a power loss) put back into
    git before threads travel (gitstate/threads/wal.py), as a saver does on opening."""
    log = WriteAheadLog(store)
    try:
        log.replay_all()
    finally:
        log.close()


def push(store: GitStore, url: str, threads: Threads,
         lock: Callable[[], AbstractContextManager[None]]) -> dict[str, Any]:
    """Push the asked-for threads that moved since last seen: {pushed, refused, pending}."""
    replayed(store)
    local = _chosen(store.refs_under(PREFIX), threads)
    updates = {}
    for ref, (_thread, head) in local.items():
        seen = store.ref(TRACKING + ref[len(PREFIX):])
        if seen != head:
            updates[ref] = (seen, head)
    refused = store.push_refs(url, updates) if updates else {}
    pushed = []
    with lock():
        for ref, (seen, head) in updates.items():
            if ref not in refused:
                store.move_ref(TRACKING + ref[len(PREFIX):], seen, head)
                pushed.append(local[ref][0])
    return {"pushed": sorted(set(pushed)),
            "refused": {local[ref][0]: why for ref, why in refused.items()},
            "pending": sorted({t for t, _ in local.values() if pending(store, t)})}


def pull(store: GitStore, url: str, threads: Threads,
         lock: Callable[[], AbstractContextManager[None]]) -> dict[str, Any]:
    """Fast-forward the asked-for threads the remote has further: {pulled, diverged,
    ahead}; Refused (``remote.thread_invalid``) when one does not pass the rule."""
    replayed(store)
    out: dict[str, Any] = {"pulled": [], "diverged": [], "ahead": []}
    known = {PREFIX + rest for rest in store.refs_under(PREFIX)}
    with store.incoming(url, ("threads",), known=known, action="pull") as got:
        remote = _chosen({n[len(PREFIX):]: h for n, h in got.refs.items()}, threads)
        with lock():
            accepted: dict[str, tuple[str, str | None, str]] = {}
            bad: dict[str, str] = {}
            for ref, (thread, head) in sorted(remote.items()):
                mine = store.ref(ref)
                if mine == head:
                    continue
                if mine is not None and got.store.is_ancestor(head, mine):
                    out["ahead"].append(thread)
                    continue
                if mine is not None and not got.store.is_ancestor(mine, head):
                    out["diverged"].append(thread)
                    continue
                problems = check_thread(got.store, ref, mine, head) or _look_alike(
                    thread, mine, store.refs_under(PREFIX), {t for t, _m, _h in
                                                             accepted.values()})
                if problems:
                    bad[_shown(ref, thread)] = str(problems[0])
                else:
                    accepted[ref] = (thread, mine, head)
            if bad:
                raise Refused("the remote's threads do not pass the rule of foreign commits, "
                              "so none was taken: " + "; ".join(
                                  f"{t}: {why}" for t, why in sorted(bad.items())[:5]),
                              rule="remote.thread_invalid", threads=sorted(bad))
            if accepted:
                got.take()
            for ref, (thread, mine, head) in accepted.items():
                with _lock(store, thread):
                    if store.ref(ref) != mine:
                        out["diverged"].append(thread)  # a checkpoint was written meanwhile
                        continue
                    store.move_ref(ref, mine, head)
                tracking = TRACKING + ref[len(PREFIX):]
                store.move_ref(tracking, store.ref(tracking), head)
                out["pulled"].append(thread)
    for key in out:
        out[key] = sorted(set(out[key]))
    return out


def verify_pushed(store: GitStore, ref: str, old: str | None, new: str | None,
                  pushed: Sequence[str] = ()) -> list[str]:
    """The pre-receive check of one thread ref update: no deletion, no rewrite, every new
    commit re-derived (gitstate/threads/check.py), a new thread's id like none the server
    has nor any of the thread refs ``pushed`` with it creates (the hook passes them)."""
    where = parse_ref(ref)
    if where is None:
        return [f"{ref[:200]!r}: [remote.ref_name] not a thread ref the saver writes "
                "(refs/gitstate/threads/<thread>/<ns>/checkpoints)"]
    shown = _shown(ref, ref)
    if new is None:
        return [f"deleting {shown} is refused: a thread's history is kept"]
    arriving = {w[0] for w in map(parse_ref, pushed) if w is not None}
    problems = [str(p) for p in check_thread(store, ref, old, new)] or _look_alike(
        where[0], old, store.refs_under(PREFIX), arriving)
    return [f"{shown}: {p}" for p in problems]
