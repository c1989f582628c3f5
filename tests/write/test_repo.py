"""Specification of the core operations: set, clear, handoff, get, render on a real repo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.core.errors import (
    CasMismatch,
    HandoffTooLarge,
    InvalidInput,
    KeyCapReached,
    NotInitialized,
    SectionTooLarge,
)
from gitstate.core.model import STATE_FILE
from gitstate.core.results import to_json
from tests.helpers import Clock, assert_fsck_clean, commit_count, git


def _snapshot(repo: StateRepo) -> tuple[str, bytes, int]:
    return repo.head(), (repo.state_dir / STATE_FILE).read_bytes(), commit_count(repo.state_dir)


def test_init_creates_main_with_a_first_commit(repo: StateRepo) -> None:
    """init: state/ is a git repo on main with one commit and a clean status."""
    assert git(repo.state_dir, "symbolic-ref", "HEAD").stdout.strip() == "refs/heads/main"
    assert commit_count(repo.state_dir) == 1
    assert git(repo.state_dir, "status", "--porcelain").stdout == ""
    assert_fsck_clean(repo.state_dir)


def test_init_is_idempotent(agent_dir: Path, repo: StateRepo) -> None:
    """A second init keeps the existing history."""
    repo.set("k", 1, "r")
    with StateRepo.init(agent_dir) as again:
        assert again.state().keys["k"].value == 1
    assert commit_count(repo.state_dir) == 2


def test_uninitialised_directory_says_run_init(tmp_path: Path) -> None:
    """Any operation on a plain directory names `gitstate init`."""
    with pytest.raises(NotInitialized, match="gitstate init"):
        StateRepo(tmp_path)


def test_each_write_is_exactly_one_commit_with_the_reason(repo: StateRepo) -> None:
    """set, clear and handoff each add one commit; git log shows the reasons verbatim."""
    repo.set("stop_loss.2317", 262, "跌破即出場不猶豫", ttl_hours=4.5)
    repo.set("position_cap", "96%", "留最低手續費緩衝\n\nsecond paragraph")
    repo.clear("position_cap", "no longer needed")
    repo.handoff("盤中巡檢中")
    assert commit_count(repo.state_dir) == 5
    bodies = [b.lstrip("\n") for b in
              git(repo.state_dir, "log", "--format=%B%x00").stdout.split("\x00")]
    assert bodies[3].startswith("跌破即出場不猶豫\n\nGitstate-Op: set")
    assert bodies[2].startswith("留最低手續費緩衝\n\nsecond paragraph\n\nGitstate-Op: set")
    assert bodies[1].startswith("no longer needed\n\nGitstate-Op: clear")
    assert_fsck_clean(repo.state_dir)


def test_git_interpret_trailers_reads_the_commit(repo: StateRepo) -> None:
    """Trailers of a real commit parse with git and carry op, key, old, new, expiry, actor."""
    repo.set("k", 1, "first")
    repo.set("k", "二", "second", ttl_hours=1, actor="agent")
    message = git(repo.state_dir, "log", "-1", "--format=%B").stdout
    out = git(repo.state_dir, "interpret-trailers", "--parse", input=message).stdout
    trailers = dict(line.split(": ", 1) for line in out.splitlines())
    assert trailers["Gitstate-Op"] == "set"
    assert trailers["Gitstate-Key"] == "k"
    assert json.loads(trailers["Gitstate-Old"]) == 1
    assert json.loads(trailers["Gitstate-New"]) == "二"
    assert trailers["Gitstate-Expires"] == "2026-08-13T02:04:00Z"
    assert trailers["Gitstate-Actor"] == "agent"


def test_working_tree_is_head_and_diff_is_readable(repo: StateRepo, clock: Clock) -> None:
    """working_state.json equals HEAD's blob; a change diffs as a few lines."""
    repo.set("stop_loss.2317", 262, "first rule")
    clock.advance(minutes=5)
    repo.set("stop_loss.2317", 257, "review")
    assert git(repo.state_dir, "status", "--porcelain").stdout == ""
    head_blob = git(repo.state_dir, "show", f"HEAD:{STATE_FILE}").stdout
    assert head_blob == (repo.state_dir / STATE_FILE).read_text(encoding="utf-8")
    diff = git(repo.state_dir, "diff", "HEAD~1", "HEAD", "--unified=0").stdout
    changed = [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in "+++---"]
    assert len(changed) == 6, changed  # reason, set_at, value: old and new


def test_cas_mismatch_reports_current_and_writes_nothing(repo: StateRepo, clock: Clock) -> None:
    """A stale expected_value is refused with the current value, reason and set time."""
    repo.set("stop_loss.2317", 262, "break = exit")
    before = _snapshot(repo)
    with pytest.raises(CasMismatch) as err:
        repo.set("stop_loss.2317", 254, "patrol", expected=250)
    current = err.value.details["current"]
    assert current["value"] == 262 and current["reason"] == "break = exit"
    assert current["set_at"] == "2026-08-13T01:04:00Z"
    assert _snapshot(repo) == before


