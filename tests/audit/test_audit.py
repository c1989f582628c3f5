"""Specification of the auditor's views on a repository of 1,000+ changes, and tampering."""

from __future__ import annotations

import json
import random
import shutil
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.audit import integrity
from gitstate.audit import views as audit
from gitstate.core.errors import CasMismatch, HistoryRewritten, KeyCapReached, Refused
from gitstate.core.model import STATE_FILE, State
from tests.helpers import Clock, commit_count, git, run_cli

START = datetime(2026, 8, 13, 0, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[dict[str, object]]]]:
    """1,000+ random changes, including reverts and reverts of reverts; and the model.
    Built in the fast durability mode: what is tested here is the audit trail, not the
    flushes (test_write_path.py and test_reliability.py test those)."""
    agent = tmp_path_factory.mktemp("big") / "agent"
    agent.mkdir(parents=True)
    (agent / "config.toml").write_text('[gitstate]\ndurability = "fast"\n')
    clock = Clock(START)
    rng = random.Random(7)
    model: list[dict[str, object]] = []  # (commit, key, value-after) per change
    with StateRepo.init(agent, clock=clock, actor="agent") as repo:
        reverts = 0
        while len(model) < 1000:
            clock.advance(minutes=1)
            roll = rng.random()
            key = f"k{rng.randrange(12)}"
            try:
                if roll < 0.65:
                    r = repo.set(key, rng.randrange(1000), f"set {key} #{len(model)}",
                                 ttl_hours=rng.choice([None, 1, 24]))
                elif roll < 0.75:
                    r = repo.clear(key, f"clear {key} #{len(model)}")
                elif roll < 0.85:
                    r = repo.handoff(f"note #{len(model)}")
                else:
                    target = model[-1]["commit"] if model else None
                    if target is None:
                        continue
                    r = repo.revert(str(target), f"revert #{len(model)}")
                    reverts += 1
            except Refused:
                continue
            model.append({"commit": r.commit, "op": r.op, "key": r.key})
        assert reverts > 50
    yield agent, model


def test_log_is_the_chain_newest_first(big: tuple[Path, list[dict[str, object]]]) -> None:
    """log lists every change newest first; --key and -n filter; JSON lines carry the fields."""
    agent, model = big
    with StateRepo(agent) as repo:
        everything = list(audit.log(repo))
        assert [r["commit"] for r in everything[:-1]] == [m["commit"] for m in reversed(model)]
        only = list(audit.log(repo, key="k3", limit=20))
        assert len(only) == 20 and all(r["key"] == "k3" for r in only)
        fifth = datetime.fromisoformat(str(everything[4]["time"]).replace("Z", "+00:00"))
        assert len(list(audit.log(repo, since=fifth))) == 5
    out = run_cli("log", "--key", "k3", "-n", "5", "--json", agent_dir=agent)
    rows = json.loads(out.stdout)["changes"]
    assert len(rows) == 5
    for row in rows:
        assert set(row) >= {"commit", "parent", "time", "actor", "op", "key", "old", "new",
                            "reason", "expires_at", "reverts"}


def test_revert_chains_are_recorded(big: tuple[Path, list[dict[str, object]]]) -> None:
    """Revert commits name the reverted commit; some revert a revert."""
    agent, _ = big
    with StateRepo(agent) as repo:
        history = repo.full_history()
    by_commit = {r["commit"]: r for r in history}
    reverts = [r for r in history if r["reverts"]]
    assert reverts
    assert any(by_commit[r["reverts"]]["reverts"] for r in reverts)  # a revert of a revert


