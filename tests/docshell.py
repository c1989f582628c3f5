"""A warm ``gitstate`` for the documentation's shell blocks (tests/project/test_docs.py).

The documents run about a hundred ``gitstate`` commands; a fresh interpreter importing
gitstate, click and dulwich for each would take most of a minute. So one server process
imports them once and forks a child per command: the ``gitstate`` on the blocks' PATH is a
small client (``python -I -S``, no site packages) that hands the server its stdin, stdout
and stderr (SCM_RIGHTS), its arguments, environment and working directory, and exits with
the child's status. The child runs ``gitstate.__main__.main`` exactly as the installed
command does, in a process of its own; only the imports were done before the fork.

Usage: ``python -m tests.docshell SOCKET`` serves; ``client_script(SOCKET)`` is the client.
"""

from __future__ import annotations

import json
import os
import socket
import sys

CLIENT = '''#!{python} -IS
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect({sock!r})
msg = json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}})
socket.send_fds(s, [msg.encode()], [0, 1, 2])
s.shutdown(socket.SHUT_WR)
data = b""
while chunk := s.recv(64):
    data += chunk
sys.exit(int(data or b"3"))
'''


def client_script(sock: str) -> str:
    return CLIENT.format(python=sys.executable, sock=sock)


def _child(msg: dict[str, object], fds: list[int]) -> int:
    for n, fd in enumerate(fds[:3]):
        os.dup2(fd, n)
        os.close(fd)
    os.chdir(str(msg["cwd"]))
    os.environ.clear()
    os.environ.update(msg["env"])  # type: ignore[arg-type]
    import time

    time.tzset()
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    from gitstate.__main__ import main

    argv = [str(a) for a in msg["argv"]]  # type: ignore[attr-defined]
    sys.argv = ["gitstate", *argv]
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    sys.stdout.flush()
    sys.stderr.flush()
    return int(code or 0)


def serve(path: str) -> None:

    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(8)
    while True:
        conn, _ = server.accept()
        data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        while chunk := conn.recv(1 << 16):
            data += chunk
        pid = os.fork()
        if pid == 0:
            server.close()
            code = 3
            try:
                code = _child(json.loads(data), fds)
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        _, status = os.waitpid(pid, 0)
        conn.sendall(str(os.waitstatus_to_exitcode(status) & 0xFF).encode())
        conn.close()


if __name__ == "__main__":
    serve(sys.argv[1])