def test_cas_accepts_number_as_string(repo: StateRepo) -> None:
    """expected "262" matches a stored 262 (the documented comparison rule)."""
    repo.set("k", 262, "r")
    assert repo.set("k", 257, "r2", expected="262").new is not None


def test_cas_expect_absent(repo: StateRepo, clock: Clock) -> None:
    """expected=None means "must be absent"; an expired entry counts as absent."""
    repo.set("k", 1, "r", expected=None)
    with pytest.raises(CasMismatch):
        repo.set("k", 2, "r", expected=None)
    repo.set("t", 1, "r", ttl_hours=1)
    clock.advance(hours=2)
    repo.set("t", 2, "r", expected=None)


def test_key_cap_refuses_the_33rd_and_lists_live_keys(repo: StateRepo, clock: Clock) -> None:
    """At 32 live keys a new key is refused; expired keys do not count."""
    for i in range(31):
        repo.set(f"k{i:02d}", i, "fill")
    repo.set("short", 1, "expires", ttl_hours=1)
    before = _snapshot(repo)
    with pytest.raises(KeyCapReached) as err:
        repo.set("k32", 32, "one too many")
    assert len(err.value.details["live_key_names"]) == 32 and "k00" in err.value.message
    assert _snapshot(repo) == before
    repo.set("k00", 100, "updating an existing key is fine")
    clock.advance(hours=2)
    repo.set("k32", 32, "now there is room")
    view = to_json(repo.get())
    assert view["keys"]["short"]["expired"] is True and view["live_keys"] == 32


def test_case_only_difference_is_refused(repo: StateRepo) -> None:
    """Stop_Loss and stop_loss cannot both exist."""
    repo.set("stop_loss", 1, "r")
    with pytest.raises(InvalidInput) as err:
        repo.set("Stop_Loss", 2, "r")
    assert err.value.rule == "key.case"


def test_section_cap_is_enforced_at_write_time(repo: StateRepo) -> None:
    """A set that would push key lines past 3,072 bytes is refused, naming the sizes."""
    for i in range(3):
        repo.set(f"k{i}", "字" * 300, "r" * 10)
    before = _snapshot(repo)
    with pytest.raises(SectionTooLarge) as err:
        repo.set("k3", "字" * 300, "r" * 10)
    assert err.value.details["limit"] == 3072 and err.value.details["size"] > 3072
    assert _snapshot(repo) == before


def test_clear_retires_a_key_and_keeps_history(repo: StateRepo) -> None:
    """clear removes the key from HEAD; its value stays in the log and the history."""
    repo.set("k", 1, "r")
    result = repo.clear("k", "done", expected=1)
    assert "k" not in repo.state().keys and result.old is not None
    assert [h["op"] for h in to_json(repo.get())["history"][:2]] == ["clear", "set"]
    with pytest.raises(InvalidInput) as err:
        repo.clear("k", "again")
    assert err.value.rule == "clear.absent"


def test_clear_cas_mismatch(repo: StateRepo) -> None:
    """clear with a stale expected value is refused."""
    repo.set("k", 1, "r")
    with pytest.raises(CasMismatch):
        repo.clear("k", "r", expected=2)
    assert repo.state().keys["k"].value == 1


def test_plain_handoff_is_cut_and_caller_told(repo: StateRepo) -> None:
    """A long plain note is stored cut, and the result says so."""
    result = repo.handoff("x " * 2000)
    assert result.truncated and result.handoff is not None
    assert len(result.handoff.note) == 1200


def test_oversized_structured_handoff_writes_nothing(repo: StateRepo) -> None:
    """Over working_state_handoff_max_bytes the whole call is refused."""
    before = _snapshot(repo)
    with pytest.raises(HandoffTooLarge):
        repo.handoff("n", status="continue", next_steps="字" * 6000)
    assert _snapshot(repo) == before


def test_get_returns_everything(repo: StateRepo, clock: Clock) -> None:
    """get: keys with expired marked, handoff, history newest first, HEAD, count, cap."""
    repo.set("a", 1, "ra", ttl_hours=1)
    repo.set("b", True, "rb")
    repo.handoff("note", status="blocked", blocker="waiting")
    clock.advance(hours=2)
    view = to_json(repo.get())
    assert view["head"] == repo.head()
    assert view["keys"]["a"]["expired"] is True and view["keys"]["b"]["expired"] is False
    assert view["keys"]["b"]["value"] is True and view["keys"]["a"]["expires_at"]
    assert view["handoff"]["status"] == "blocked" and view["handoff"]["blocker"] == "waiting"
    assert [h["op"] for h in view["history"]] == ["handoff", "set", "set", "init"]
    assert (view["live_keys"], view["max_keys"]) == (1, 32)