def test_show_diff_blame_and_verify(big: tuple[Path, list[dict[str, object]]]) -> None:
    """show, diff and blame agree with the log; verify passes on the big history."""
    agent, model = big
    with StateRepo(agent) as repo:
        head = repo.head()
        shown = audit.show(repo, audit.resolve(repo, "HEAD~3"), patch=True)
        assert shown["commit"] == model[-4]["commit"]
        assert "diff --git a/working_state.json" in shown["patch"] or shown["op"] == "handoff"
        assert audit.resolve(repo, head[:8]) == head
        first = repo.full_history()[1]["commit"]
        d = audit.diff_states(repo.state_at(first), repo.state())
        assert d.added or d.changed or d.removed
        blame = audit.blame(repo)
        state = repo.state()
        assert set(blame) == set(state.keys)
        for key, row in blame.items():
            newest = next(audit.log(repo, key=key, limit=1))
            assert row["commit"] == newest["commit"]
        assert all(c.ok for c in integrity.verify(repo)), [c for c in integrity.verify(repo) if not c.ok]


def test_at_reproduces_what_a_wake_up_saw(agent_dir: Path, clock: Clock) -> None:
    """--at 11:03 gives the state and the exact section a wake-up received then."""
    with StateRepo.init(agent_dir, clock=clock) as repo:
        repo.set("stop_loss.2317", 262, "跌破即出場", ttl_hours=4.4)   # 09:04 Taipei
        clock.advance(minutes=119)                                      # 11:03
        seen = repo.render(now=clock.now)
        clock.advance(minutes=30)
        repo.set("stop_loss.2317", 257, "review")
        clock.advance(hours=6)
    out = run_cli("render", "--at", "2026-08-13T11:03:00+08:00", agent_dir=agent_dir)
    assert out.stdout == seen and "262" in seen
    got = json.loads(run_cli("get", "--at", "2026-08-13T11:03:00+08:00", "--json",
                             agent_dir=agent_dir).stdout)
    assert got["keys"]["stop_loss.2317"]["value"] == 262
    assert got["keys"]["stop_loss.2317"]["expired"] is False
    late = json.loads(run_cli("get", "--at", "HEAD", "--json", agent_dir=agent_dir).stdout)
    assert late["keys"]["stop_loss.2317"]["value"] == 257
    assert run_cli("get", "--at", "2020-01-01T00:00:00Z", agent_dir=agent_dir).returncode == 2


def test_revert_restores_refuses_and_forces(repo: StateRepo, clock: Clock) -> None:
    """revert restores old values; refuses when keys moved on; --force overrides and says so."""
    repo.set("stop", 262, "rule")
    bad = repo.set("stop", 254, "bad patrol").commit
    undo = repo.revert(bad, "operator: 254 was wrong")
    assert repo.state().keys["stop"].value == 262 and undo.reverted == bad
    redo = repo.revert(undo.commit, "revert the revert")
    assert repo.state().keys["stop"].value == 254 and redo.reverted == undo.commit
    repo.set("stop", 250, "someone moved it")
    with pytest.raises(Refused) as err:
        repo.revert(bad, "too late")
    assert err.value.rule == "revert.conflict"
    assert err.value.details["conflicts"][0]["current"]["value"] == 250
    forced = repo.revert(bad, "force it", force=True)
    assert repo.state().keys["stop"].value == 262 and forced.overridden
    message = git(repo.state_dir, "log", "-1", "--format=%B").stdout
    assert f"Gitstate-Reverts: {bad}" in message


def test_revert_recreates_and_removes_keys(repo: StateRepo) -> None:
    """Reverting a clear re-creates the key; reverting a creation removes it."""
    created = repo.set("a", 1, "create").commit
    cleared = repo.clear("a", "clear").commit
    repo.revert(cleared, "bring it back")
    assert repo.state().keys["a"].value == 1
    repo.set("a", 1, "same value again")
    repo.revert(created, "it should never have existed")
    assert "a" not in repo.state().keys


def test_revert_respects_the_key_cap(repo: StateRepo) -> None:
    """Re-creating a key by revert is refused at the cap."""
    cleared = None
    for i in range(32):
        repo.set(f"k{i}", i, "fill")
    cleared = repo.clear("k0", "make room").commit
    repo.set("other", 1, "take the room")
    with pytest.raises(KeyCapReached):
        repo.revert(cleared, "bring k0 back")


