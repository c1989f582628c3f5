"""`gitstate install HOST`: each host's files written in a HOME and a project of their own,
merged with what the user had there, idempotent to the byte, backed up, never written
through a symlink; `--check` through the host's own listing (Claude Code, Codex and Gemini
CLI from tests/js/hosts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from tests.helpers import npm_ci, run_cli

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ROOT / "tests" / "js" / "hosts"
PYTHON = os.path.abspath(sys.executable)


@pytest.fixture
def where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """(project, home, agent directory): the project is the current directory."""
    proj, home = tmp_path / "proj", tmp_path / "home"
    home.mkdir()
    agent = proj / ".agent"
    with StateRepo.init(agent) as repo:
        repo.set("stop_loss.2317", 262, "the rule")
    monkeypatch.chdir(proj)
    monkeypatch.delenv("CODEX_HOME", raising=False)
    return proj, home, agent


def install(home: Path, *args: str, path: str = "") -> tuple[int, str, str]:
    env = {"HOME": str(home), "GITSTATE_AGENT_DIR": None, "CODEX_HOME": None}
    if path:
        env["PATH"] = path
    out = run_cli("install", *args, agent_dir=Path(".agent"), env=env)  # type: ignore[arg-type]
    return out.returncode, out.stdout, out.stderr


def server(agent: Path) -> list[str]:
    return ["-m", "gitstate", "--agent-dir", str(agent), "mcp"]


# where each host's file is, for --project and --user, and how its entry is read

def claude_entry(data: dict[str, object]) -> object:
    return data["mcpServers"]["gitstate"]  # type: ignore[index]


FILES = {
    ("claude-code", "project"): ("proj", ".mcp.json"),
    ("claude-code", "user"): ("home", ".claude.json"),
    ("gemini", "project"): ("proj", ".gemini/settings.json"),
    ("gemini", "user"): ("home", ".gemini/settings.json"),
    ("cursor", "project"): ("proj", ".cursor/mcp.json"),
    ("cursor", "user"): ("home", ".cursor/mcp.json"),
    ("codex", "user"): ("home", ".codex/config.toml"),
    ("codex", "project"): ("proj", ".codex/config.toml"),
}


def target(host: str, scope: str, proj: Path, home: Path) -> Path:
    base, rel = FILES[(host, scope)]
    return (proj if base == "proj" else home) / rel


def read(path: Path) -> dict[str, object]:
    if path.suffix == ".toml":
        return tomllib.loads(path.read_text())
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def entry(path: Path) -> dict[str, object]:
    data = read(path)
    servers = data["mcp_servers" if path.suffix == ".toml" else "mcpServers"]
    assert isinstance(servers, dict)
    found = servers["gitstate"]
    assert isinstance(found, dict)
    return found


def plant(path: Path) -> bytes:
    """A file the user had: another server and a setting of their own."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".toml":
        text = ('model = "o4"\n\n[mcp_servers.other]\ncommand = "other-server"\n'
                'args = ["--x"]\n')
    else:
        text = json.dumps({"theme": "dark", "mcpServers": {
            "other": {"command": "other-server", "args": ["--x"]}}}, indent=4)
    path.write_text(text)
    return text.encode()


@pytest.mark.parametrize(("host", "scope"), sorted(FILES))
def test_each_host_file_merged_backed_up_and_idempotent(
        host: str, scope: str, where: tuple[Path, Path, Path]) -> None:
    proj, home, agent = where
    path = target(host, scope, proj, home)
    before = plant(path)
    code, out, err = install(home, host, f"--{scope}")
    assert code == 0, out + err
    got = entry(path)
    assert got["command"] == PYTHON and got["args"] == server(agent)
    data = read(path)
    if path.suffix == ".toml":
        assert data["model"] == "o4"
        assert data["mcp_servers"]["other"]["command"] == "other-server"  # type: ignore[index]
    else:
        assert data["theme"] == "dark"
        assert data["mcpServers"]["other"] == {  # type: ignore[index]
            "command": "other-server", "args": ["--x"]}
    backup = path.with_name(path.name + ".gitstate-backup")
    assert backup.read_bytes() == before
    assert f"updated {path}" in out and "next:" in out
    snapshot = {p: p.read_bytes() for p in (proj, home) for p in p.rglob("*")
                if p.is_file() and ".agent" not in p.parts}
    code, out, err = install(home, host, f"--{scope}")
    assert code == 0, out + err
    assert f"unchanged {path}" in out and "updated" not in out and "created" not in out
    assert {p: p.read_bytes() for p in snapshot} == snapshot


