"""The hostile input corpus (tests/corpus/hostile.json) against the Python API, the CLI and the
MCP server: every case ends in a clear error with nothing written, or in a safe rendering."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gitstate.api.repo import StateRepo
from gitstate.core.errors import GitStateError
from gitstate.core.model import STATE_FILE
from gitstate.core.render import HEADER
from gitstate.wakeup.fastpath import section
from tests.helpers import commit_count, run_cli

CASES: list[dict[str, Any]] = json.loads(
    (Path(__file__).resolve().parents[1] / "corpus" / "hostile.json").read_text(encoding="utf-8"))
WRITE_CASES = [c for c in CASES if c["op"] in ("set", "handoff")]


def assert_safe_section(agent_dir: Path) -> None:
    """Header, then only real key lines and one handoff line: nothing forged."""
    with StateRepo(agent_dir) as repo:
        keys = set(repo.state().live(repo.now()))
    for locale in ("zh-TW", "en", "ja"):
        text, _ = section(agent_dir, locale=locale)
        if not text:
            continue
        lines = text.split("\n")
        assert lines[-1] == "" and list(HEADER[locale]) == lines[:3]
        body = lines[3:-1]
        key_lines = [line for line in body if line.startswith("- ")]
        assert sorted(line[2:].split(" = ", 1)[0] for line in key_lines) == sorted(keys)
        others = [line for line in body if not line.startswith("- ")]
        assert len(others) <= 1 and not any(line.startswith("## ") for line in body)
        for bad in ("\u2028", "\u2029", "\r", "\x00", "\u202e"):
            assert bad not in text


def _api(repo: StateRepo, case: dict[str, Any]) -> None:
    a = case["args"]
    if case["op"] == "set":
        repo.set(a["key"], a["value"], a["reason"], ttl_hours=a.get("ttl_hours"))
    elif case["op"] == "handoff":
        repo.handoff(a.get("note"), status=a.get("status"), next_steps=a.get("next_steps"),
                     evidence=a.get("evidence"), blocker=a.get("blocker"))
    elif case["op"] == "schema":
        repo.set_schema(a["text"], "hostile schema")


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_corpus_python_api(tmp_path: Path, case: dict[str, Any]) -> None:
    """Python API: refused cases raise a GitStateError and write nothing."""
    agent = tmp_path / "agent"
    with StateRepo.init(agent) as repo:
        repo.set("stop_loss.2317", 262, "the real rule")
    if case["op"] == "config":
        (agent / "config.toml").write_text(case["args"]["text"], encoding="utf-8")
        if case["expect"] == "refused":
            with pytest.raises(GitStateError):
                section(agent)
        else:
            assert "stop_loss.2317 = 262" in section(agent)[0]
        return
    with StateRepo(agent) as repo:
        before = (repo.head(), (repo.state_dir / STATE_FILE).read_bytes())
        if case["expect"] == "refused":
            with pytest.raises(GitStateError) as err:
                _api(repo, case)
            assert err.value.rule and err.value.message
            assert err.value.rule == case.get("rule", err.value.rule)
            assert (repo.head(), (repo.state_dir / STATE_FILE).read_bytes()) == before
        else:
            _api(repo, case)
            assert commit_count(repo.state_dir) == 3
    if case["expect"] == "accepted":
        assert_safe_section(agent)
        with StateRepo(agent) as repo:
            assert repo.state().keys["stop_loss.2317"].value == 262


def _surrogates(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def _argv(case: dict[str, Any]) -> list[str] | None:
    a = case["args"]
    texts = [str(v) for v in a.values()]
    if any("\x00" in t or _surrogates(t) or len(t) > 100_000 for t in texts):
        return None  # argv cannot carry NUL, lone surrogates or a megabyte
    if case["op"] == "set":
        argv = ["set", "--reason", a["reason"]]
        if "ttl_hours" in a:
            argv += ["--ttl-hours", str(a["ttl_hours"])]
        if isinstance(a["value"], str):
            argv.append("--string")
        value = a["value"] if isinstance(a["value"], str) else json.dumps(a["value"])
        return [*argv, "--", a["key"], value]  # "--": values may start with "-"
    argv = ["handoff"]
    for name in ("status", "next_steps", "evidence", "blocker"):
        if a.get(name) is not None:
            argv += [f"--{name.replace('_', '-')}", a[name]]
    return [*argv, "--", a.get("note") or ""]


def test_corpus_cli(tmp_path: Path) -> None:
    """CLI: refused cases exit 1 or 2 with a message and no commit; accepted ones render safely."""
    agent = tmp_path / "agent"
    with StateRepo.init(agent) as repo:
        repo.set("stop_loss.2317", 262, "the real rule")
    ran = 0
    for case in WRITE_CASES:
        argv = _argv(case)
        if argv is None:
            continue
        ran += 1
        count = commit_count(agent / "state")
        out = run_cli(*argv, agent_dir=agent)
        if case["expect"] == "refused":
            assert out.returncode in (1, 2), (case["name"], out.stderr)
            assert "gitstate:" in out.stderr or "Error:" in out.stderr
            assert "Traceback" not in out.stderr
            assert commit_count(agent / "state") == count, case["name"]
        else:
            assert out.returncode == 0, (case["name"], out.stderr)
            assert_safe_section(agent)
    assert ran >= 30


@pytest.mark.anyio
async def test_corpus_mcp(tmp_path: Path) -> None:
    """MCP: refused cases are tool errors with nothing written; the server stays up."""
    pytest.importorskip("mcp")
    from tests.mcpclient import connect

    agent = tmp_path / "agent"
    with StateRepo.init(agent) as repo:
        repo.set("stop_loss.2317", 262, "the real rule")
    async with connect(agent, timeout=60) as client:
        for case in WRITE_CASES:
            if any(_surrogates(str(v)) for v in case["args"].values()):
                continue  # not encodable as UTF-8 JSON; test_mcp_abuse sends them raw
            tool = "working_state_set" if case["op"] == "set" else "working_state_handoff"
            count = commit_count(agent / "state")
            error, _, text = await client.call(tool, **case["args"])
            assert "Traceback" not in text
            if case["expect"] == "refused":
                assert error, case["name"]
                assert commit_count(agent / "state") == count, case["name"]
            else:
                assert not error, (case["name"], text)
        error, _, _ = await client.call("working_state_get")
        assert not error
    assert_safe_section(agent)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