def test_revert_of_handoff_and_cli(repo: StateRepo) -> None:
    """The previous handoff is restored; the CLI form --key works."""
    repo.handoff("first note")
    second = repo.handoff("second note").commit
    repo.revert(second, "keep the first")
    assert repo.state().handoff is not None and repo.state().handoff.note == "first note"
    repo.set("k", 1, "one")
    repo.set("k", 2, "two")
    out = run_cli("revert", "--key", "k", "--reason", "undo two", agent_dir=repo.agent_dir)
    assert out.returncode == 0, out.stderr
    with StateRepo(repo.agent_dir) as fresh:
        assert fresh.state().keys["k"].value == 1
    out = run_cli("revert", "HEAD~1", "-r", "conflict", agent_dir=repo.agent_dir)
    assert out.returncode == 1 and "revert.conflict" in out.stderr


def test_adopt_turns_a_hand_edit_into_one_commit(repo: StateRepo) -> None:
    """A valid hand edit becomes one audited commit; an invalid one is refused."""
    repo.set("k", 1, "r")
    path = repo.state_dir / STATE_FILE
    path.write_text(path.read_text().replace('"value": 1', '"value": 5'))
    before = commit_count(repo.state_dir)
    result = repo.adopt("operator corrected k by hand")
    assert not isinstance(result, dict)
    assert repo.state().keys["k"].value == 5 and commit_count(repo.state_dir) == before + 1
    assert repo.state().keys["k"].reason == "operator corrected k by hand"
    assert all(c.ok for c in integrity.verify(repo))
    path.write_text(path.read_text().replace('"value": 5', '"value": "a\\nb"'))
    with pytest.raises(Refused):
        repo.adopt("bad edit")
    discarded = repo.discard()
    assert discarded.kept and repo.store.worktree_status(repo.head()).clean
    with pytest.raises(Refused):
        repo.adopt("nothing to adopt")


