"""`gitstate fleet`: discovery that enters no .git directory, and the quick row read from
plain files (no dulwich) equal to the row the opened repository gives."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gitstate.api.repo import StateRepo
from gitstate.audit.fleet import agent_dirs, fleet, opened_row
from tests.helpers import run_cli


def test_discovery_enters_no_git_directory(tmp_path: Path) -> None:
    """An agent directory is found under ROOT at any depth, but never inside a .git
    directory or an agent's state/ (a copy kept there is not an agent, and walking every
    object file is what made a large fleet slow)."""
    with StateRepo.init(tmp_path / "team" / "alpha") as repo:
        repo.set("k", 1, "r")
    with StateRepo.init(tmp_path / "beta"):
        pass
    decoy = tmp_path / "beta" / "state" / ".git" / "old" / "gamma" / "state" / ".git"
    decoy.mkdir(parents=True)
    (tmp_path / "team" / "alpha" / "state" / "inner" / "state" / ".git").mkdir(parents=True)
    assert agent_dirs(tmp_path) == [tmp_path / "beta", tmp_path / "team" / "alpha"]
    out = run_cli("fleet", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert [line.split(":")[0] for line in out.stdout.splitlines()] == ["beta", "team/alpha"]


def test_quick_rows_equal_the_opened_repository_and_need_no_dulwich(tmp_path: Path) -> None:
    """The quick row (stamp, projection, git config, plain files) is the row StateRepo
    gives, for an agent with no remote, one in step with its remote, one ahead of it, one
    with a hand edit and one with a schema; a fleet of clean agents never imports dulwich;
    --verify runs every check."""
    root = tmp_path / "fleet"
    for name in ("lone", "synced", "ahead", "edited", "typed"):
        with StateRepo.init(root / name) as repo:
            repo.set("stop", 262, f"{name} rule", ttl_hours=1)
            repo.set("cap", "96%", "cap\nsecond line")
    for name in ("synced", "ahead"):
        bare = tmp_path / f"{name}.git"
        subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
        run_cli("remote", "set", str(bare), agent_dir=root / name)
        assert run_cli("push", agent_dir=root / name).returncode == 0
    run_cli("set", "cap", "97%", "-r", "later", agent_dir=root / "ahead")
    (root / "edited" / "state" / "working_state.json").write_text("{}")
    (tmp_path / "schema.yaml").write_text("version: 1\nunknown_keys: allow\nkeys:\n"
                                          "  stop: {type: number}\n")
    assert run_cli("schema", "set", str(tmp_path / "schema.yaml"), "-r", "s",
                   agent_dir=root / "typed").returncode == 0
    quick = {r["agent"]: r for r in fleet(root, full=False)}
    opened = {a.name: {"agent": a.name, **opened_row(a, 4.0, False)} for a in agent_dirs(root)}
    assert quick == opened
    assert quick["synced"]["ahead"] == 0 and quick["ahead"]["ahead"] == 1
    assert quick["lone"]["remote"] is None and quick["synced"]["remote"] == str(tmp_path / "synced.git")
    assert quick["edited"]["verify"] == "FAIL worktree"
    assert quick["typed"]["verify"] == "ok" and quick["lone"]["expiring"] == ["stop"]
    for name in ("ahead", "edited"):
        (root / name).rename(tmp_path / name)  # leave only the agents the quick row reads
    code = ("import sys; from pathlib import Path; from gitstate.audit.fleet import fleet; "
            f"rows = fleet(Path({str(root)!r}), full=False); "
            "print(len(rows), 'dulwich' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["3", "False"], out.stdout + out.stderr
    out = run_cli("fleet", str(root), "--verify", "--json")
    assert out.returncode == 0 and '"checks": "all"' in out.stdout
    assert "quick checks ok" in run_cli("fleet", str(root)).stdout
