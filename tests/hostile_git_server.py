"""A hostile git:// server for the tests: the real ``git upload-pack`` behind a relay that can
lie about the refs, stall, or cut the pack. Reusable by any test that needs a remote which
misbehaves on the wire rather than in its objects (for crafted objects, use tests/forge.py
on the repository this server serves).

Usage::

    from tests.hostile_git_server import HostileGitServer

    with HostileGitServer(bare, extra_refs={"refs/gitstate/refusals/../../heads/main": sha}) as url:
        repo.store.set_remote_url(url)   # git://127.0.0.1:PORT/repo
        repo.remote.pull()                      # sees the forged name in the advertisement

Arguments (all optional, combinable):

* ``extra_refs``: ``{name: object id}`` added to the advertisement (any bytes as the name:
  the relay does not check them, which is the point);
* ``edit``: a function ``list[(id, name)] -> list[(id, name)]`` rewriting the advertised
  refs (drop, rename, repoint) after ``extra_refs`` were added;
* ``stall_refs=True``: accept the connection, read the request, never answer;
* ``cut_pack_after=N``: relay N bytes of the answer to the client's wants, then ``cut``:
  ``"stall"`` (keep the connection open and silent) or ``"close"`` (hang up);
* ``pack=bytes``: answer the client's wants with this pack instead of upload-pack's (a
  crafted one: tests/bombs.py), whatever was asked for.

Every connection runs ``git upload-pack --strict`` on the repository in a clean environment
(no user or system config) with ``uploadpack.allowAnySHA1InWant`` on, so that a forged name
pointing at any object of the repository is served like a real ref. It speaks protocol v0
only (the advertisement is the first thing sent, whatever version the client asks for), so
the advertisement is one pkt-line list the relay can rewrite. ``served`` counts the
connections; ``wants`` records the object ids clients asked for.

:func:`served` gives one repository as a path, file://, git:// or smart-HTTP remote with
forged names added (the same attack over each transport); :func:`git_daemon` is a real
``git daemon`` for pushes. :func:`smart_http` starts tests/git_http_server.py (``git http-backend``) with the same
rewrite of its advertisement (``advertise={name: id}``), or stalling every request.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

Refs = list[tuple[bytes, bytes]]
Edit = Callable[[Refs], Refs]


def pkt(data: bytes | None) -> bytes:
    """One pkt-line (None: the flush packet)."""
    return b"0000" if data is None else b"%04x" % (len(data) + 4) + data


def read_pkt(read: Callable[[int], bytes]) -> bytes | None:
    """One pkt-line's payload from ``read`` (None: a flush packet). EOFError at the end."""
    head = _exactly(read, 4)
    size = int(head, 16)
    return None if size < 4 else _exactly(read, size - 4)


