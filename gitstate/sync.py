"""Beyond one machine: push, pull, clone and server-side checks over any git remote.

git hosting is the distributed engine; gitstate adds the rules:

* push moves the remote's main only if it still equals the commit last seen there
  (``refs/remotes/origin/main``, the lease; receive-pack re-checks the old value). When the
  remote moved on, the local commits since the lease are re-applied one by one on top of the
  remote's main as the same operations, each re-checked: a change whose keys the remote changed
  meanwhile (or that breaks the cap, the limits or the schema there) is refused, shown with
  both sides, and kept on ``refs/gitstate/unpushed/<time>``; then the push is tried again.
* pull is fast-forward only. A diverged or rewritten remote is reported, never merged.
* ``verify_push`` is what a server's pre-receive hook runs on every pushed update.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import foreign
from .errors import GitStateError, Refused, StoreError, UsageError
from .layout import BRANCH, REMOTE_REF
from .layout import UNPUSHED_PREFIX as UNPUSHED
from .model import EMPTY, STATE_FILE, State, format_time
from .replay import ReplayError, apply_change
from .schema import SCHEMA_FILE
from .trailers import NotAGitstateCommit, parse_message

if TYPE_CHECKING:
    from .repo import StateRepo
    from .store import GitStore



@dataclass
class SyncResult:
    action: str
    head: str
    remote: str | None
    pushed: int = 0
    rebased: int = 0
    refused: list[dict[str, Any]] = field(default_factory=list)
    kept_on: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"ok": not self.refused, "action": self.action, "head": self.head,
                "remote": self.remote, "pushed": self.pushed, "rebased": self.rebased,
                "refused": self.refused, "kept_on": self.kept_on}


def _url(repo: StateRepo) -> str:
    url = repo.store.remote_url()
    if not url:
        raise UsageError("no remote: run `gitstate remote set URL` first", rule="remote.none")
    return url


def _network(action: str, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except GitStateError:
        raise
    except Exception as exc:  # dulwich raises many transport errors; all mean "unreachable"
        hint = ""
        if "CERTIFICATE_VERIFY_FAILED" in str(exc):
            hint = (". The server's certificate is not trusted: name its CA as git does, "
                    "with http.sslCAInfo in the state repository's git config or in your "
                    "~/.gitconfig (for clone)")
        raise StoreError(f"{action}: the remote is unreachable or refused ({exc}){hint}",
                         rule="remote.unreachable") from exc


def push(repo: StateRepo) -> SyncResult:
    """Publish local commits with a lease; re-apply them on a remote that moved on."""
    url = _url(repo)
    with repo._mutex, repo.store.lock():
        result = SyncResult("push", repo.head(), repo.store.ref(REMOTE_REF))
        for _ in range(10):
            local, lease = repo.head(), repo.store.ref(REMOTE_REF)
            if local == lease:
                result.action = "rebased" if result.rebased or result.refused else "up-to-date"
                result.head = result.remote = local
                return result
            if _network("push", repo.store.push, url, lease, local):
                repo.store.move_ref(REMOTE_REF, lease, local)
                result.pushed += sum(1 for _ in repo.store.walk(local, lease))
                result.head = result.remote = local
                return result
            def check(incoming: GitStore, remote: str, lease: str | None = lease) -> None:
                if lease and not incoming.is_ancestor(lease, remote):
                    raise StoreError(f"the remote's main ({remote[:12]}) does not descend from "
                                     f"the commit last seen there ({lease[:12]}): it was "
                                     "rewritten. Nothing was pushed.", rule="remote.rewritten",
                                     remote=remote)
                # the remote's new commits become the base of ours: checked like a pull
                _refuse_foreign(foreign.check_range(incoming, lease, remote, repo.config),
                                "the remote's new commits")

            remote = _network("fetch", repo.store.fetch, url, check)
            rebased, refused, kept = _rebase(repo, lease, remote, local)
            result.rebased += rebased
            result.refused += refused
            result.kept_on = result.kept_on or kept
            repo.store.move_ref(REMOTE_REF, lease, remote)
        raise StoreError("the remote kept moving; try again", rule="remote.contention")


def _rebase(repo: StateRepo, lease: str | None, remote: str | None,
            local: str) -> tuple[int, list[dict[str, Any]], str | None]:
    """Re-apply the local commits after ``lease`` on top of ``remote``; move main there."""
    from .projection import Projection

    mine = list(repo.store.walk(local, lease))
    mine.reverse()
    base = remote
    state = repo.state_at(remote) if remote else EMPTY
    refused: list[dict[str, Any]] = []
    applied = 0
    for info in mine:
        before = repo.state_at(info.parents[0]) if info.parents else EMPTY
        after = repo.state_at(info.id)
        touched = sorted(k for k in before.keys.keys() | after.keys.keys()
                         if before.keys.get(k) != after.keys.get(k))
        moved = [k for k in touched if state.keys.get(k) != before.keys.get(k)]
        try:
            change = parse_message(info.message)
            if moved:
                raise Refused(f"{', '.join(moved)} changed on the remote since",
                              rule="remote.conflict")
            new_state = apply_change(state, change, info.time)
            files: dict[str, bytes | None] = {STATE_FILE: new_state.to_bytes()}
            if change.op == "schema":
                files[SCHEMA_FILE] = repo.store.read_file(info.id, SCHEMA_FILE)
            when = max(info.time, repo.store.commit_times(base)[1]) if base else info.time
            candidate = repo.store.make_commit(base, files, info.message,
                                               info.author.encode(), when, 0, author_time=when)
            problems = foreign.check_range(repo.store, base, candidate, repo.config)
            if problems:  # the same checks as any write, on the remote's state
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
        state = new_state
        applied += 1
    kept = None
    if refused:
        kept = UNPUSHED + datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        repo.store.move_ref(kept, None, local)
    new_head = base or local
    if not repo.store.move_ref(BRANCH, local, new_head):
        raise StoreError("main moved during the rebase", rule="store.contention")
    repo.store.checkout(new_head)
    Projection(repo.state_dir).rebuild(repo.store, new_head)
    return applied, refused, kept


def _entry(state: State, key: str) -> dict[str, Any] | None:
    entry = state.keys.get(key)
    return entry.to_dict() if entry else None


def _refuse_foreign(problems: list[foreign.Problem], what: str) -> None:
    if problems:
        raise Refused(f"{what} do not pass the checks every write passes, so nothing of them "
                      f"was used: {foreign.summary(problems)}", rule="remote.invalid",
                      problems=[p.to_dict() for p in problems])


def before_remote_first_write(repo: StateRepo) -> None:
    """remote-first mode, lock held: fetch and fast-forward so the write bases on the remote."""
    url = _url(repo)
    local, lease = repo.head(), repo.store.ref(REMOTE_REF)

    def check(incoming: GitStore, remote: str) -> None:
        if remote == local:
            return
        if not incoming.is_ancestor(local, remote):
            raise Refused("remote-first mode needs local main to be published first: run "
                          "`gitstate push` (local and remote differ)", rule="remote.diverged")
        _refuse_foreign(foreign.check_range(incoming, local, remote, repo.config),
                        "the remote's new commits")

    remote = _network("fetch", repo.store.fetch, url, check)
    if remote is None or remote == local:
        return
    repo.store.move_ref(BRANCH, local, remote)
    repo.store.move_ref(REMOTE_REF, lease, remote)
    _refresh(repo, remote)


def _refresh(repo: StateRepo, head: str) -> None:
    """After main moved by sync: the working tree, schema cache and projection follow."""
    repo.store.checkout(head)
    repo._refresh_schema_cache(head)
    repo.projection.catch_up(repo.store, head)


def commit_remote_first(repo: StateRepo, base: str, files: dict[str, bytes | None],
                        message: bytes, identity: bytes, when: int, tz: int) -> str | None:
    """remote-first mode: the push is the compare-and-swap. Returns the new commit, or None
    when the remote moved (local main is then fast-forwarded, and the write starts over)."""
    url = _url(repo)
    new = repo.store.make_commit(base, files, message, identity, when, tz)
    lease = repo.store.ref(REMOTE_REF)
    if _network("push", repo.store.push, url, base if lease else None, new):
        if not repo.store.move_ref(BRANCH, base, new):
            raise StoreError("main moved during a remote-first write", rule="store.contention")
        repo.store.move_ref(REMOTE_REF, lease, new)
        return new
    before_remote_first_write(repo)
    return None


def pull(repo: StateRepo) -> SyncResult:
    """Fast-forward only; a diverged or rewritten remote is reported, never merged."""
    url = _url(repo)
    with repo._mutex, repo.store.lock():
        local = repo.head()
        lease = repo.store.ref(REMOTE_REF)

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
            _refuse_foreign(foreign.check_range(incoming, local, remote, repo.config),
                            "the remote's new commits")

        remote = _network("fetch", repo.store.fetch, url, check)
        result = SyncResult("up-to-date", local, remote)
        if remote is None or remote == local:
            if remote:
                repo.store.move_ref(REMOTE_REF, lease, remote)
            return result
        if repo.store.is_ancestor(remote, local):
            repo.store.move_ref(REMOTE_REF, lease, remote)
            result.action = "ahead"
            return result
        # fast-forward: every remote commit is replayed-checked before it becomes HEAD
        if not repo.store.move_ref(BRANCH, local, remote):
            raise StoreError("main moved during the pull", rule="store.contention")
        repo.store.move_ref(REMOTE_REF, lease, remote)
        _refresh(repo, remote)
        result.action, result.head = "fast-forward", remote
        result.pushed = sum(1 for _ in repo.store.walk(remote, local))
        return result


def status(repo: StateRepo) -> dict[str, Any]:
    """Where local main stands against the commit last seen on the remote (no network)."""
    head, seen = repo.head(), repo.store.ref(REMOTE_REF)
    ahead = sum(1 for _ in repo.store.walk(head, seen)) if seen is None or \
        repo.store.is_ancestor(seen, head) else None
    behind = sum(1 for _ in repo.store.walk(seen, head)) if seen and \
        repo.store.is_ancestor(head, seen) else 0
    unpushed_refs = [p.name for p in (repo.state_dir / ".git" / "refs" / "gitstate" /
                                      "unpushed").glob("*")] if (
        repo.state_dir / ".git" / "refs" / "gitstate" / "unpushed").is_dir() else []
    return {"head": head, "remote_url": repo.store.remote_url(), "remote_seen": seen,
            "ahead": ahead, "behind": behind, "sync": repo.config.sync,
            "unpushed_refs": sorted(unpushed_refs),
            "hand_edits": [w for w in repo.worktree_warnings()]}


def clone(url: str, agent_dir: Path) -> StateRepo:
    """A new agent directory from an existing remote state repository."""
    from .githooks import install
    from .repo import StateRepo
    from .store import GitStore

    state_dir = agent_dir / "state"
    if state_dir.exists():
        raise UsageError(f"{state_dir} already exists; clone into a new agent directory",
                         rule="usage.exists")
    # a failed clone removes what it made, like git clone, so that it can simply be retried
    made = agent_dir if not agent_dir.exists() else state_dir
    store = GitStore.create(state_dir)
    try:
        install(store.git_dir)
        store.set_remote_url(url)
        from .config import load_config

        config = load_config(agent_dir)

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
    repo = StateRepo(agent_dir)
    repo.rebuild_history()
    repo._refresh_schema_cache(remote)
    return repo


# -- server side --------------------------------------------------------------------------

def verify_push(git_dir: Path, old: str, new: str, ref: str) -> list[str]:
    """What a pre-receive hook runs for one ref update in a (bare) server repository."""
    from .store import ZERO, GitStore

    zero = ZERO.decode()
    if ref != BRANCH:
        return [f"{ref}: only {BRANCH} holds gitstate state"]
    if new == zero:
        return [f"deleting {ref} is refused"]
    store = GitStore(git_dir)
    quarantine = os.environ.get("GIT_OBJECT_DIRECTORY")
    if quarantine:
        store.use_quarantine(quarantine)
    try:
        return [str(p) for p in foreign.check_range(store, None if old == zero else old, new)]
    finally:
        store.close()


def fleet(root: Path, expiring_hours: float = 4.0,
          progress: Any = None) -> list[dict[str, Any]]:
    """One row per agent directory under ``root`` (directories holding state/.git)."""
    from .audit import verify
    from .repo import StateRepo

    agents = sorted({p.parent.parent for p in root.glob("**/state/.git")})
    rows = []
    for agent in (progress(agents) if progress else agents):
        row: dict[str, Any] = {"agent": str(agent.relative_to(root))}
        try:
            with StateRepo(agent) as repo:
                now = repo.now()
                state = repo.state()
                live = state.live(now)
                last = repo.history(1)[0]
                soon = format_time(datetime.fromtimestamp(
                    now.timestamp() + expiring_hours * 3600, UTC))
                st = status(repo)
                failed = [c.name for c in verify(repo, use_git=False) if not c.ok]
                row.update({
                    "live_keys": len(live),
                    "last_change": {"time": last["time"], "actor": last["actor"],
                                    "reason": last["reason"].splitlines()[0]},
                    "expiring": sorted(k for k, e in live.items()
                                       if e.expires_at and e.expires_at <= soon),
                    "verify": "ok" if not failed else "FAIL " + ",".join(failed),
                    "ahead": st["ahead"], "behind": st["behind"],
                    "remote": st["remote_url"]})
        except GitStateError as exc:
            row.update({"error": f"[{exc.rule}] {exc.message}"})
        rows.append(row)
    return rows
