"""Shared fixtures: an isolated environment, a controllable clock, a fresh repository."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from tests.helpers import Clock, npm_ci


def pytest_sessionstart(session: pytest.Session) -> None:
    """Bytecode for gitstate, as an installed package has it. The suite starts hundreds of
    `python -m gitstate` processes; from an editable install in an environment that sets
    PYTHONDONTWRITEBYTECODE (this machine's shell does), each would compile every edited
    module again. compileall skips what is up to date."""
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "gitstate"), quiet=1)


@pytest.fixture(autouse=True)
def _isolated_env(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No user gitconfig, git environment or agent dir leaks into a test."""
    home = tmp_path_factory.mktemp("home")
    for name in list(os.environ):
        if name.startswith("GIT_") or name == "GITSTATE_AGENT_DIR":
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("TZ", "UTC")


@pytest.fixture
def clock() -> Clock:
    return Clock(datetime(2026, 8, 13, 1, 4, tzinfo=UTC))


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    d = tmp_path / "agent"
    d.mkdir()
    (d / "config.toml").write_text('[gitstate]\ntimezone = "Asia/Taipei"\n', encoding="utf-8")
    return d


@pytest.fixture
def repo(agent_dir: Path, clock: Clock) -> Iterator[StateRepo]:
    with StateRepo.init(agent_dir, clock=clock) as r:
        yield r




@pytest.fixture(scope="session")
def node_modules() -> Path:
    """tests/js (the TypeScript SDK client, MCP Inspector) installed from its lock file with
    npm ci, once per lock change; skipped without node and npm."""
    js = Path(__file__).resolve().parent / "js"
    problem = npm_ci(js, timeout=600)
    if problem:
        pytest.skip(f"the TypeScript SDK and Inspector clients: {problem}")
    return js / "node_modules"
