"""Beyond one machine: push, pull and clone over any git remote.

git hosting is the distributed engine; gitstate adds the rules:

* push moves the remote's main only if it still equals the commit last seen there
  (``refs/remotes/origin/main``, the lease; receive-pack re-checks the old value). When the
  remote moved on, the local commits since the lease are re-applied one by one on top of the
  remote's main as the same operations, each re-checked: a change whose keys the remote changed
  meanwhile (or that breaks the cap, the limits or the schema there) is refused, shown with
  both sides, and kept on ``refs/gitstate/unpushed/<time>``; then the push is tried again.
* pull is fast-forward only. A diverged or rewritten remote is reported, never merged.

What a server's pre-receive hook runs on every pushed update is gitstate/remote/server.py.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from ..accept import main as foreign
from ..approvals import steps as approvals
from ..core.errors import GitStateError, Refused, StoreError, UsageError
from ..core.layout import BRANCH, REMOTE_REF, SCHEMA_FILE, STATE_DIR, STATE_FILE
from ..core.layout import UNPUSHED_PREFIX as UNPUSHED
from ..core.model import EMPTY, State
from ..core.results import SyncResult, SyncStatus
from ..core.trailers import Change, NotAGitstateCommit, parse_message
from ..history.replay import ReplayError, apply_change
from ..store import GitStore
from ..store.transport import limits_for, unreachable
from ..system import faults
from ..write.engine import Commit, WriteEngine
from ..write.maintree import MainTree

T = TypeVar("T")


def _network(action: str, fn: Callable[..., T], *args: Any) -> T:
    try:
        return fn(*args)
    except GitStateError:
        raise
    except Exception as exc:  # dulwich raises many transport errors: named as the store does
        raise unreachable(action, exc) from exc


def _refuse_foreign(problems: list[foreign.Problem], what: str) -> None:
    if problems:
        raise Refused(f"{what} do not pass the checks every write passes, so nothing of them "
                      f"was used: {foreign.summary(problems)}", rule="remote.invalid",
                      problems=[p.to_dict() for p in problems])


def _entry(state: State, key: str) -> dict[str, Any] | None:
    entry = state.keys.get(key)
    return entry.to_dict() if entry else None


class Remote:
    """Main's remote: push, pull, status, and (remote-first mode) the engine's committer."""

    def __init__(self, engine: WriteEngine, tree: MainTree) -> None:
        self.engine = engine
        self.tree = tree
        self.reader = engine.reader
        self.store = engine.reader.store
        self.config = engine.config

    def url(self) -> str:
        url = self.store.remote_url()
        if not url:
            raise UsageError("no remote: run `gitstate remote set URL` first",
                             rule="remote.none")
        return url

    def _move_main(self, old: str, new: str, lease: str | None, what: str) -> None:
        if not self.store.move_ref(BRANCH, old, new):
            raise StoreError(f"main moved during {what}", rule="store.contention")
        self.store.move_ref(REMOTE_REF, lease, new)

    # -- push ---------------------------------------------------------------------------

    def push(self) -> SyncResult:
        """Publish local commits with a lease; re-apply them on a remote that moved on.
        The network is waited on without the write lock (a stalled remote never holds up
        a local write); the lock is taken for the rebase and the ref moves, and what was
        read before it is read again under it."""
        url = self.url()
        result = SyncResult("push", self.reader.head(), self.store.ref(REMOTE_REF))
        for _ in range(10):
            local, lease = self.reader.head(), self.store.ref(REMOTE_REF)
            if local == lease:
                result.action = "rebased" if result.rebased or result.refused \
                    else "push" if result.pushed else "up-to-date"
                result.head = result.remote = local
                return result
            if _network("push", self.store.push, url, lease, local):
                faults.hit("push.remote_moved")
                with self.engine.locked():
                    self.store.move_ref(REMOTE_REF, lease, local)
                result.pushed += sum(1 for _ in self.store.walk(local, lease))
                result.head = result.remote = local
                return result

            def check(incoming: GitStore, remote: str, lease: str | None = lease) -> None:
                if lease and not incoming.is_ancestor(lease, remote):
                    raise StoreError(f"the remote's main ({remote[:12]}) does not descend "
                                     f"from the commit last seen there ({lease[:12]}): it "
                                     "was rewritten. Nothing was pushed.",
                                     rule="remote.rewritten", remote=remote)
                # the remote's new commits become the base of ours: checked like a pull
                _refuse_foreign(foreign.check_range(incoming, lease, remote, self.config),
                                "the remote's new commits")

            with self.store.incoming(url, ("main",), action="push") as got:
                remote = got.refs.get(BRANCH)
                with self.engine.locked(), self.store.writing():
                    if self.store.ref(REMOTE_REF) != lease:
                        continue  # another push here moved it meanwhile: start again
                    self.tree.recover(False)  # as pull does (below), before a rebase
                    local = self.reader.head()  # a local write may have landed meanwhile
                    if remote is not None:
                        check(got.store, remote)
                        got.take()
                        published = self._published(lease, remote, local)
                        if published is not None:  # an earlier push, cut short, sent them
                            result.pushed += sum(1 for _ in self.store.walk(published, lease))
                            self.store.move_ref(REMOTE_REF, lease, published)
                            continue
                    rebased, refused, kept = self._rebase(lease, remote, local)
                    result.rebased += rebased
                    result.refused += refused
                    result.kept_on = result.kept_on or kept
                    self.store.move_ref(REMOTE_REF, lease, remote)
        raise StoreError("the remote kept moving; try again", rule="remote.contention")

    def _published(self, lease: str | None, remote: str, local: str) -> str | None:
        """The newest local commit since ``lease`` that the remote's main already holds
        (by object id), or None. A push killed after the remote's main moved but before
        the lease did leaves its commits there: they are recognised, not re-applied as
        changes (each would conflict with itself), and the lease moves up to them."""
        theirs = {info.id for info in self.store.walk(remote, lease)}
        return next((info.id for info in self.store.walk(local, lease) if info.id in theirs),
                    None)

    def _rebase(self, lease: str | None, remote: str | None,
                local: str) -> tuple[int, list[dict[str, Any]], str | None]:
        """Re-apply the local commits after ``lease`` on top of ``remote``; move main
        there. Each is checked as a commit arriving from elsewhere (``accept.main``: the same
        whole-state check as any write) on the remote's state."""
        store, reader = self.store, self.reader
        mine = list(store.walk(local, lease))
        mine.reverse()
        base = remote
        state = reader.state_at(remote) if remote else EMPTY
        refused: list[dict[str, Any]] = []
        applied = 0
        copies: dict[str, str] = {}  # a re-applied local commit -> its copy on the remote's
        for info in mine:
            before = reader.state_at(info.parents[0]) if info.parents else EMPTY
            after = reader.state_at(info.id)
            touched = sorted(k for k in before.keys.keys() | after.keys.keys()
                             if before.keys.get(k) != after.keys.get(k))
            moved = [k for k in touched if state.keys.get(k) != before.keys.get(k)]
            try:
                change = parse_message(info.message)
                if moved:
                    raise Refused(f"{', '.join(moved)} changed on the remote since",
                                  rule="remote.conflict")
                change, message = self._renamed(change, info.message, copies, base)
                when = max(info.time, store.commit_times(base)[1]) if base else info.time
                new_state = apply_change(state, change, when)
                files: dict[str, bytes | None] = {STATE_FILE: new_state.to_bytes()}
                if change.op == "schema":
                    files[SCHEMA_FILE] = store.read_file(info.id, SCHEMA_FILE)
                candidate = store.make_commit(base, files, message,
                                              info.author.encode(), when, 0, author_time=when)
                problems = foreign.check_range(store, base, candidate, self.config, own=True)
                if problems:
                    raise Refused(foreign.summary(problems), rule=problems[0].rule)
            except (GitStateError, NotAGitstateCommit, ReplayError) as exc:
                refused.append({
                    "commit": info.id, "reason": info.message.decode("utf-8", "replace")
                    .split("\n\n")[0], "rule": getattr(exc, "rule", "remote.conflict"),
                    "message": getattr(exc, "message", str(exc)),
                    "local": {k: _entry(after, k) for k in touched},
                    "remote": {k: _entry(state, k) for k in touched}})
                continue
            base = candidate
            copies[info.id] = candidate
            state = new_state
            applied += 1
        kept = None
        if refused:
            kept = UNPUSHED + datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
            store.move_ref(kept, None, local)
        new_head = base or local
        if new_head != local:
            # the projection forgets the commits being replaced before main moves: on
            # either side of the move it is then a prefix of main's history, and a push
            # killed in between leaves nothing that looks like a rewrite
            self.reader.projection.rebuild(store, lease)
        if not store.move_ref(BRANCH, local, new_head):
            raise StoreError("main moved during the rebase", rule="store.contention")
        faults.hit("push.rebased")
        store.checkout(new_head)
        self.reader.projection.rebuild(store, new_head)
        return applied, refused, kept

    def _renamed(self, change: Change, message: bytes, copies: dict[str, str],
                 base: str | None) -> tuple[Change, bytes]:
        """A re-applied commit that names another re-applied one — a revert of it, a
        decision made on it (``decided_on``) — names its copy, so that the one rule finds
        it on main's history. A decision whose copy differs from the commit it was made on
        in a key its policy voids on is refused: the decider never saw that value."""
        original = change
        if change.reverts in copies:
            change = dataclasses.replace(change, reverts=copies[change.reverts])
        step = dict(change.extra).get(approvals.TRAILER)
        new = change.new
        seen = new.get("decided_on") if step in ("approve", "deny") and \
            isinstance(new, dict) else None
        if isinstance(seen, str) and seen in copies:
            schema = self.reader.schema_at(base) if base else None
            policy = (schema.approvals if schema else {}).get(str(new.get("tool")))
            key = approvals.voiding_key(policy, self.reader.state_at(seen),
                                        self.reader.state_at(copies[seen]))
            if key is not None:
                raise Refused(f"{key} changed on the remote since the decision was made, and "
                              "its policy voids a decision when it changes: decide it again",
                              rule="remote.conflict")
            change = dataclasses.replace(change, new={**new, "decided_on": copies[seen]})
        return change, message if change is original else change.message()

    # -- remote-first: the engine's committer -------------------------------------------

    def prepare(self) -> None:
        """Lock held: fetch and fast-forward so that the write bases on the remote."""
        url = self.url()
        local, lease = self.reader.head(), self.store.ref(REMOTE_REF)

        def check(incoming: GitStore, remote: str) -> None:
            if remote == local:
                return
            if not incoming.is_ancestor(local, remote):
                raise Refused("remote-first mode needs local main to be published first: "
                              "run `gitstate push` (local and remote differ)",
                              rule="remote.diverged")
            _refuse_foreign(foreign.check_range(incoming, local, remote, self.config),
                            "the remote's new commits")

        remote = _network("fetch", self.store.fetch, url, check)
        if remote is None or remote == local:
            return
        self._move_main(local, remote, lease, "a remote-first fetch")
        self.tree.refresh(remote)

    def commit(self, commit: Commit) -> str | None:
        """The push is the compare-and-swap. Returns the new commit, or None when the
        remote moved (local main is then fast-forwarded, and the write starts over)."""
        url = self.url()
        base = commit.base
        new = self.store.make_commit(base, commit.files, commit.message, commit.identity,
                                     commit.when, commit.tz_offset)
        lease = self.store.ref(REMOTE_REF)
        if _network("push", self.store.push, url, base if lease else None, new):
            if base is None or not self.store.move_ref(BRANCH, base, new):
                raise StoreError("main moved during a remote-first write",
                                 rule="store.contention")
            self.store.move_ref(REMOTE_REF, lease, new)
            return new
        self.prepare()
        return None

    # -- pull and status ----------------------------------------------------------------

    def pull(self) -> SyncResult:
        """Fast-forward only; a diverged or rewritten remote is reported, never merged.
        The fetch waits on the network without the write lock; the lock is then held for
        the checks (against local main as it is then) and the ref moves."""
        url = self.url()
        with self.store.incoming(url, ("main",), action="pull") as got, \
                self.engine.locked(), self.store.writing():
            # main's crash marker is set as for a write: what a pull or a rebasing push
            # killed here leaves (a projection's temporary file) is swept by the next one,
            # and a checkout it did not finish is finished first (a hand edit is moved
            # aside, never overwritten)
            self.tree.recover(False)
            local = self.reader.head()
            lease = self.store.ref(REMOTE_REF)

            def check(incoming: GitStore, remote: str) -> None:
                """Runs on the quarantined objects: a refusal leaves none of them behind."""
                if remote == local or incoming.is_ancestor(remote, local):
                    return  # nothing new would be used
                if not incoming.is_ancestor(local, remote):
                    rewritten = lease is not None and not incoming.is_ancestor(lease, remote)
                    raise Refused(
                        f"local main {local[:12]} and the remote's {remote[:12]} have diverged"
                        + (" (the remote was rewritten)" if rewritten else "")
                        + ": nothing was merged. Push first (it re-applies local changes), or "
                        "inspect the remote with `git log` in a plain clone of it.",
                        rule="remote.rewritten" if rewritten else "remote.diverged",
                        local=local, remote=remote)
                # fast-forward: every remote commit is checked before it becomes HEAD
                _refuse_foreign(foreign.check_range(incoming, local, remote, self.config),
                                "the remote's new commits")

            remote = got.refs.get(BRANCH)
            if remote is not None:
                check(got.store, remote)
                got.take()
            result = SyncResult("up-to-date", local, remote)
            if remote is None or remote == local:
                if remote:
                    self.store.move_ref(REMOTE_REF, lease, remote)
                return result
            if self.store.is_ancestor(remote, local):
                self.store.move_ref(REMOTE_REF, lease, remote)
                result.action = "ahead"
                return result
            self._move_main(local, remote, lease, "the pull")
            faults.hit("pull.main_moved")
            self.tree.refresh(remote)
            result.action, result.head = "fast-forward", remote
            result.pulled = sum(1 for _ in self.store.walk(remote, local))
            return result

    def status(self) -> SyncStatus:
        """Where local main stands against the commit last seen on the remote (no
        network)."""
        store = self.store
        head, seen, url = self.reader.head(), store.ref(REMOTE_REF), store.remote_url()
        ahead = None if url is None else sum(1 for _ in store.walk(head, seen)) \
            if seen is None or store.is_ancestor(seen, head) else None
        behind = sum(1 for _ in store.walk(seen, head)) if seen and \
            store.is_ancestor(head, seen) else 0
        unpushed = store.git_dir / UNPUSHED
        return SyncStatus(head, url, seen, ahead, behind, self.config.sync,
                          sorted(p.name for p in unpushed.glob("*")) if unpushed.is_dir()
                          else [], self.reader.worktree_warnings())


def clone(url: str, agent_dir: Path) -> str:
    """Fill a new agent directory's state/ from an existing remote state repository;
    returns the remote's main. A failed clone removes what it made, like git clone, so
    that it can simply be retried."""
    from ..system.config import load_config
    from .githooks import install

    state_dir = agent_dir / STATE_DIR
    if state_dir.exists():
        raise UsageError(f"{state_dir} already exists; clone into a new agent directory",
                         rule="usage.exists")
    made = agent_dir if not agent_dir.exists() else state_dir
    store = GitStore.create(state_dir)
    try:
        install(store.git_dir)
        store.set_remote_url(url)
        config = load_config(agent_dir)
        store.limits = limits_for(config)

        def check(incoming: GitStore, remote: str) -> None:
            _refuse_foreign(foreign.check_range(incoming, None, remote, config),
                            "the remote's commits")

        remote = _network("clone", store.fetch, url, check)
        if remote is None:
            raise Refused(f"{url} has no main branch to clone", rule="remote.empty")
        store.move_ref(BRANCH, None, remote)
        store.move_ref(REMOTE_REF, None, remote)
        store.checkout(remote)
    except BaseException:
        store.close()
        shutil.rmtree(made, ignore_errors=True)
        raise
    store.close()
    return remote