def _copy(agent: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "copy"
    shutil.copytree(agent, dst)
    return dst


def _failed(agent: Path) -> set[str]:
    with StateRepo(agent) as repo:
        return {c.name for c in integrity.verify(repo) if not c.ok}


def test_tamper_hand_edit_is_named(repo: StateRepo) -> None:
    """verify names a hand-edited working tree."""
    repo.set("k", 1, "r")
    path = repo.state_dir / STATE_FILE
    path.write_text(path.read_text().replace('"value": 1', '"value": 2'))
    assert _failed(repo.agent_dir) == {"worktree"}
    out = run_cli("verify", agent_dir=repo.agent_dir)
    assert out.returncode == 1 and "FAIL worktree" in out.stdout and "adopt" in out.stdout


@pytest.mark.parametrize("how", ["amend", "reset", "forced-ref"])
def test_tamper_rewritten_history_is_named(repo: StateRepo, how: str) -> None:
    """commit --amend, reset and a forced ref are each detected as rewritten history."""
    repo.set("k", 1, "one")
    repo.set("k", 2, "two")
    d = repo.state_dir
    env_git = ["-c", "user.name=x", "-c", "user.email=x@x", "-c", "core.hooksPath=/dev/null"]
    if how == "amend":
        git(d, *env_git, "commit", "--amend", "-m", "rewritten")
    elif how == "reset":
        git(d, "reset", "--hard", "HEAD~1")
    else:
        tree = git(d, "write-tree").stdout.strip()
        other = git(d, *env_git, "commit-tree", tree, "-m", "orphan").stdout.strip()
        git(d, "update-ref", "refs/heads/main", other)
    failed = _failed(repo.agent_dir)
    assert "history-not-rewritten" in failed
    with StateRepo(repo.agent_dir) as fresh, pytest.raises(HistoryRewritten):
        fresh.set("k", 3, "a write on a rewritten history is refused")


def test_tamper_projection_deleted_or_truncated_is_repaired(repo: StateRepo) -> None:
    """A deleted or truncated projection is named by verify and caught up on open."""
    for i in range(5):
        repo.set("k", i, f"v{i}")
    path = repo.projection.path
    full = path.read_bytes()
    path.write_bytes(full[: len(full) // 2])  # cut mid-line
    assert "projection" in _failed(repo.agent_dir) or path.read_bytes() == full
    path.write_bytes(full[: len(full) // 2])
    with StateRepo(repo.agent_dir) as fresh:
        fresh.set("k", 9, "write after truncation")
    assert "projection" not in _failed(repo.agent_dir)
    path.unlink()
    with StateRepo(repo.agent_dir) as fresh:
        assert fresh.projection.path.exists()  # caught up on open
    assert not _failed(repo.agent_dir)
    out = run_cli("history", "--rebuild", agent_dir=repo.agent_dir)
    assert out.returncode == 0 and "7 commits" in out.stdout


def test_tamper_corrupt_object_is_named(repo: StateRepo) -> None:
    """A corrupted object (in a pack, as gitstate writes them; or loose, as plain git
    does) is named by verify's object check and by git fsck."""
    repo.set("k", 1, "r")
    newest = max((repo.state_dir / ".git" / "objects" / "pack").glob("*.pack"),
                 key=lambda p: p.stat().st_mtime_ns)
    data = bytearray(newest.read_bytes())
    data[20:28] = b"\xff" * 8  # inside the first object's compressed bytes
    newest.chmod(0o644)
    newest.write_bytes(bytes(data))
    failed = _failed(repo.agent_dir)
    assert "objects" in failed and "git-fsck" in failed


def test_tamper_corrupt_loose_object_is_named(repo: StateRepo) -> None:
    repo.set("k", 1, "r")
    blob = git(repo.state_dir, "hash-object", "-w", "--stdin", input="plain git\n").stdout
    obj = repo.state_dir / ".git" / "objects" / blob[:2] / blob.strip()[2:]
    obj.chmod(0o644)
    obj.write_bytes(zlib.compress(b"commit 5\x00xxxxx"))
    failed = _failed(repo.agent_dir)
    assert "objects" in failed and "git-fsck" in failed


def test_tamper_commit_with_git_cli_is_named(repo: StateRepo) -> None:
    """A commit made with plain git (no trailers) fails the trailers and replay checks."""
    repo.set("k", 1, "r")
    d = repo.state_dir
    path = d / STATE_FILE
    path.write_text(path.read_text().replace('"value": 1', '"value": 7'))
    git(d, "add", STATE_FILE)
    git(d, "-c", "user.name=x", "-c", "user.email=x@x", "-c", "core.hooksPath=/dev/null",
        "commit", "-qm", "sneaky")
    failed = _failed(repo.agent_dir)
    assert {"trailers", "replay"} <= failed


def test_history_rebuild_matches_incremental(repo: StateRepo) -> None:
    """Rebuilding from git gives the same lines as the incremental projection."""
    for i in range(20):
        repo.set(f"k{i % 3}", i, f"r{i}")
    before = repo.projection.path.read_bytes()
    assert repo.rebuild_history() == 21
    assert repo.projection.path.read_bytes() == before


def test_state_at_every_commit_replays(repo: StateRepo) -> None:
    """Replaying trailers reproduces every intermediate state, not only HEAD."""
    from gitstate.core.trailers import parse_message
    from gitstate.history.replay import apply_change

    repo.set("a", 1, "r", ttl_hours=2)
    repo.handoff("n", status="blocked", blocker="b")
    repo.set("b", "x", "r")
    repo.clear("a", "r")
    state = State()
    for info in reversed(list(repo.store.walk(repo.head()))):
        state = apply_change(state, parse_message(info.message), info.time)
        assert state.to_bytes() == repo.store.read_file(info.id, STATE_FILE)


def test_cas_error_shape_unchanged_by_audit(repo: StateRepo) -> None:
    """(regression) the audit layer leaves compare-and-swap refusals as they were."""
    repo.set("k", 1, "r")
    with pytest.raises(CasMismatch):
        repo.set("k", 2, "r", expected=3)
