"""Specification of the wake-up path: cheap imports, exact HEAD, hooks' output format."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gitstate.api.repo import StateRepo
from gitstate.core.model import STATE_FILE
from tests.helpers import run_cli


def _modules_after(args: list[str], agent_dir: Path) -> set[str]:
    code = ("import sys, io\nfrom gitstate.__main__ import main\n"
            "sys.stdout = io.StringIO()\n"
            f"main({['--agent-dir', str(agent_dir), *args]!r})\n"
            "sys.__stdout__.write('\\n'.join(sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, input="")
    return set(out.stdout.split())


def test_the_wake_up_path_imports_no_pathlib_typing_or_datetime_py(tmp_path: Path) -> None:
    """Without site (an editable install's import finder loads pathlib and typing before
    any gitstate code) and with gitstate from the source tree, as an install loads it: the
    plain render and hooks import neither pathlib, typing, dataclasses, tomllib (config.toml
    is read from its cache after the first parse) nor the pure-Python half of datetime
    (each a millisecond or more of every wake-up). A configured time zone still loads
    zoneinfo (docs/performance.md)."""
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "config.toml").write_text('[gitstate]\nlocale = "en"\n', encoding="utf-8")
    with StateRepo.init(agent) as repo:
        repo.set("k", 1, "r")
    root = Path(__file__).resolve().parents[2]
    unwanted = {"pathlib", "typing", "dataclasses", "datetime", "tomllib"}
    run_cli("render", agent_dir=agent)  # the first wake-up after a config change parses it
    for args in (["render"], ["hook", "claude-code"], ["hook", "plain"]):
        code = ("import sys, io\nfrom gitstate.__main__ import main\n"
                "sys.stdout = io.StringIO()\n"
                f"main({['--agent-dir', str(agent), *args]!r})\n"
                "sys.__stdout__.write(' '.join(sys.modules))\n")
        out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True,
                             text=True, check=True, input="",
                             env={**os.environ, "PYTHONPATH": str(root)})
        loaded = set(out.stdout.split())
        assert "gitstate.wakeup.fastpath" in loaded and "gitstate.store" not in loaded, args
        assert not loaded & unwanted, (args, loaded & unwanted)


def test_render_and_hooks_import_no_heavy_modules(repo: StateRepo) -> None:
    """render and the hooks never import click, dulwich, pydantic or mcp on the fast path."""
    repo.set("k", 1, "r")
    for args in (["render"], ["hook", "claude-code"], ["hook", "plain"]):
        loaded = _modules_after(args, repo.agent_dir)
        heavy = {m.split(".")[0] for m in loaded} & {"click", "dulwich", "pydantic", "mcp",
                                                     "ruamel"}
        assert not heavy, (args, heavy)


def test_hand_edit_falls_back_to_head(repo: StateRepo) -> None:
    """When the file differs from HEAD the section comes from HEAD, with a warning."""
    repo.set("k", 1, "r")
    path = repo.state_dir / STATE_FILE
    path.write_text(path.read_text().replace('"value": 1', '"value": 999'))
    out = run_cli("render", "--locale", "en", agent_dir=repo.agent_dir)
    assert "- k = 1 " in out.stdout and "999" not in out.stdout
    assert "edited by hand" in out.stderr


def test_moved_ref_is_never_served_from_a_stale_file(repo: StateRepo) -> None:
    """If the ref moved but the working tree did not (a killed write), HEAD is rendered."""
    repo.set("k", 1, "r")
    stale = (repo.state_dir / STATE_FILE).read_bytes()
    stamp = (repo.state_dir / ".git" / "gitstate-stamp").read_bytes()
    repo.set("k", 2, "r")
    (repo.state_dir / STATE_FILE).write_bytes(stale)
    (repo.state_dir / ".git" / "gitstate-stamp").write_bytes(stamp)
    out = run_cli("render", "--locale", "en", agent_dir=repo.agent_dir)
    assert "- k = 2 " in out.stdout and out.stderr == ""


def test_claude_code_hook_output(repo: StateRepo) -> None:
    """The hook prints Claude Code's JSON with the event name from stdin; nothing if empty."""
    out = run_cli("hook", "claude-code", agent_dir=repo.agent_dir,
                  input='{"hook_event_name": "SessionStart"}')
    assert (out.returncode, out.stdout) == (0, "")
    repo.set("k", 1, "r")
    out = run_cli("hook", "claude-code", agent_dir=repo.agent_dir,
                  input='{"hook_event_name": "SessionStart"}')
    payload = json.loads(out.stdout)["hookSpecificOutput"]
    assert payload["hookEventName"] == "SessionStart"
    assert payload["additionalContext"].startswith("## 工作狀態")
    plain = run_cli("hook", "plain", agent_dir=repo.agent_dir)
    assert plain.stdout == payload["additionalContext"]


