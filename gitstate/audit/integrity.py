"""``verify``: every integrity check of one agent's state repository, each failure with
what to do about it. The objects (git's own fsck included), durability, the packing run,
git's config and stray files; the history (linear, every commit with a reason and
trailers, the trailers' replay reproducing HEAD's state, the projection matching the log,
the tip not rewritten); the working tree; the refs beside main (run ledgers, the refusal
journal); a path remote's stale locks. Unlike the views (gitstate/audit/views.py), which
read the projection, these re-derive from git what they compare. ``quick_checks`` is the
subset whose cost does not grow with the history (the fleet view's default).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import HistoryRewritten, LockTimeout, StoreError
from ..core.layout import stray_files
from ..core.model import STATE_FILE, State
from ..core.trailers import NotAGitstateCommit, parse_message
from ..history.projection import Mark, record
from ..history.replay import ReplayError, apply_change
from ..system import gitcli, safefile

if TYPE_CHECKING:
    from ..api.repo import StateRepo
    from ..store import WorktreeStatus


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""
    remedy: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.name, "ok": self.ok, "detail": self.detail,
                "remedy": self.remedy}


def verify(repo: StateRepo, use_git: bool = True) -> list[Check]:
    """Every integrity check; each failure says what to do about it."""
    checks: list[Check] = []
    checks += _object_checks(repo, use_git)
    try:
        checks += _history_checks(repo, *_snapshot(repo))
    except StoreError as exc:
        checks.append(Check("history-readable", False, exc.message,
                            "restore the damaged objects (see `objects`) from a mirror"))
    return checks + _side_ref_checks(repo) + [remote_lock_check(repo)]


def remote_lock_check(repo: StateRepo) -> Check:
    """A path remote's ref locks that a killed push left (git never removes another
    process's lock; every later push of that ref is refused as ``remote.locked``)."""
    from ..store.pushes import stale_remote_locks

    url = repo.store.remote_url()
    locks = stale_remote_locks(url) if url else []
    return Check("remote-locks", not locks, ", ".join(str(p) for p in locks[:5]),
                 "a push to the remote was killed inside git's receive-pack and left these; "
                 "if no push is running, remove them (" + " ".join(
                     f"`rm '{p}'`" for p in locks[:5]) + "), then `gitstate push`"
                 if locks else "")


def _side_ref_checks(repo: StateRepo) -> list[Check]:
    """The refs beside main: every run ledger replays, the refusal journal reads."""
    from ..history import refusals
    from ..history.backlog import failures

    bad = repo.runs.verify_all()
    detail = "; ".join(f"{run}: {problems[0]}" for run, problems in list(bad.items())[:5])
    journal = refusals.problems(repo.store)
    backlog = "run `gitstate repair-journal` to journal the records that could not be " \
        "written; " if failures(repo.store) is not None else ""
    return [Check("runs", not bad, detail, "inspect the run with `gitstate run verify RUN` and "
                  "`git log runs/RUN`; a ledger that does not replay was written by another "
                  "tool" if bad else ""),
            Check("refusals", not journal, "; ".join(journal[:5]),
                  backlog + "a record gitstate did not write in the refusal journal "
                  "(refs/gitstate/refusals) is named above; see `gitstate log --refused`"
                  if journal else "")]


def _object_checks(repo: StateRepo, use_git: bool) -> list[Check]:
    from ..write.maintenance import wait_idle

    # packing moves objects from loose files into a pack: checking meanwhile would report
    # objects as missing that are only in flight
    wait_idle(repo.state_dir / ".git")
    from ..store.durability import describe

    checks = [Check("durability", True, f"{repo.durability} on {describe(repo.state_dir)} "
                    f"([gitstate] durability = {repo.config.durability}); "
                    f"{repo.store.pack_count()} packs", "")]
    checks.append(maintenance_check(repo.state_dir))
    problems = repo.store.object_problems()
    checks.append(Check("objects", not problems, "; ".join(problems[:5]),
                        "restore the named objects from a mirror or backup" if problems else ""))
    checks.append(git_config_check(repo.state_dir))
    if use_git and gitcli.git_binary():
        out = gitcli.run(repo.state_dir, ["fsck", "--strict", "--no-dangling"], timeout=3600)
        bad = out.returncode != 0 or "error" in out.stderr.lower()
        checks.append(Check("git-fsck", not bad, (out.stdout + out.stderr).strip()[:500],
                            "restore the repository from a mirror; see the fsck output"
                            if bad else ""))
    return checks


def maintenance_check(state_dir: Path) -> Check:
    from ..write.maintenance import last_failure

    failure = last_failure(state_dir / ".git")
    return Check("maintenance", failure is None, f"the last packing run failed: {failure}"
                 if failure else "", "run `gitstate gc` (state/.git/gitstate-gc.log has "
                 "what the last automatic run printed)" if failure else "")


def git_config_text(state_dir: Path) -> str:
    """state/.git/config as text (OSError when it cannot be read as a plain file)."""
    return safefile.read_regular(state_dir / ".git" / "config", 1 << 20).decode(
        "utf-8", "replace")


def git_config_check(state_dir: Path) -> Check:
    try:
        risky = gitcli.dangerous_settings(git_config_text(state_dir))
    except OSError as exc:
        risky = [f"unreadable: {exc}"]
    return Check("git-config", not risky, ", ".join(risky[:10]),
                 "remove these settings from state/.git/config: each names a program "
                 "git would run (gitstate's own git processes override them)"
                 if risky else "")


