"""A smart-HTTP git server for the tests: `git http-backend` behind a tiny HTTP server on
127.0.0.1. With --die-on-push it exits abruptly half-way through reading a push; with
--tls CERT KEY it serves https. Hostile modes: --advertise JSON adds ``{name: id}`` refs to
the upload-pack advertisement (any bytes as names, served like real refs:
tests/hostile_git_server.py's rewrite); --stall accepts every request and never answers.
--users JSON ({user: password}) requires HTTP basic auth and hands the authenticated user
to git as REMOTE_USER, as a web server in front of http-backend does."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar


class Handler(BaseHTTPRequestHandler):
    root = ""
    die_on_push = False
    advertise: ClassVar[dict[str, str]] = {}
    stall = False
    users: ClassVar[dict[str, str]] = {}

    def log_message(self, *args: object) -> None:
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _cgi(self, method: str) -> None:
        if self.stall:
            threading.Event().wait()
        path, _, query = self.path.partition("?")
        body = self._body() if method == "POST" else b""
        user = "test"
        if self.users:
            import base64

            given = self.headers.get("Authorization", "")
            name, _, password = base64.b64decode(given[6:] or b"").decode(
                "utf-8", "replace").partition(":") if given.startswith("Basic ") else ("", "", "")
            if self.users.get(name) != password or not name:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            user = name
        if self.die_on_push and path.endswith("git-receive-pack"):
            os._exit(1)  # the server dies mid-push, the body half consumed
        env = {"GIT_PROJECT_ROOT": self.root, "GIT_HTTP_EXPORT_ALL": "1",
               "PATH_INFO": path, "QUERY_STRING": query, "REQUEST_METHOD": method,
               "CONTENT_TYPE": self.headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(len(body)), "REMOTE_USER": user,
               "REMOTE_ADDR": "127.0.0.1", "PATH": os.environ.get("PATH", ""),
               "HOME": self.root, "GIT_CONFIG_NOSYSTEM": "1"}
        if self.advertise:  # a forged name must be fetchable like a real ref
            env.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0":
                        "uploadpack.allowAnySHA1InWant", "GIT_CONFIG_VALUE_0": "true"})
        out = subprocess.run(["git", "http-backend"], input=body, env=env,
                             capture_output=True, check=False).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        if self.advertise and query == "service=git-upload-pack":
            payload = _forge(payload, self.advertise)
        status = 200
        headers = []
        for line in head.split(b"\r\n"):
            name, _, value = line.decode().partition(": ")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        self._cgi("GET")

    def do_POST(self) -> None:
        self._cgi("POST")


def _forge(payload: bytes, extra: dict[str, str]) -> bytes:
    """The smart-HTTP advertisement (``# service=`` line, flush, refs, flush) with ``extra``
    refs added."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.hostile_git_server import edit_advertisement, pkt, read_pkt

    at = 0

    def read(n: int) -> bytes:
        nonlocal at
        at += n
        return payload[at - n:at]

    service = read_pkt(read)
    read_pkt(read)  # the flush after it
    lines = []
    while (line := read_pkt(read)) is not None:
        lines.append(line)
    return pkt(service) + pkt(None) + edit_advertisement(
        lines, {n.encode(): s.encode() for n, s in extra.items()})


def main() -> None:
    Handler.root = sys.argv[1]
    Handler.die_on_push = "--die-on-push" in sys.argv
    Handler.stall = "--stall" in sys.argv
    if "--users" in sys.argv:
        Handler.users = json.loads(sys.argv[sys.argv.index("--users") + 1])
    if "--advertise" in sys.argv:
        Handler.advertise = json.loads(sys.argv[sys.argv.index("--advertise") + 1])
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if "--tls" in sys.argv:
        cert, key = sys.argv[sys.argv.index("--tls") + 1:][:2]
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