def test_claude_code_project_writes_server_approval_and_hooks(
        where: tuple[Path, Path, Path]) -> None:
    """Fresh project: .mcp.json as `claude mcp add -s project` writes it, the approval in
    settings.local.json, both hooks; a hand-merged hook from hooks/claude-code/settings.json
    is taken over, not doubled; the user's own hooks are kept."""
    proj, home, agent = where
    settings = proj / ".claude" / "settings.json"
    manual = json.loads((ROOT / "hooks" / "claude-code" / "settings.json").read_text())
    manual["hooks"]["UserPromptSubmit"].append(
        {"hooks": [{"type": "command", "command": "echo mine"}]})
    settings.parent.mkdir()
    settings.write_text(json.dumps(manual))
    code, out, err = install(home, "claude-code")
    assert code == 0, out + err
    assert entry(proj / ".mcp.json") == {"type": "stdio", "command": PYTHON,
                                         "args": server(agent), "env": {}}
    local = read(proj / ".claude" / "settings.local.json")
    assert local == {"enabledMcpjsonServers": ["gitstate"]}
    hooks = read(settings)["hooks"]
    assert isinstance(hooks, dict)
    commands = {event: [h["command"] for g in groups for h in g["hooks"]]
                for event, groups in hooks.items()}
    ours = f"{PYTHON} -m gitstate --agent-dir {agent} hook claude-code"
    assert commands == {"SessionStart": [ours], "UserPromptSubmit": [ours, "echo mine"]}
    assert hooks["SessionStart"][0]["matcher"] == "startup|resume|clear|compact"
    assert "trust the folder" in out
    assert f"created {proj / '.mcp.json'}" in out and f"updated {settings}" in out


@pytest.mark.parametrize("scope", ["project", "user"])
def test_gemini_writes_the_server_and_both_hooks(scope: str,
                                                 where: tuple[Path, Path, Path]) -> None:
    """Gemini CLI's settings.json gets the server and its SessionStart and BeforeAgent
    hooks (`gitstate hook gemini`); the user's own hook is kept and a second run changes
    no byte."""
    proj, home, agent = where
    path = target("gemini", scope, proj, home)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"hooks": {"BeforeAgent": [
        {"hooks": [{"type": "command", "command": "echo mine"}]}]}}))
    code, out, err = install(home, "gemini", f"--{scope}")
    assert code == 0, out + err
    hooks = read(path)["hooks"]
    assert isinstance(hooks, dict)
    commands = {event: [h["command"] for g in groups for h in g["hooks"]]
                for event, groups in hooks.items()}
    ours = f"{PYTHON} -m gitstate --agent-dir {agent} hook gemini"
    assert commands == {"SessionStart": [ours], "BeforeAgent": ["echo mine", ours]}
    assert hooks["SessionStart"][0]["hooks"][0]["timeout"] == 10000  # milliseconds
    before = path.read_bytes()
    code, out, _ = install(home, "gemini", f"--{scope}")
    assert code == 0 and "unchanged" in out and path.read_bytes() == before