def test_gemini_hook_output(repo: StateRepo) -> None:
    """`hook gemini` answers Gemini CLI's hook JSON: the event from stdin's
    hook_event_name (BeforeAgent when stdin names none), the section as additionalContext."""
    repo.set("k", 1, "r")
    out = run_cli("hook", "gemini", agent_dir=repo.agent_dir,
                  input='{"hook_event_name": "SessionStart", "source": "startup"}')
    payload = json.loads(out.stdout)["hookSpecificOutput"]
    assert payload["hookEventName"] == "SessionStart"
    assert payload["additionalContext"] == run_cli("hook", "plain",
                                                   agent_dir=repo.agent_dir).stdout
    out = run_cli("hook", "gemini", agent_dir=repo.agent_dir, input="")
    assert json.loads(out.stdout)["hookSpecificOutput"]["hookEventName"] == "BeforeAgent"


def test_hook_never_blocks_on_error(tmp_path: Path) -> None:
    """A hook on a broken directory exits 1 (not 2, which would block the prompt)."""
    out = run_cli("hook", "claude-code", agent_dir=tmp_path, input="{}")
    assert out.returncode == 1 and out.stdout == "" and "gitstate init" in out.stderr


def test_packed_ref_is_read(repo: StateRepo) -> None:
    """After `git pack-refs` the fast path still finds main."""
    from gitstate.wakeup.fastpath import head_state_fast
    from tests.helpers import git

    repo.set("k", 1, "r")
    git(repo.state_dir, "pack-refs", "--all")
    assert not (repo.state_dir / ".git" / "refs" / "heads" / "main").exists()
    state = head_state_fast(repo.state_dir)
    assert state is not None and state.keys["k"].value == 1


def test_disabled_injection_prints_nothing(repo: StateRepo) -> None:
    """[memory] working_state_enabled = false: render and hooks print nothing; tools work."""
    repo.set("k", 1, "r")
    (repo.agent_dir / "config.toml").write_text("[memory]\nworking_state_enabled = false\n")
    for args in (["render"], ["hook", "claude-code"], ["hook", "plain"]):
        out = run_cli(*args, agent_dir=repo.agent_dir, input="{}")
        assert (out.returncode, out.stdout) == (0, ""), args
    assert run_cli("set", "j", "2", "-r", "still works", agent_dir=repo.agent_dir).returncode == 0


def test_bad_config_is_reported_on_the_wake_up_path(repo: StateRepo) -> None:
    """A typo in config.toml is an error on render, never a silent default."""
    (repo.agent_dir / "config.toml").write_text("[memory]\nworking_state_enabeld = false\n")
    out = run_cli("render", agent_dir=repo.agent_dir)
    assert out.returncode == 1 and "config.unknown" in out.stderr


def test_a_lost_stamp_costs_one_slow_render_only(repo: StateRepo) -> None:
    """Without the stamp the first render reads HEAD through dulwich and restores the stamp;
    the next one is back on the fast path."""
    repo.set("k", 1, "r")
    (repo.state_dir / ".git" / "gitstate-stamp").unlink()
    first = _modules_after(["render"], repo.agent_dir)
    assert "dulwich" in {m.split(".")[0] for m in first}
    second = _modules_after(["render"], repo.agent_dir)
    assert "dulwich" not in {m.split(".")[0] for m in second}