def _snapshot(repo: StateRepo) -> tuple[str, Mark, WorktreeStatus]:
    """HEAD, the projection's mark and the working tree's status, read together under the
    write lock so that a write landing meanwhile is not reported as damage. In a read-only
    directory, or beside a wedged writer, they are read without it."""
    with contextlib.ExitStack() as stack:
        with contextlib.suppress(OSError, LockTimeout):
            stack.enter_context(repo.store.lock(timeout=10))
        mark, head = repo.reader.snapshot()
        return head, mark, repo.store.worktree_status(head)


def _history_checks(repo: StateRepo, head: str, mark: Mark,
                    status: WorktreeStatus) -> list[Check]:
    checks = []

    walk = list(repo.store.walk(head))
    walk.reverse()
    no_reason = [c.id[:12] for c in walk if not _reason(c.message)]
    merges = [c.id[:12] for c in walk if len(c.parents) > 1]
    checks.append(Check("linear", not merges, ", ".join(merges[:10]),
                        "merge commits were made outside gitstate: their other parents are "
                        "hidden from the first-parent audit trail; inspect them with `git log "
                        "--graph` and revert what they brought in" if merges else ""))
    foreign = []
    state = State()
    replay_error = ""
    for c in walk:
        try:
            change = parse_message(c.message)
        except NotAGitstateCommit:
            foreign.append(c.id[:12])
            continue
        try:
            state = apply_change(state, change, c.time)
        except (ReplayError, KeyError, TypeError) as exc:
            replay_error = f"{c.id[:12]}: {exc}"
            break
    checks.append(Check("reasons", not no_reason, ", ".join(no_reason[:10]),
                        "commits without a reason were made outside gitstate; revert them "
                        "with `gitstate revert`" if no_reason else ""))
    checks.append(Check("trailers", not foreign, ", ".join(foreign[:10]),
                        "commits without gitstate trailers were made outside gitstate "
                        "(e.g. `git commit`); revert them and write through gitstate"
                        if foreign else ""))
    head_bytes = repo.store.read_file(head, STATE_FILE) or b""
    replay_ok = not replay_error and state.to_bytes() == head_bytes
    checks.append(Check(
        "replay", replay_ok,
        replay_error or ("" if replay_ok else "replaying the trailers does not reproduce "
                         f"{STATE_FILE} at HEAD"),
        "" if replay_ok else "HEAD's state was changed without matching trailers; find the "
        "commit with `gitstate log` and revert it"))

    checks += _tail_checks(repo, head, mark, status)
    expected = [record(c) for c in walk]
    actual = repo.projection.all(mark.end)
    same = actual == expected
    detail = "" if same else (f"{len(actual)} lines for {len(expected)} commits"
                              if len(actual) != len(expected) else "lines differ from the log")
    checks.append(Check("projection", same, detail,
                        "" if same else "`gitstate history --rebuild`"))
    return checks


def _tail_checks(repo: StateRepo, head: str, mark: Mark,
                 status: WorktreeStatus) -> list[Check]:
    """The checks that read no history: stray files, the working tree, a rewritten tip."""
    checks = [stray_check(repo.state_dir)]
    checks.append(Check(
        "worktree", status.clean,
        "" if status.clean else ("hand-edited: " + ", ".join(
            name + (f" (no valid state: {why})" if why else "") for name, why in
            ((n, dict(status.invalid).get(n, "")) for n in status.hand_edited))
                                 if status.hand_edited else _leftover(repo, head)),
        "" if status.clean else ("`gitstate adopt --reason ...` or `gitstate adopt --discard`"
                                 if status.hand_edited else "`gitstate pull` or any write "
                                 "finishes the checkout")))

    try:
        repo.projection.missing(repo.store, head, mark.last)
        rewritten = ""
    except HistoryRewritten as exc:
        rewritten = exc.message
    checks.append(Check("history-not-rewritten", not rewritten, rewritten,
                        "the branch was reset or force-moved outside gitstate; compare with "
                        "`git reflog` and a mirror, then `gitstate history --rebuild` to accept"
                        if rewritten else ""))
    return checks


def _leftover(repo: StateRepo, head: str) -> str:
    stamp = repo.store.stamp()
    if stamp is None or stamp[0] == head:
        return "left behind by a killed write"
    return (f"still commit {stamp[0][:12]}'s files, not HEAD's ({head[:12]}): a pull, push "
            "or write was killed after main moved and before its checkout (not a hand edit)")


def stray_check(state_dir: Path) -> Check:
    stray = stray_files(state_dir)
    return Check("stray-files", not stray, ", ".join(stray[:10]),
                 "files gitstate neither wrote nor reads sit in the state directory "
                 "(a plain git tool might read them, e.g. a .gitconfig): remove them"
                 if stray else "")


def quick_checks(repo: StateRepo) -> list[Check]:
    """verify's checks whose cost does not grow with the history or the objects: the
    packing run, git's config, stray files, the working tree and a rewritten tip (fleet's
    default; ``verify`` runs them all)."""
    try:
        return [maintenance_check(repo.state_dir), git_config_check(repo.state_dir),
                *_tail_checks(repo, *_snapshot(repo))]
    except StoreError as exc:
        return [Check("history-readable", False, exc.message,
                      "restore the damaged objects from a mirror")]


def _reason(message: bytes) -> str:
    try:
        return parse_message(message).reason.strip()
    except NotAGitstateCommit:
        return message.decode("utf-8", "replace").strip()