def test_render_disabled_by_config(agent_dir: Path, clock: Clock) -> None:
    """working_state_enabled = false renders nothing; tools keep working."""
    (agent_dir / "config.toml").write_text("[memory]\nworking_state_enabled = false\n")
    with StateRepo.init(agent_dir, clock=clock) as repo:
        repo.set("k", 1, "r")
        assert repo.render() == ""
        assert to_json(repo.get())["keys"]["k"]["value"] == 1


def test_leftover_working_tree_is_repaired_and_never_rendered(repo: StateRepo) -> None:
    """A working tree left at the parent commit (a killed write) is repaired silently."""
    repo.set("k", 1, "r")
    old = (repo.state_dir / STATE_FILE).read_bytes()
    repo.set("k", 2, "r")
    (repo.state_dir / STATE_FILE).write_bytes(old)  # as if killed before the checkout
    assert "k = 2" in repo.render(locale="en")
    assert to_json(repo.get())["warnings"] == []
    repo.set("j", 3, "r")
    assert git(repo.state_dir, "status", "--porcelain").stdout == ""


def test_hand_edit_is_reported_not_rendered_and_kept(repo: StateRepo) -> None:
    """A hand edit is not injected, is reported, and survives the next write aside."""
    repo.set("k", 1, "r")
    path = repo.state_dir / STATE_FILE
    path.write_text(path.read_text().replace('"value": 1', '"value": 999'))
    assert "999" not in repo.render(locale="en")
    assert any("edited by hand" in w for w in to_json(repo.get())["warnings"])
    result = repo.set("j", 2, "r")
    assert any("kept at" in w for w in result.warnings)
    kept = list((repo.state_dir / ".git" / "gitstate-hand-edits").iterdir())
    assert len(kept) == 1 and "999" in kept[0].read_text()


def test_refused_calls_change_no_file(repo: StateRepo) -> None:
    """Every refusal path leaves HEAD, the file and the commit count alone."""
    repo.set("k", 1, "r")
    before = _snapshot(repo)
    calls = [
        lambda: repo.set("../x", 1, "r"),
        lambda: repo.set("k", 1, "  "),
        lambda: repo.set("k", "a\nb", "r"),
        lambda: repo.set("k", 1, "r", ttl_hours=0),
        lambda: repo.set("k", 2, "r", expected=5),
        lambda: repo.clear("nope", "r"),
        lambda: repo.handoff(status="complete"),
        lambda: repo.handoff(next_steps="x"),
    ]
    for call in calls:
        with pytest.raises(InvalidInput.__mro__[1]):  # Refused
            call()
        assert _snapshot(repo) == before


FORGETFUL = """
import sys
from gitstate import StateRepo
repo = StateRepo.init(sys.argv[1])
for i in range(6):
    repo.set(f"k{i}", i, "r")
    StateRepo(sys.argv[1]).get()   # six more, never closed
print("done")
"""

FORGETFUL_SAVER = """
import sys
from typing import TypedDict
from langgraph.graph import END, START, StateGraph
from gitstate.langgraph import GitCheckpointSaver

class S(TypedDict):
    n: int

graph = StateGraph(S)
graph.add_node("inc", lambda s: {"n": s["n"] + 1})
graph.add_edge(START, "inc")
graph.add_edge("inc", END)
app = graph.compile(checkpointer=GitCheckpointSaver(sys.argv[1]))   # never closed
for i in range(12):
    app.invoke({"n": i}, {"configurable": {"thread_id": f"t{i % 3}"}})
print("done")
"""


@pytest.mark.parametrize("script", [FORGETFUL, FORGETFUL_SAVER], ids=["repo", "saver"])
def test_a_script_that_never_closes_prints_nothing_at_exit(tmp_path: Path, script: str) -> None:
    """Repositories and checkpointers left open release their dulwich files at exit,
    silently (no "Exception ignored" or ResourceWarning on stderr)."""
    import subprocess
    import sys

    if script is FORGETFUL_SAVER:
        pytest.importorskip("langgraph.graph")
    out = subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-c", script,
                          str(tmp_path / "agent")], capture_output=True, text=True,
                         timeout=120, check=False)
    assert (out.returncode, out.stdout, out.stderr) == (0, "done\n", "")


def test_close_releases_the_packs_at_once(repo: StateRepo) -> None:
    """close() releases dulwich's open pack files then and there, and twice is harmless."""
    import os

    repo.set("a", 1, "r")
    repo.get()
    def fds() -> set[str]:
        names = set()
        for n in os.listdir("/proc/self/fd"):
            try:
                names.add(os.readlink(f"/proc/self/fd/{n}"))
            except OSError:
                continue  # the listing's own descriptor, closed by now
        return names

    assert any(str(repo.state_dir) in p for p in fds())
    repo.close()
    repo.close()
    assert not any(str(repo.state_dir / ".git" / "objects") in p for p in fds())
