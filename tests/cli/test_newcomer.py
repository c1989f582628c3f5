"""What a new user meets first: values that look like options, init in the wrong place, the
demo, hand edits that break the file, the MCP server run by hand, and small wording."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]


def _value(agent: Path, key: str) -> object:
    return json.loads(run_cli("get", "--json", agent_dir=agent).stdout)["keys"][key]["value"]


def test_a_negative_number_is_a_value(tmp_path: Path) -> None:
    """`set offset -5` stores -5; `--` before a value starting with - works, with the
    options after it; other dash words stay options (and a typo says how to give one)."""
    run_cli("init", agent_dir=tmp_path)
    for args, want in ((["offset", "-5", "--reason", "r"], -5),
                       (["offset", "--", "-6", "--reason", "r"], -6),
                       (["offset", "--reason", "r", "--", "-7"], -7),
                       (["offset", "-r", "r", "-0.25"], -0.25),
                       (["offset", "-8", "-r", "r", "--expect", "-0.25"], -8),
                       (["note", "--", "-x", "-r", "r"], "-x"),
                       # after --, every argument still missing: the key and the value
                       (["--reason", "r", "--", "dash", "- a list item"], "- a list item")):
        out = run_cli("set", *args, agent_dir=tmp_path)
        assert out.returncode == 0, (args, out.stderr)
        assert _value(tmp_path, next(a for a in args if a not in ("--reason", "r", "--"))) \
            == want, args
    out = run_cli("set", "note", "-y", "-r", "r", agent_dir=tmp_path)
    assert out.returncode == 2 and "gitstate set KEY -- -y" in out.stderr
    out = run_cli("set", "note", "-abc", "-r", "r", agent_dir=tmp_path)  # the whole word
    assert out.returncode == 2 and "gitstate set KEY -- -abc ..." in out.stderr
    out = run_cli("set", "note", "1", "--reasn", "r", agent_dir=tmp_path)
    assert out.returncode == 2 and "--reason" in out.stderr
    assert "set offset -5" in run_cli("set", "--help").stdout


def test_a_name_that_does_not_exist_suggests_the_nearest(tmp_path: Path) -> None:
    """clear of a typo and a time zone typo say which name was meant."""
    run_cli("init", agent_dir=tmp_path)
    run_cli("set", "offset", "1", "--reason", "r", agent_dir=tmp_path)
    out = run_cli("clear", "offest", "--reason", "r", agent_dir=tmp_path)
    assert out.returncode == 1 and "Did you mean 'offset'?" in out.stderr
    (tmp_path / "config.toml").write_text('[gitstate]\ntimezone = "Asia/Taipeh"\n')
    out = run_cli("get", agent_dir=tmp_path)
    assert "[config.timezone]" in out.stderr and "Did you mean 'Asia/Taipei'?" in out.stderr


def test_options_that_contradict_each_other_are_refused(tmp_path: Path) -> None:
    run_cli("init", agent_dir=tmp_path)
    for args in (["--limit", "2", "--all"], ["--json", "--jsonl"]):
        out = run_cli("log", *args, agent_dir=tmp_path)
        assert out.returncode == 2 and "contradict" in out.stderr, (args, out.stderr)


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=u", "-c", "user.email=u@example.invalid", *args],
                   cwd=cwd, check=True, capture_output=True)


def test_init_refuses_a_repository_that_is_not_gitstates(tmp_path: Path) -> None:
    """init into a git repository with history of its own, or a directory of other files,
    is refused (exit 1, init.not_gitstate, naming what to do) and nothing is touched; an
    empty repository, a new directory and gitstate's own repository still initialise."""
    mine = tmp_path / "mine" / "state"
    mine.mkdir(parents=True)
    _git(mine, "init", "-q", "-b", "master")
    (mine / "notes.txt").write_text("my work\n")
    _git(mine, "add", "notes.txt")
    _git(mine, "commit", "-qm", "my work")
    before = sorted(p.relative_to(mine) for p in mine.rglob("*"))
    out = run_cli("init", agent_dir=mine.parent)
    assert out.returncode == 1 and "init.not_gitstate" in out.stderr, out.stderr
    assert "refs/heads/master" in out.stderr and "--agent-dir" in out.stderr
    assert sorted(p.relative_to(mine) for p in mine.rglob("*")) == before
    files = tmp_path / "files" / "state"
    files.mkdir(parents=True)
    (files / "a.txt").write_text("x")
    out = run_cli("init", agent_dir=files.parent)
    assert out.returncode == 1 and "init.not_gitstate" in out.stderr and "a.txt" in out.stderr
    empty = tmp_path / "empty" / "state"
    empty.mkdir(parents=True)
    _git(empty, "init", "-q")
    for agent in (empty.parent, tmp_path / "new", empty.parent):  # the last: gitstate's own
        out = run_cli("init", agent_dir=agent)
        assert out.returncode == 0, out.stderr
    assert run_cli("verify", agent_dir=empty.parent).returncode == 0


