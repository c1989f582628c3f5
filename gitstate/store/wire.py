"""Connections to a remote, every step under a deadline.

A remote that never sends its refs, or stops half-way through a pack, must not hang a pull
(nor, in remote-first mode, a write). Each operation gets a :class:`Clock` made from
:class:`Deadlines` (config.toml's ``remote_connect_seconds``, ``remote_stall_seconds`` and
``remote_total_seconds``): connecting may take the first, every wait for the next bytes
(the first byte included) the second, the whole operation the third. A deadline that passes
ends the operation with a :class:`~gitstate.core.errors.StoreError` of rule ``remote.timeout``
naming the setting. How each transport keeps them:

* git:// — our own connect (a socket with the connect timeout), then a socket timeout before
  every read and write, cut to what is left of the total;
* a path or ``file://`` remote — ``git upload-pack`` / ``git receive-pack`` run as a child in
  gitcli's clean environment (so that a push runs the receiving repository's hooks, as git
  does; dulwich's in-process client runs none), read through ``select`` with the same
  budgets and killed when the total passes;
* ssh — dulwich's ssh client, its child's output read the same way;
* http(s) — urllib3's connect and read timeouts, the total checked on every request and
  every read of its answer.

:func:`is_timeout` recognises a timeout however deep a transport library wrapped it.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import unquote, urlparse

from dulwich.client import (
    GitClient,
    SSHGitClient,
    SubprocessGitClient,
    SubprocessSSHVendor,
    SubprocessWrapper,
    TCPGitClient,
    Urllib3HttpGitClient,
    default_urllib3_manager,
)
from dulwich.protocol import DEFAULT_GIT_PROTOCOL_VERSION_FETCH, Protocol

from ..core.errors import StoreError
from ..system import gitcli
from .fs import is_local


@dataclass(frozen=True)
class Deadlines:
    """Seconds each network step may take (the defaults are config.toml's)."""

    connect: float = 15.0  # [gitstate] remote_connect_seconds
    stall: float = 60.0  # [gitstate] remote_stall_seconds: the first byte, and each after
    total: float = 900.0  # [gitstate] remote_total_seconds: one whole fetch or push


class Clock:
    """One operation's deadlines (see the module)."""

    def __init__(self, deadlines: Deadlines, action: str) -> None:
        self.deadlines = deadlines
        self.action = action
        self.start = time.monotonic()

    def left(self) -> float:
        return self.deadlines.total - (time.monotonic() - self.start)

    def budget(self) -> tuple[float, str]:
        """How long the next wait may last, and the setting that bounds it."""
        left = self.left()
        if left <= 0:
            raise self.timeout("total")
        if left < self.deadlines.stall:
            return left, "total"
        return self.deadlines.stall, "stall"

    def check(self) -> None:
        if self.left() <= 0:
            raise self.timeout("total")

    def timeout(self, which: str) -> StoreError:
        d = self.deadlines
        text = {
            "connect": f"could not connect within {d.connect:g} s ([gitstate] "
                       "remote_connect_seconds)",
            "stall": f"sent nothing for {d.stall:g} s ([gitstate] remote_stall_seconds)",
            "total": f"did not finish within {d.total:g} s ([gitstate] remote_total_seconds)",
        }[which]
        return StoreError(f"{self.action}: the remote {text}; nothing of it was used",
                          rule="remote.timeout", deadline=which)


def is_timeout(exc: BaseException) -> bool:
    """Whether ``exc`` is, or was caused by, a timeout (socket, urllib3, ours)."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 10:
        if isinstance(current, TimeoutError | socket.timeout):
            return True
        name = type(current).__name__
        if name in ("ReadTimeoutError", "ConnectTimeoutError", "TimeoutError"):
            return True
        reason = getattr(current, "reason", None)
        if isinstance(reason, BaseException) and is_timeout(reason):
            return True
        current = current.__cause__ or current.__context__
        seen += 1
    return False


def _readable(source: Any, seconds: float) -> bool:
    """Whether ``source`` (a descriptor, or anything with ``fileno``) can be read within
    ``seconds`` (its end counts). poll, not select: select refuses a descriptor numbered
    1024 or more, which a long-lived process holding many files reaches."""
    poller = select.poll()
    poller.register(source, select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(max(seconds, 0.0) * 1000))


def _fd_reader(fd: int, clock: Clock,
               on_timeout: Callable[[], None]) -> Callable[[int | None], bytes]:
    """read(n) over a pipe: exactly n bytes (fewer only at its end), each wait bounded."""

    def read(n: int | None = None) -> bytes:
        parts: list[bytes] = []
        want = n if n is not None else 1 << 30
        while want > 0:
            wait, which = clock.budget()
            if not _readable(fd, wait):
                on_timeout()
                raise clock.timeout(which)
            chunk = os.read(fd, min(want, 1 << 16))
            if not chunk:
                break
            parts.append(chunk)
            want -= len(chunk)
        return b"".join(parts)

    return read


class _TcpClient(TCPGitClient):
    """git:// with a connect timeout and a bounded wait before every read and write."""

    def __init__(self, host: str, port: int | None, clock: Clock, **kwargs: Any) -> None:
        super().__init__(host, port, **kwargs)
        self.address = (host, port or 9418)
        self.clock = clock

    def _connect(self, cmd: bytes, path: str | bytes, protocol_version: int | None = None
                 ) -> tuple[Protocol, Callable[[], bool], IO[bytes] | None]:
        clock = self.clock
        try:
            sock = socket.create_connection(self.address, timeout=min(
                clock.deadlines.connect, max(clock.left(), 0.001)))
        except TimeoutError as exc:
            raise clock.timeout("connect") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        rfile = sock.makefile("rb", -1)
        wfile = sock.makefile("wb", 0)

        def read(n: int) -> bytes:
            wait, which = clock.budget()
            sock.settimeout(wait)
            try:
                return rfile.read(n)
            except TimeoutError as exc:
                raise clock.timeout(which) from exc

        def write(data: bytes) -> int | None:
            wait, which = clock.budget()
            sock.settimeout(wait)
            try:
                return wfile.write(data)
            except TimeoutError as exc:
                raise clock.timeout(which) from exc

        def close() -> None:
            rfile.close()
            wfile.close()
            sock.close()

        proto = Protocol(read, write, close)
        path_bytes = path if isinstance(path, bytes) else path.encode("utf-8")
        if path_bytes.startswith(b"/~"):
            path_bytes = path_bytes[1:]
        self.protocol_version = (protocol_version or DEFAULT_GIT_PROTOCOL_VERSION_FETCH) \
            if cmd == b"upload-pack" else 0
        extra = b"\0\0version=2\0" if cmd == b"upload-pack" and self.protocol_version == 2 \
            else b""
        proto.send_cmd(b"git-" + cmd, path_bytes,
                       b"host=" + self.address[0].encode("ascii", "replace") + extra)
        return proto, lambda: _readable(sock, 0), None


class _GitChildClient(SubprocessGitClient):
    """A path remote through ``git upload-pack`` / ``git receive-pack`` run here (module)."""

    def __init__(self, clock: Clock, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.clock = clock

    def _connect(self, cmd: bytes, path: str | bytes, protocol_version: int | None = None
                 ) -> tuple[Protocol, Callable[[], bool], IO[bytes] | None]:
        git = gitcli.git_binary()
        if git is None:
            raise StoreError("a path remote is reached through git's upload-pack and "
                             "receive-pack: install git", rule="remote.needs_git")
        argv = [git]
        for override in gitcli.OVERRIDES:
            # a push runs the receiving repository's hooks (and so follows its own config
            # for them), as git's own push does
            if cmd == b"receive-pack" and override.startswith(("core.hooksPath",
                                                                "core.alternateRefsCommand")):
                continue
            argv += ["-c", override]
        argv += [cmd.decode("ascii"), path.decode() if isinstance(path, bytes) else path]
        env_cm = gitcli.environment()
        env = env_cm.__enter__()
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, bufsize=0)

        def cleanup() -> None:
            env_cm.__exit__(None, None, None)

        return _child_protocol(proc, self.clock, cleanup)


def _child_protocol(proc: subprocess.Popen[bytes], clock: Clock,
                    cleanup: Callable[[], None] = lambda: None
                    ) -> tuple[Protocol, Callable[[], bool], IO[bytes] | None]:
    """A Protocol over a child's pipes: bounded reads, the child killed at the total."""
    assert proc.stdin is not None and proc.stdout is not None
    killer = threading.Timer(max(clock.left(), 0.001), proc.kill)
    killer.daemon = True
    killer.start()
    stdout = proc.stdout.fileno()
    stdin = proc.stdin

    def close() -> None:
        killer.cancel()
        with contextlib.suppress(OSError):
            stdin.close()
        if proc.poll() is None:
            try:
                proc.wait(timeout=min(10.0, max(clock.left(), 0.1)))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
        if proc.stderr is not None:
            proc.stderr.close()
        cleanup()

    def write(data: bytes) -> int | None:
        try:
            return stdin.write(data)
        except BrokenPipeError as exc:
            clock.check()
            raise StoreError("the remote's git process ended early",
                             rule="remote.unreachable") from exc

    proto = Protocol(_fd_reader(stdout, clock, proc.kill), write, close)
    return proto, lambda: _readable(stdout, 0), proc.stderr


class _SshVendor(SubprocessSSHVendor):
    """dulwich's ssh command, its output read with the clock's budgets."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def run_command(self, *args: Any, **kwargs: Any) -> SubprocessWrapper:
        con = super().run_command(*args, **kwargs)
        assert con.proc.stdout is not None
        killer = threading.Timer(max(self.clock.left(), 0.001), con.proc.kill)
        killer.daemon = True
        killer.start()
        # keep dulwich's buffered reader alive: collecting it would close the pipe
        con.unbuffered_from = con.read  # type: ignore[attr-defined]
        con.read = _fd_reader(con.proc.stdout.fileno(), self.clock,  # type: ignore[assignment]
                              con.proc.kill)
        close = con.close

        def closed(timeout: int | None = 60) -> None:
            killer.cancel()
            close(timeout)

        con.close = closed  # type: ignore[method-assign]
        return con


def _timed_manager(base: type, clock: Clock) -> type:
    """A urllib3 pool manager class whose every request, and every read of its response,
    first checks ``clock``'s total and turns a timeout into ``remote.timeout``."""

    class Timed(base):  # type: ignore[misc]
        def request(self, *args: Any, **kwargs: Any) -> Any:
            clock.check()
            try:
                resp = super().request(*args, **kwargs)
            except Exception as exc:
                if is_timeout(exc):
                    raise clock.timeout("stall") from exc
                raise
            read = resp.read

            def timed(*a: Any, **k: Any) -> bytes:
                clock.check()
                try:
                    data: bytes = read(*a, **k)
                except Exception as exc:
                    if is_timeout(exc):
                        raise clock.timeout("stall") from exc
                    raise
                return data

            resp.read = timed
            return resp

    return Timed


def client_for(url: str, http_config: Any, clock: Clock,
               push: bool = False) -> tuple[GitClient, str]:
    """The client for ``url`` with ``clock``'s deadlines, and the path on the remote.
    ``http_config`` is a dulwich config holding only git's ``http`` settings (the caller
    keeps every program-naming setting out of it). Thin packs are never asked for: every
    pack is checked as a whole (``packindex``)."""
    parsed = urlparse(url)
    if is_local(url):
        path = unquote(parsed.path) if url.startswith("file://") else url
        if gitcli.git_binary() is None:
            if push:  # dulwich's in-process push would run none of the receiver's hooks
                raise StoreError("pushing to a path remote runs its receive hooks through "
                                 "git's receive-pack: install git", rule="remote.needs_git")
            from dulwich.client import LocalGitClient

            return LocalGitClient(thin_packs=False), path  # read in-process: no deadline
        return _GitChildClient(clock, thin_packs=False), path
    if parsed.scheme == "git":
        if parsed.hostname is None:
            raise StoreError(f"{url} names no host", rule="remote.bad_url")
        return _TcpClient(parsed.hostname, parsed.port, clock, thin_packs=False), \
            unquote(parsed.path)
    if parsed.scheme in ("http", "https"):
        import urllib3

        manager = default_urllib3_manager(
            http_config, base_url=url, timeout=urllib3.Timeout(  # type: ignore[arg-type]
                connect=clock.deadlines.connect, read=clock.deadlines.stall),
            pool_manager_cls=_timed_manager(urllib3.PoolManager, clock),
            proxy_manager_cls=_timed_manager(urllib3.ProxyManager, clock))
        client = Urllib3HttpGitClient.from_parsedurl(
            parsed, config=http_config, thin_packs=False,
            pool_manager=manager)  # type: ignore[arg-type]
        return client, parsed.path
    from dulwich.client import get_transport_and_path

    ssh, path = get_transport_and_path(
        url, config=http_config, thin_packs=False,
        ssh_command=os.environ.get("GIT_SSH_COMMAND") or "ssh")
    if not isinstance(ssh, SSHGitClient):
        raise StoreError(f"{url}: gitstate reaches remotes by path, file://, git://, "
                         "http(s):// and ssh", rule="remote.bad_url")
    ssh.ssh_vendor = _SshVendor(clock)
    return ssh, path if isinstance(path, str) else path.decode()
