"""Helpers shared by the tests: a settable clock, the CLI and git as separate processes."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

GIT = shutil.which("git")


class Clock:
    """A settable clock; ``advance`` moves it forward (or back)."""

    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> None:
        self.now += timedelta(**kwargs)


def run_cli(*args: str, agent_dir: Path | None = None, input: str | None = None,
            env: dict[str, str] | None = None,
            process: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the ``gitstate`` command: in this process through click's test runner (the same
    entry point, ``gitstate.__main__.main``, with its own stdin, stdout, stderr and
    environment), or with ``process`` as a separate process, where the process itself is
    what is tested (imports, signals, the installed entry point)."""
    argv = ["--agent-dir", str(agent_dir)] if agent_dir is not None else []
    argv += list(args)
    if process:
        full_env = {**os.environ, **(env or {})}
        return subprocess.run([sys.executable, "-m", "gitstate", *argv], capture_output=True,
                              text=True, input=input, env=full_env, timeout=60, check=False)
    from click.testing import CliRunner

    from gitstate.__main__ import main

    with CliRunner().isolation(input=input, env=env) as (out, err, _):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
    return subprocess.CompletedProcess([*argv], code, out.getvalue().decode("utf-8", "replace"),
                                       err.getvalue().decode("utf-8", "replace"))


def git(state_dir: Path, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real git CLI as an independent checker."""
    if GIT is None:
        pytest.skip("git CLI not installed")
    return subprocess.run([GIT, "-C", str(state_dir), *args], capture_output=True, text=True,
                          input=input, timeout=60, check=False)


def commit_count(state_dir: Path) -> int:
    out = git(state_dir, "rev-list", "--count", "main")
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


def assert_fsck_clean(state_dir: Path) -> None:
    from gitstate.write.maintenance import wait_idle

    assert wait_idle(state_dir / ".git"), "background maintenance did not finish"
    out = git(state_dir, "fsck", "--strict", "--no-dangling")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "error" not in out.stderr.lower(), out.stderr


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for a loopback server a test starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def install_pre_receive(bare: Path, tmp_path: Path, *, trust_remote: bool = True) -> None:
    """hooks/git/pre-receive in a bare repository, calling this checkout's gitstate. With
    ``trust_remote`` (the default) the server takes its pushers' role claims, as a server
    whose transport authenticates them would (``gitstate.trustRemote``; the trust tests
    configure signers instead)."""
    if trust_remote:
        subprocess.run([GIT or "git", "-C", str(bare), "config", "gitstate.trustRemote",
                        "true"], check=True)
    write_pre_receive(bare / "hooks" / "pre-receive", tmp_path)


def write_pre_receive(hook: Path, tmp_path: Path) -> None:
    """hooks/git/pre-receive written to ``hook``, calling this checkout's gitstate (a shim
    in ``tmp_path``/bin) — for a bare repository, or where a server such as gitolite keeps
    the hooks it links into its repositories."""
    root = Path(__file__).resolve().parent.parent
    shim = tmp_path / "bin" / "gitstate"
    shim.parent.mkdir(exist_ok=True)
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m gitstate \"$@\"\n")
    shim.chmod(0o755)
    text = (root / "hooks" / "git" / "pre-receive").read_text()
    hook.parent.mkdir(parents=True, exist_ok=True)
    hook.write_text(text.replace("GITSTATE=${GITSTATE:-gitstate}", f"GITSTATE={shim}"))
    hook.chmod(0o755)


def trust_remote(agent_dir: Path) -> None:
    """config.toml's ``[trust] trust_remote = true``: the clone at ``agent_dir`` takes role
    claims (human decisions, runtime run events) from its remote without signatures."""
    path = agent_dir / "config.toml"
    agent_dir.mkdir(parents=True, exist_ok=True)
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    path.write_text(text + "\n[trust]\ntrust_remote = true\n", encoding="utf-8")


class SigningKeys:
    """Real SSH keys made with ssh-keygen, one per principal (``human:alice``,
    ``runtime:a``), and git's allowed-signers file naming them all."""

    def __init__(self, folder: Path, *principals: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.keys: dict[str, Path] = {}
        lines = []
        for principal in principals:
            key = folder / principal.replace(":", "-")
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", principal,
                            "-f", str(key)], check=True, capture_output=True)
            self.keys[principal] = key
            lines.append(f"{principal} {key.with_suffix('.pub').read_text().strip()}")
        self.allowed = folder / "allowed_signers"
        self.allowed.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def config(self, agent_dir: Path, principal: str | None) -> None:
        """config.toml's [trust] table: sign as ``principal`` (None: no key), verify by
        the allowed signers."""
        agent_dir.mkdir(parents=True, exist_ok=True)
        path = agent_dir / "config.toml"
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        sign = f'signing_key = "{self.keys[principal]}"\n' if principal else ""
        path.write_text(text + f'\n[trust]\n{sign}allowed_signers = "{self.allowed}"\n',
                        encoding="utf-8")


class HttpServer:
    """`gitstate mcp --http` on a free loopback port, started and waited for."""

    def __init__(self, agent: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.log = ""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gitstate", "--agent-dir", str(agent), "mcp", "--http",
             "--port", str(self.port), *args], env={**os.environ, **(env or {})},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parent.parent,
            start_new_session=True)
        self._drain = threading.Thread(target=self._read_log, daemon=True)
        self._drain.start()  # a server must never block on a full stderr pipe
        deadline = time.monotonic() + 30
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    break
            if self.proc.poll() is not None:
                self._drain.join(10)
                raise AssertionError(self.log)
            assert time.monotonic() < deadline, "the HTTP server did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._drain.join(10)
        if self.proc.stderr and not self.proc.stderr.closed:
            self.proc.stderr.close()

    def _read_log(self) -> None:
        """Collect what the server writes on stderr, whole, in ``log``."""
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log += line


def npm_ci(directory: Path, timeout: float = 900) -> str | None:
    """Install ``directory``'s npm packages from its lock file (``npm ci``) unless they are
    installed already and newer than the lock; None when ready, else why not. A file lock
    makes parallel test workers take turns (two npm ci in one directory break each other)."""
    import fcntl
    import shutil

    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        return "node and npm are needed"
    marker = directory / "node_modules" / ".package-lock.json"
    lock = directory / "package-lock.json"
    with (directory / ".npm-ci.lock").open("w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if marker.exists() and marker.stat().st_mtime >= lock.stat().st_mtime:
            return None
        out = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                             cwd=directory, capture_output=True, text=True, timeout=timeout,
                             check=False)
    return None if out.returncode == 0 else f"npm ci failed (no registry?): {out.stderr[-500:]}"