def test_a_hand_edit_that_breaks_the_file_is_reported(tmp_path: Path) -> None:
    """A hand edit that leaves working_state.json no valid state is a hand edit, not crash
    damage: get, render and verify name it (worktree.invalid_hand_edit, verify's worktree
    check) with the parse error, adopt refuses it (adopt.invalid), --discard keeps it aside;
    a second --discard has nothing to discard and says so (exit 1, adopt.nothing)."""
    run_cli("init", agent_dir=tmp_path)
    run_cli("set", "k", "1", "-r", "r", agent_dir=tmp_path)
    out = run_cli("adopt", "--discard", agent_dir=tmp_path)
    assert out.returncode == 1 and "adopt.nothing" in out.stderr and "discard" in out.stderr
    working = tmp_path / "state" / "working_state.json"
    broken = working.read_text().replace('"value": 1', '"value": 1,,')
    working.write_text(broken)
    for args in (["get"], ["render", "--locale", "en"], ["get", "--json"]):
        out = run_cli(*args, agent_dir=tmp_path)
        assert out.returncode == 0 and "worktree.invalid_hand_edit" in out.stderr, args
        assert "line 10" in out.stderr and "adopt --discard" in out.stderr
        assert working.read_text() == broken  # left in place, for the operator
    out = run_cli("verify", agent_dir=tmp_path)
    assert out.returncode == 1 and "FAIL worktree" in out.stdout
    assert "no valid state" in out.stdout
    out = run_cli("adopt", "-r", "mine", agent_dir=tmp_path)
    assert out.returncode == 1 and "adopt.invalid" in out.stderr
    out = run_cli("adopt", "--discard", agent_dir=tmp_path)
    assert out.returncode == 0 and "gitstate-hand-edits" in out.stdout
    kept = list((tmp_path / "state" / ".git" / "gitstate-hand-edits").iterdir())
    assert [p.read_text() for p in kept] == [broken]
    assert run_cli("verify", agent_dir=tmp_path).returncode == 0
    out = run_cli("adopt", "--discard", agent_dir=tmp_path)
    assert out.returncode == 1 and "adopt.nothing" in out.stderr


def test_mcp_by_hand_says_what_it_is_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    """`gitstate mcp` on a terminal prints one line on stderr (MCP on stdio, how to stop),
    and SIGINT ends the real process at once (it waited for Ctrl-D before)."""
    pytest.importorskip("mcp")
    run_cli("init", agent_dir=tmp_path)
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "gitstate", "--agent-dir", str(tmp_path),
                             "mcp"], stdin=terminal, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        ready, _, _ = select.select([proc.stderr], [], [], 30)
        line = proc.stderr.readline() if ready else ""
        assert "MCP" in line and "stdio" in line and "Ctrl-C" in line, line
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == -signal.SIGINT
        assert time.monotonic() - started < 5
        assert "stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(controller)
        os.close(terminal)


