"""Run ledgers to and from main's remote: ``gitstate push`` and ``pull`` carry them too.

A run ref only grows (one commit per event), so both ways are fast-forward only:

* push sends every run whose ref moved since it was last seen on the remote
  (``refs/remotes/origin/runs/<id>``, the lease), in one push; a run the remote moved on
  (events recorded elsewhere) is reported, never overwritten.
* pull fetches the remote's run refs into a quarantine and replays every ledger that is new
  or grew, from its first commit (``check.replay_problems``: the tree holds only run.json,
  each event is valid for its writer and folds to the stored run.json). One run that does
  not replay refuses the whole pull of runs, and no object of it enters the repository
  (main's pull is separate and unaffected). The replay is the one rule of foreign commits
  (docs/security.md): each commit must be the one the ledger itself writes, dated forward
  and not ahead of this clock, and an ``approval_recorded`` must cite a commit of main's
  history here holding that decision (so main is pulled first). A run that diverged
  (events on both sides) is reported and left as it is; one that is behind the local ref
  is left for push.

The server side (the pre-receive hook, ``server.verify_push``) replays a pushed run the same
way and refuses a rewrite or a deletion.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.errors import Refused
from ..core.layout import BRANCH, RUN_LOCK_FILE
from ..system import faults, locking
from .check import replay_problems
from .format import PREFIX
from .validate import RunRefused, check_run_id

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from contextlib import AbstractContextManager

    from ..accept.trust import Trust
    from ..core.schema import Schema
    from ..store import GitStore

TRACKING = "refs/remotes/origin/runs/"


def push(store: GitStore, url: str,
         lock: Callable[[], AbstractContextManager[None]]) -> dict[str, Any]:
    """Push every run that moved since last seen; {pushed: [...], refused: {run: why}}.
    The push waits on the network without ``lock`` (the write lock); the tracking refs
    move under it."""
    local = store.refs_under(PREFIX)
    updates = {}
    for name, head in local.items():
        seen = store.ref(TRACKING + name)
        if seen != head:
            updates[PREFIX + name] = (seen, head)
    refused = store.push_refs(url, updates) if updates else {}
    faults.hit("push.runs_sent")
    pushed = []
    with lock():
        for ref, (seen, head) in updates.items():
            if ref not in refused:
                name = ref[len(PREFIX):]
                store.move_ref(TRACKING + name, seen, head)
                pushed.append(name)
    return {"pushed": sorted(pushed),
            "refused": {ref[len(PREFIX):]: why for ref, why in refused.items()}}


def pull(store: GitStore, url: str,
         writers: Mapping[str, tuple[str, ...]] | None = None, *,
         lock: Callable[[], AbstractContextManager[None]],
         trust: Trust | None = None) -> dict[str, Any]:
    """Fast-forward every run the remote has further; {pulled, diverged, refused}. The
    fetch waits on the network without ``lock`` (the write lock), which is then held for
    the checks and the ref moves; the remote's run names were checked by the transport
    (``layout.NAMESPACES["runs"]``) and bounded (``pull_max_new_runs``)."""
    out: dict[str, Any] = {"pulled": [], "diverged": [], "ahead": []}

    def check(incoming: GitStore, remote: dict[str, str]) -> dict[str, str]:
        accepted, bad = {}, {}
        for name, head in remote.items():
            try:
                check_run_id(name)
            except RunRefused as exc:
                bad[name] = exc.message
                continue
            mine = store.ref(PREFIX + name)
            if mine == head:
                continue
            if mine is not None and incoming.is_ancestor(head, mine):
                out["ahead"].append(name)
                continue
            if mine is not None and not incoming.is_ancestor(mine, head):
                out["diverged"].append(name)
                continue
            problems = replay_problems(incoming, name, head, writers or {},
                                       main=incoming.ref(BRANCH), foreign=True, trust=trust)
            if problems:
                bad[name] = problems[0]
            else:
                accepted[name] = head
        if bad:
            raise Refused("the remote's runs do not replay, so none was taken: " + "; ".join(
                f"{n}: {why}" for n, why in sorted(bad.items())[:5]), rule="remote.run_invalid",
                runs=sorted(bad))
        return accepted

    known = {PREFIX + name for name in store.refs_under(PREFIX)}
    with store.incoming(url, ("runs",), known=known, action="pull") as got:
        remote = {name[len(PREFIX):]: head for name, head in got.refs.items()}
        with lock():
            accepted = check(got.store, remote) if remote else {}
            if accepted:
                got.take()
            for name, head in sorted(accepted.items()):
                with locking.exclusive(store.git_dir / RUN_LOCK_FILE.format(run=name)):
                    mine = store.ref(PREFIX + name)
                    if mine is not None and not store.is_ancestor(mine, head):
                        out["diverged"].append(name)  # an event was recorded here meanwhile
                        continue
                    store.move_ref(PREFIX + name, mine, head)
                faults.hit("pull.runs_moved")
                store.move_ref(TRACKING + name, store.ref(TRACKING + name), head)
                out["pulled"].append(name)
    return out


def verify_pushed(store: GitStore, ref: str, old: str | None, new: str | None,
                  trust: Trust | None = None, *, main: str | None = None) -> list[str]:
    """The pre-receive check of one run ref update: no deletion, no rewrite, a replay
    against ``main`` (main as this push leaves it; default: the server's main now)."""
    name = ref[len(PREFIX):]
    try:
        check_run_id(name)
    except RunRefused as exc:
        return [f"{ref}: {exc.message}"]
    if new is None:
        return [f"deleting {ref} is refused: a run's ledger is kept"]
    if old is not None and not store.is_ancestor(old, new):
        return [f"{ref}: a run only grows; this push rewrites it"]
    main = main or store.ref(BRANCH)
    schema = _schema_at(store, main)
    return [f"{ref}: {p}" for p in replay_problems(
        store, name, new, dict(schema.run_writers) if schema else {}, main=main, foreign=True,
        trust=trust)]


def _schema_at(store: GitStore, commit: str | None) -> Schema | None:
    """The server's schema at main's head: the writers a pushed run's events rest on."""
    from ..core.layout import SCHEMA_FILE
    from ..core.schema import SchemaError
    from ..core.schemafile import parse_schema

    data = store.read_file(commit, SCHEMA_FILE) if commit else None
    try:
        return parse_schema(data.decode("utf-8")) if data else None
    except (UnicodeDecodeError, SchemaError):
        return None
