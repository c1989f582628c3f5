"""Shared fixtures: an isolated environment, a controllable clock, a fresh repository."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gitstate.repo import StateRepo
from tests.helpers import Clock, npm_ci


def pytest_sessionstart(session: pytest.Session) -> None:
    """Bytecode for gitstate, as an installed package has it. The suite starts hundreds of
    `python -m gitstate` processes; from an editable install in an environment that sets
    PYTHONDONTWRITEBYTECODE (this machine's shell does), each would compile every module
    again, which cost the suite about a minute. compileall skips what is up to date."""
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "gitstate"), quiet=1)
    if not hasattr(session.config, "workerinput"):  # the controller: it runs no test itself
        _prefetch_npm()


_PREFETCH: list[threading.Thread] = []


def _prefetch_npm() -> None:
    """From a clean clone, install the three npm trees (the clients and hosts the MCP
    tests drive) while the first tests run, instead of one after another inside the tests
    that need them; npm_ci's file lock makes a test that gets there first wait for it."""
    js = Path(__file__).resolve().parent / "js"
    for directory in (js, js / "hosts", js / "conformance"):
        thread = threading.Thread(target=npm_ci, args=(directory,), daemon=True,
                                  name=f"npm-ci-{directory.name}")
        thread.start()
        _PREFETCH.append(thread)


def pytest_sessionfinish(session: pytest.Session) -> None:
    for thread in _PREFETCH:  # never leave a half-installed node_modules behind
        thread.join(timeout=900)


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