def _exactly(read: Callable[[int], bytes], n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = read(n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out


def edit_advertisement(lines: list[bytes], extra: dict[bytes, bytes] | None = None,
                       edit: Edit | None = None) -> bytes:
    """A v0 ref advertisement (the pkt-line payloads before its flush) rewritten: the
    capabilities stay on the first line, ``extra`` refs are appended, then ``edit`` runs.
    Returns the new advertisement, flush included."""
    caps = b""
    refs: Refs = []
    for n, line in enumerate(lines):
        body = line.rstrip(b"\n")
        if n == 0 and b"\0" in body:
            body, caps = body.split(b"\0", 1)
        sha, _, name = body.partition(b" ")
        if name != b"capabilities^{}":
            refs.append((sha, name))
    refs += [(sha, name) for name, sha in (extra or {}).items()]
    if edit is not None:
        refs = edit(refs)
    if not refs:
        refs = [(b"0" * 40, b"capabilities^{}")]
    out = [pkt(refs[0][0] + b" " + refs[0][1] + b"\0" + caps + b"\n")]
    out += [pkt(sha + b" " + name + b"\n") for sha, name in refs[1:]]
    return b"".join(out) + pkt(None)


class HostileGitServer:
    """A git:// server on 127.0.0.1 whose relay misbehaves as configured (module docstring)."""

    def __init__(self, repo: Path, *, extra_refs: dict[str, str] | None = None,
                 edit: Edit | None = None, stall_refs: bool = False,
                 cut_pack_after: int | None = None, cut: str = "stall",
                 pack: bytes | None = None) -> None:
        if cut not in ("stall", "close"):
            raise ValueError("cut is 'stall' or 'close'")
        self.repo = repo
        self.extra = {n.encode(): s.encode() for n, s in (extra_refs or {}).items()}
        self.edit = edit
        self.stall_refs = stall_refs
        self.cut_pack_after = cut_pack_after
        self.cut = cut
        self.pack = pack
        self.served = 0
        self.wants: list[str] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"git://127.0.0.1:{self.port}/{repo.name}"
        self._stop = threading.Event()
        self._open: list[socket.socket] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        self._home = tempfile.mkdtemp(prefix="hostile-git-home-")
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> str:
        self._thread.start()
        return self.url

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        for conn in self._open:
            with _quiet():
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        for proc in self._procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        shutil.rmtree(self._home, ignore_errors=True)

    # -- serving ------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.served += 1
            self._open.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with _quiet():
            read = conn.makefile("rb", 0).read
            request = read_pkt(read) or b""
            if not request.startswith(b"git-upload-pack "):
                return  # only fetches are served (push to a real git daemon)
            if self.stall_refs:
                self._stop.wait()
                return
            proc = subprocess.Popen(
                ["git", "-c", "uploadpack.allowAnySHA1InWant=true", "upload-pack", "--strict",
                 str(self.repo)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, env=self._env())
            self._procs.append(proc)
            assert proc.stdin is not None and proc.stdout is not None
            lines = []
            while (line := read_pkt(proc.stdout.read)) is not None:
                lines.append(line)
            conn.sendall(edit_advertisement(lines, self.extra, self.edit))
            if self.pack is not None:
                proc.kill()
                self._send_pack(read, conn, self.pack)
                return
            threading.Thread(target=self._upstream, args=(read, proc), daemon=True).start()
            sent = 0
            while chunk := os.read(proc.stdout.fileno(), 65536):
                if self.cut_pack_after is not None and sent + len(chunk) > self.cut_pack_after:
                    conn.sendall(chunk[:max(0, self.cut_pack_after - sent)])
                    if self.cut == "stall":
                        self._stop.wait()
                    break
                conn.sendall(chunk)
                sent += len(chunk)
        with _quiet():
            conn.shutdown(socket.SHUT_RDWR)
        conn.close()

    def _send_pack(self, read: Callable[[int], bytes], conn: socket.socket,
                   data: bytes) -> None:
        """Read the client's wants and haves up to ``done``; answer NAK and ``data`` (in
        side-band packets when the client asked for them)."""
        sideband = False
        while True:
            line = read_pkt(read)
            if line is None:
                continue
            if line.startswith(b"want "):
                self.wants.append(line[5:45].decode("ascii", "replace"))
                sideband = sideband or b"side-band" in line
            if line.rstrip(b"\n") == b"done":
                break
        conn.sendall(pkt(b"NAK\n"))
        if not sideband:
            conn.sendall(data)
            return
        for at in range(0, len(data), 65000):
            conn.sendall(pkt(b"\x01" + data[at:at + 65000]))
        conn.sendall(pkt(None))

    def _upstream(self, read: Callable[[int], bytes], proc: subprocess.Popen[bytes]) -> None:
        """The client's wants and haves, relayed to upload-pack (and the wants noted)."""
        assert proc.stdin is not None
        with _quiet():
            while True:
                line = read_pkt(read)
                proc.stdin.write(pkt(line))
                proc.stdin.flush()
                if line is not None and line.startswith(b"want "):
                    self.wants.append(line[5:45].decode("ascii", "replace"))
                if line is not None and line.rstrip(b"\n") == b"done":
                    proc.stdin.close()
                    return

    def _env(self) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self._home,
                "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"}


class _quiet:
    """Swallow the errors of a connection the other side (or close()) ended."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> bool:
        return kind is not None and issubclass(kind, (OSError, EOFError, ValueError))


def advertised(url: str) -> Iterator[tuple[str, str]]:
    """What the server advertises, as plain `git ls-remote` reads it (for the fixture's own
    test): (id, name) pairs."""
    out = subprocess.run(["git", "ls-remote", url], capture_output=True, text=True,
                         timeout=30, check=False).stdout
    for line in out.splitlines():
        sha, _, name = line.partition("\t")
        yield sha, name


@contextlib.contextmanager
def smart_http(root: Path, repo: str, *, advertise: dict[str, str] | None = None,
               stall: bool = False, users: dict[str, str] | None = None) -> Iterator[str]:
    """tests/git_http_server.py serving the bare repositories under ``root``; yields the
    URL of ``repo`` (a directory name under root). ``advertise``, ``stall`` and ``users``
    (basic auth) as there."""
    flags = [*(["--advertise", json.dumps(advertise)] if advertise else []),
             *(["--stall"] if stall else []), *(["--users", json.dumps(users)] if users else [])]
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("git_http_server.py")),
                             str(root), *flags], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}/{repo}"
    finally:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def git_daemon(root: Path) -> Iterator[int]:
    """A real ``git daemon`` (receive-pack enabled) serving the repositories under ``root``
    on a free loopback port; yields the port (``git://127.0.0.1:PORT/<name>``)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(["git", "daemon", "--reuseaddr", "--export-all",
                             "--enable=receive-pack", f"--base-path={root}",
                             "--listen=127.0.0.1", f"--port={port}", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        for _ in range(200):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield port
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the daemon and its per-connection children
        proc.wait()


@contextlib.contextmanager
def served(transport: str, bare: Path, extra_refs: dict[str, str] | None = None
           ) -> Iterator[str]:
    """The bare repository ``bare`` as a remote of the kind ``transport`` names — "path",
    "file" (a file:// URL), "git" (this relay) or "http" (tests/git_http_server.py) — with
    ``extra_refs`` ({name: id}) added to what it advertises (for a path or file:// remote,
    written into its packed-refs, which is how such a name reaches one). Yields the URL."""
    if transport in ("path", "file"):
        if extra_refs:
            with (bare / "packed-refs").open("a", encoding="utf-8") as f:
                f.writelines(f"{sha} {name}\n" for name, sha in extra_refs.items())
        yield str(bare) if transport == "path" else f"file://{bare}"
    elif transport == "git":
        with HostileGitServer(bare, extra_refs=extra_refs) as url:
            yield url
    elif transport == "http":
        with smart_http(bare.parent, bare.name, advertise=extra_refs) as url:
            yield url
    else:
        raise ValueError(transport)