def test_mcp_http_on_a_busy_port_fails_before_announcing(tmp_path: Path) -> None:
    """A busy --port is a usage error naming the port, and nothing says the server started."""
    pytest.importorskip("mcp")
    run_cli("init", agent_dir=tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = run_cli("mcp", "--http", "--port", str(port), agent_dir=tmp_path, process=True)
    assert out.returncode == 2 and "usage.port_in_use" in out.stderr, out.stderr
    assert str(port) in out.stderr and "--port" in out.stderr
    assert "http://" not in out.stderr and out.stdout == ""


def _readme_tools() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = text.split("serves the tools", 1)[1].split("(and the resources", 1)[0]
    return re.findall(r"`([a-z_]+)`", listed)


def test_mcp_help_and_readme_list_the_servers_tools() -> None:
    """`mcp --help` lists every tool of the server's own list, in its order, with its
    description's first sentence; README's list is the same."""
    from gitstate.mcp.tools import tools
    from gitstate.system.config import Config

    server = tools(Config(), "")
    names = [t.name for t in server]
    assert len(names) == 6
    helped = run_cli("mcp", "--help").stdout
    section = helped.split("Tools:", 1)[1].split("Options:", 1)[0]
    assert re.findall(r"^  ([a-z_]+) ", section, re.M) == names
    assert " ".join(server[-1].description.split(". ")[0].split()) in " ".join(section.split())
    assert _readme_tools() == names


def _demo(*args: str, tmp: Path, env: dict[str, str] | None = None) -> \
        subprocess.CompletedProcess[str]:
    tmp.mkdir(exist_ok=True)
    return run_cli(*args, env={"TMPDIR": str(tmp), **(env or {})}, process=True)


def test_the_demo_keeps_its_directory_and_says_what_next(tmp_path: Path) -> None:
    """`gitstate demo` keeps its directory (under the temporary one, with the report inside
    it: nothing else is left there) and ends with the next commands, each of which runs;
    --no-keep leaves nothing."""
    tmp = tmp_path / "tmp"
    out = _demo("demo", tmp=tmp)
    assert out.returncode == 0, out.stderr
    [kept] = list(tmp.iterdir())
    assert kept.name.startswith("gitstate-demo-") and (kept / "state" / ".git").is_dir()
    report = re.search(r"file://(\S+)", out.stdout)
    assert report and Path(report.group(1)) == kept / "report" / "index.html"
    assert Path(report.group(1)).is_file()
    tail = out.stdout.split("What next:", 1)[1]
    assert f"export GITSTATE_AGENT_DIR={kept}" in tail and f"rm -rf {kept}" in out.stdout
    commands = [line.split("#")[0].split() for line in tail.splitlines()
                if re.match(r"  \S*gitstate ", line)]
    assert len(commands) >= 4
    for words in commands:
        done = run_cli(*words[1:], agent_dir=kept)
        assert done.returncode == 0, (words, done.stderr)
    assert "262" in run_cli("render", "--at", "2026-08-13T11:03+08:00", agent_dir=kept).stdout
    gone = tmp_path / "gone"
    out = _demo("demo", "--no-keep", tmp=gone)
    assert out.returncode == 0 and list(gone.iterdir()) == [] and "Removed" in out.stdout


def test_the_demo_uses_the_agent_dir_it_is_given(tmp_path: Path) -> None:
    """`gitstate --agent-dir X demo` runs in X (new or empty, else usage.demo_dir);
    GITSTATE_AGENT_DIR is not written into, and the demo says so."""
    tmp = tmp_path / "tmp"
    given = tmp_path / "given"
    out = _demo("--agent-dir", str(given), "demo", tmp=tmp)
    assert out.returncode == 0, out.stderr
    assert (given / "state" / ".git").is_dir() and (given / "report" / "index.html").is_file()
    assert f"Kept: {given}" in out.stdout and list(tmp.iterdir()) == []
    out = _demo("--agent-dir", str(given), "demo", tmp=tmp)
    assert out.returncode == 2 and "usage.demo_dir" in out.stderr
    mine = tmp_path / "mine"
    run_cli("init", agent_dir=mine)
    out = _demo("demo", "--no-keep", tmp=tmp, env={"GITSTATE_AGENT_DIR": str(mine)})
    assert out.returncode == 0 and "GITSTATE_AGENT_DIR" in out.stderr
    assert sorted(p.name for p in mine.iterdir()) == ["state"]


def test_pull_says_pulled_and_status_without_a_remote_says_so(tmp_path: Path) -> None:
    """pull counts what it pulled as pulled (never "pushed"); status and fleet say "no
    remote" instead of counting every commit as ahead of a remote that does not exist."""
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    a, b = tmp_path / "agents" / "a", tmp_path / "agents" / "b"
    run_cli("init", agent_dir=a)
    run_cli("remote", "set", str(bare), agent_dir=a)
    assert run_cli("push", agent_dir=a).returncode == 0
    assert run_cli("clone", str(bare), str(b)).returncode == 0
    run_cli("set", "k", "1", "-r", "r", agent_dir=a)
    run_cli("set", "k", "2", "-r", "r", agent_dir=a)
    assert run_cli("push", agent_dir=a).returncode == 0
    out = run_cli("pull", agent_dir=b)
    assert out.returncode == 0 and "pulled 2" in out.stdout and "pushed" not in out.stdout
    assert json.loads(run_cli("pull", "--json", agent_dir=a).stdout)["pulled"] == 0
    lone = tmp_path / "agents" / "lone"
    run_cli("init", agent_dir=lone)
    run_cli("set", "k", "1", "-r", "r", agent_dir=lone)
    out = run_cli("status", agent_dir=lone)
    assert "no remote" in out.stdout and "ahead" not in out.stdout, out.stdout
    assert json.loads(run_cli("status", "--json", agent_dir=lone).stdout)["ahead"] is None
    assert "0 ahead, 0 behind" in run_cli("status", agent_dir=a).stdout
    rows = run_cli("fleet", str(tmp_path / "agents")).stdout.splitlines()
    [lone_row] = [r for r in rows if r.startswith("lone:")]
    assert "no remote" in lone_row and "ahead" not in lone_row
    assert any(r.startswith("a:") and "0 ahead, 0 behind" in r for r in rows), rows


def test_lookups_that_find_nothing_say_so(tmp_path: Path) -> None:
    """`log --key` with a key no change touched names the nearest key (exit 1,
    log.unknown_key); `fleet` over a directory without agents says so (exit 1,
    fleet.empty). A real key with nothing in the window stays a quiet exit 0."""
    run_cli("init", agent_dir=tmp_path / "agent")
    run_cli("set", "stop_loss.2317", "262", "-r", "r", agent_dir=tmp_path / "agent")
    out = run_cli("log", "--key", "stop_loss.2137", agent_dir=tmp_path / "agent")
    assert out.returncode == 1 and "log.unknown_key" in out.stderr
    assert "Did you mean 'stop_loss.2317'?" in out.stderr
    out = run_cli("log", "--key", "stop_loss.2317", "--since", "2999-01-01T00:00Z",
                  agent_dir=tmp_path / "agent")
    assert (out.returncode, out.stdout) == (0, "")
    out = run_cli("log", "--refused", "--key", "stop_loss.2137", agent_dir=tmp_path / "agent")
    assert out.returncode == 1 and "Did you mean 'stop_loss.2317'?" in out.stderr
    run_cli("set", "new.key", "1", "-r", "r", "--expect", "5", agent_dir=tmp_path / "agent")
    out = run_cli("log", "--refused", "--key", "new.key", agent_dir=tmp_path / "agent")
    assert out.returncode == 0 and "cas.mismatch" in out.stdout
    out = run_cli("log", "--refused", "--key", "stop_loss.2317", agent_dir=tmp_path / "agent")
    assert (out.returncode, out.stdout) == (0, "")  # a real key that nothing refused
    (tmp_path / "empty").mkdir()
    out = run_cli("fleet", str(tmp_path / "empty"))
    assert out.returncode == 1 and "fleet.empty" in out.stderr and "state/.git" in out.stderr


def _help_texts() -> dict[str, str]:
    import click

    from gitstate.cli import cli

    texts = {}

    def walk(command: click.Command, path: list[str], parent: click.Context | None) -> None:
        ctx = click.Context(command, info_name=path[-1], parent=parent)
        texts[" ".join(path)] = command.get_help(ctx)
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                walk(sub, [*path, name], ctx)

    walk(cli, ["gitstate"], None)
    return texts


def test_every_doc_cited_in_help_exists() -> None:
    """Every docs/*.md (and other repository path) a --help page cites is a real file."""
    texts = _help_texts()
    assert len(texts) > 40
    cited = {(where, m) for where, text in texts.items()
             for m in re.findall(r"\bdocs/[\w./-]+?\.md\b", " ".join(text.split()))}
    assert cited
    missing = [(where, path) for where, path in cited if not (ROOT / path).is_file()]
    assert not missing, missing


def test_the_demos_next_commands_call_gitstate_as_it_was_called(tmp_path: Path) -> None:
    """Run as `.venv/bin/gitstate demo` without .venv/bin on PATH (README's quick start),
    the next commands name that path, so copying one works."""
    program = Path(sys.executable).parent / "gitstate"
    if not program.is_file():
        pytest.skip("no gitstate entry point beside this interpreter")
    env = {**os.environ, "PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path)}
    out = subprocess.run([str(program), "--agent-dir", str(tmp_path / "a"), "demo"],
                         capture_output=True, text=True, env=env, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    verify = next(line for line in out.stdout.splitlines() if line.endswith("other checks"))
    words = verify.split("#")[0].split()
    assert words == [str(program), "verify"]
    done = subprocess.run(words, capture_output=True, text=True, timeout=60, check=False,
                          env={**env, "GITSTATE_AGENT_DIR": str(tmp_path / "a")})
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_yaml_error_is_one_readable_line(tmp_path: Path) -> None:
    """A schema.yaml that is no YAML is refused with what is wrong and where, on one line,
    not ruamel's caret drawing escaped into \\u000a sequences."""
    run_cli("init", agent_dir=tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nkeys:\n  a: [\n", encoding="utf-8")
    out = run_cli("schema", "check", str(bad), agent_dir=tmp_path)
    assert out.returncode != 0 and "[schema.invalid]" in out.stderr, out.stderr
    assert "\\u000a" not in out.stderr and "at line 4, column 1" in out.stderr, out.stderr