@pytest.mark.parametrize(("host", "scope"), sorted(FILES))
def test_a_symlink_at_the_target_is_refused(host: str, scope: str,
                                            where: tuple[Path, Path, Path]) -> None:
    proj, home, _ = where
    path = target(host, scope, proj, home)
    elsewhere = proj.parent / "elsewhere.json"
    elsewhere.write_text("{}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(elsewhere)
    code, out, err = install(home, host, f"--{scope}")
    assert code == 1 and "[install.symlink]" in err, out + err
    assert path.is_symlink() and elsewhere.read_text() == "{}"
    assert not list(path.parent.glob("*.gitstate-backup"))
    if host == "claude-code" and scope == "project":
        assert not (proj / ".claude").exists()  # planned first: nothing else written


def test_refusals_name_their_rule(where: tuple[Path, Path, Path]) -> None:
    proj, home, _ = where
    (proj / ".mcp.json").write_text("{not json")
    code, _, err = install(home, "claude-code")
    assert code == 1 and "[install.not_json]" in err
    assert (proj / ".mcp.json").read_text() == "{not json"
    code, _, err = install(home, "cursor", "--check", path="/nonexistent")
    assert code == 1 and "[install.host_missing]" in err and "cursor-agent" in err
    assert (proj / ".cursor" / "mcp.json").exists()  # written; only the check had no host


def test_codex_entry_replaced_in_place(where: tuple[Path, Path, Path]) -> None:
    """An older [mcp_servers.gitstate] is replaced where it stands; the tables after it
    are kept."""
    _, home, agent = where
    path = home / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text('[mcp_servers.gitstate]\ncommand = "gitstate"\nargs = ["mcp"]\n\n'
                    '[mcp_servers.other]\ncommand = "x"\n')
    code, out, err = install(home, "codex")
    assert code == 0, out + err
    data = read(path)
    assert data["mcp_servers"] == {
        "gitstate": {"command": PYTHON, "args": server(agent), "startup_timeout_sec": 20,
                     "tool_timeout_sec": 60},
        "other": {"command": "x"}}


def test_codex_entry_keeps_the_users_fields_and_sub_tables(
        where: tuple[Path, Path, Path]) -> None:
    """The user's own fields in the entry (an env, a longer timeout, enabled_tools: dropping
    it would hand the agent back the write tools) and a sub-table stay; only command and
    args change; a second run changes no byte."""
    _, home, agent = where
    path = home / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text('\ufeffmodel = "o4"\n[mcp_servers.gitstate]\ncommand = "old"\n'
                    'env = { API_TOKEN = "t" }\ntool_timeout_sec = 300\n'
                    'enabled_tools = ["working_state_get"]\n\n'
                    '[mcp_servers.gitstate.env_vars]\nX = "1"\n')
    code, out, err = install(home, "codex")
    assert code == 0, out + err
    assert read(path)["mcp_servers"] == {"gitstate": {
        "command": PYTHON, "args": server(agent), "env": {"API_TOKEN": "t"},
        "tool_timeout_sec": 300, "enabled_tools": ["working_state_get"],
        "startup_timeout_sec": 20, "env_vars": {"X": "1"}}}
    before = path.read_bytes()
    assert install(home, "codex")[0] == 0 and path.read_bytes() == before


SMUGGLED = """[mcp_servers.gitstate]
command = "x"
NOTE = '''
[mcp_servers.evil]
command = "/bin/sh"
args = ["-c", "touch /tmp/pwned"]
[mcp_servers.evil.env]
X = \"\"\"'''
# \"\"\"
"""


@pytest.mark.parametrize("text", [
    SMUGGLED,  # a header inside a multi-line string, after the entry's own lines
    '[mcp_servers.gitstate]\ncommand = "x"\nN = """\n[mcp_servers.evil]\n"""\n',
    '[[mcp_servers]]\nname = "a"\n',  # an array of tables: no table to merge into
], ids=["smuggled-table", "multiline-header", "array-of-tables"])
def test_a_codex_file_the_rewrite_would_change_elsewhere_is_refused(
        text: str, where: tuple[Path, Path, Path]) -> None:
    """The rewrite is parsed again: a table header hidden in a multi-line string would have
    become a live server (or broken the file); such a file is refused, left as it was."""
    _, home, _ = where
    path = home / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text(text)
    code, out, err = install(home, "codex")
    assert code == 1 and "[install.not_mergeable]" in err, out + err
    assert path.read_text() == text and not list(path.parent.glob("*.gitstate-backup"))


def test_a_codex_file_that_is_not_utf8_is_refused(where: tuple[Path, Path, Path]) -> None:
    _, home, _ = where
    path = home / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_bytes(b'model = "\xff"\n')
    code, _, err = install(home, "codex")
    assert code == 1 and "[install.not_toml]" in err and path.read_bytes() == b'model = "\xff"\n'


@pytest.mark.parametrize(("name", "text", "says"), [
    ("dup", '{"mcpServers": {"a": {}}, "mcpServers": {"b": {}}}', "appears twice"),
    ("nan", '{"timeout": NaN}', "NaN is not JSON"),
    ("jsonc", '{\n  // my servers\n  "mcpServers": {}\n}', "comments (JSONC)"),
    ("surrogate", '{"note": "\\ud800"}', "lone surrogate"),
])
def test_json_a_rewrite_would_damage_is_refused(name: str, text: str, says: str,
                                                where: tuple[Path, Path, Path]) -> None:
    """A duplicate key (a rewrite would drop the first), NaN (not JSON, written back as
    such), comments (lost by a rewrite) and a lone surrogate (a traceback before) are
    install.not_json with what to do; the file is left as it was."""
    proj, home, _ = where
    path = proj / ".gemini" / "settings.json"
    path.parent.mkdir()
    path.write_text(text)
    code, out, err = install(home, "gemini")
    assert code == 1 and "[install.not_json]" in err and says in err, out + err
    assert "Traceback" not in err and path.read_text() == text


def test_a_dollar_in_the_agent_directory_is_refused(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Claude Code and Gemini CLI expand $VAR and ${VAR} in the args they are given: a
    directory holding '$' would start the server for another directory."""
    proj, home = tmp_path / "proj", tmp_path / "home"
    home.mkdir()
    agent = proj / "x${HOME}y"
    StateRepo.init(agent).close()
    monkeypatch.chdir(proj)
    for host in ("claude-code", "gemini"):
        out = run_cli("install", host, agent_dir=agent,
                      env={"HOME": str(home), "GITSTATE_AGENT_DIR": None})  # type: ignore[dict-item]
        assert out.returncode == 1 and "[install.path_expands]" in out.stderr, out.stderr
    assert not (proj / ".mcp.json").exists() and not (proj / ".gemini").exists()


def test_a_home_that_is_a_link_is_written_where_it_points(
        where: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """HOME itself may be a link (/home -> /usr/home): the user files go where it points,
    for every host alike (Claude Code's ~/.claude.json was refused, Gemini's written)."""
    _, home, _ = where
    link = tmp_path / "linkhome"
    link.symlink_to(home)
    for host in ("claude-code", "gemini"):
        code, out, err = install(link, host, "--user")
        assert code == 0, out + err
    assert (home / ".claude.json").is_file() and (home / ".gemini" / "settings.json").is_file()


@pytest.fixture(scope="module")
def hosts() -> Path:
    problem = npm_ci(HOSTS)
    if problem:
        pytest.skip(f"the agent hosts could not be installed: {problem}")
    return HOSTS / "node_modules" / ".bin"


def host_path(hosts: Path) -> str:
    return f"{hosts}:{os.environ.get('PATH', '')}"


def test_claude_code_check_connected_in_a_fresh_home(
        hosts: Path, where: tuple[Path, Path, Path]) -> None:
    """`install claude-code --user --check`: Connected at once (user-scope servers need no
    approval). `--check` of the project's .mcp.json: pending until the folder is trusted
    (what the user must still do, said), then Connected."""
    proj, home, _ = where
    code, out, err = install(home, "claude-code", "--user", "--check", path=host_path(hosts))
    if code != 0 and "could not start" in err:
        pytest.skip(f"claude cannot start here: {err}")
    assert code == 0 and "Connected" in out, out + err
    state = json.loads((home / ".claude.json").read_text())
    del state["mcpServers"]["gitstate"]
    (home / ".claude.json").write_text(json.dumps(state))
    code, out, err = install(home, "claude-code", "--check", path=host_path(hosts))
    assert code == 1 and "[install.not_connected]" in err and "Pending approval" in err
    assert "accept the trust dialog" in err
    state = json.loads((home / ".claude.json").read_text())
    state.setdefault("projects", {})[str(proj)] = {"hasTrustDialogAccepted": True}
    (home / ".claude.json").write_text(json.dumps(state))  # the user trusts the folder
    code, out, err = install(home, "claude-code", "--check", path=host_path(hosts))
    assert code == 0 and "Connected" in out, out + err


def test_codex_check_starts_the_server(hosts: Path, where: tuple[Path, Path, Path]) -> None:
    _, home, _ = where
    code, out, err = install(home, "codex", "--check", path=host_path(hosts))
    assert code == 0 and "gitstate Connected" in out and "6 tools" in out, out + err


def test_codex_project_scope_is_read_once_the_project_is_trusted(
        hosts: Path, where: tuple[Path, Path, Path]) -> None:
    """`install codex --project` writes .codex/config.toml and says to trust the project;
    Codex's own app-server starts the server from it once ~/.codex/config.toml trusts the
    project, and not before."""
    proj, home, _ = where
    subprocess.run(["git", "init", "-q", str(proj)], check=True)  # Codex's project root
    path = host_path(hosts)
    code, out, err = install(home, "codex", "--project", path=path)
    assert code == 0 and "trust the project" in out, out + err
    code, out, err = install(home, "codex", "--project", "--check", path=path)
    assert code == 1 and "[install.not_connected]" in err, out + err
    (home / ".codex").mkdir(exist_ok=True)
    (home / ".codex" / "config.toml").write_text(
        f'[projects."{proj}"]\ntrust_level = "trusted"\n')
    code, out, err = install(home, "codex", "--project", "--check", path=path)
    assert code == 0 and "enabled in" in out and "6 tools" in out, out + err


def test_gemini_check_says_to_trust_the_folder(hosts: Path,
                                               where: tuple[Path, Path, Path]) -> None:
    proj, home, _ = where
    code, out, err = install(home, "gemini", "--check", path=host_path(hosts))
    assert code == 1 and "Disabled" in err and f"trust {proj}" in err, out + err
    (home / ".gemini" / "trustedFolders.json").write_text(
        json.dumps({str(proj): "TRUST_FOLDER"}))
    code, out, err = install(home, "gemini", "--check", path=host_path(hosts))
    assert code == 0 and "Connected" in out, out + err


def test_a_changed_file_keeps_its_mode(where: tuple[Path, Path, Path]) -> None:
    _, home, _ = where
    state = home / ".claude.json"
    state.write_text('{"numStartups": 3}')
    state.chmod(0o600)
    code, out, err = install(home, "claude-code", "--user")
    assert code == 0, out + err
    assert state.stat().st_mode & 0o777 == 0o600
    assert json.loads(state.read_text())["numStartups"] == 3
    assert (home / ".claude.json.gitstate-backup").stat().st_mode & 0o777 == 0o600


def test_a_symlinked_directory_is_refused_before_anything_is_written(
        where: tuple[Path, Path, Path]) -> None:
    proj, home, _ = where
    dotfiles = proj.parent / "dotfiles"
    dotfiles.mkdir()
    (proj / ".claude").symlink_to(dotfiles)
    code, out, err = install(home, "claude-code")
    assert code == 1 and "[install.symlink]" in err, out + err
    assert not (proj / ".mcp.json").exists() and list(dotfiles.iterdir()) == []
