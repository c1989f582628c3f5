"""MCP over Streamable HTTP: ``gitstate mcp --http``, for agents that reach their state over
the network.

The same server as on stdio (mcp_server.build_server), behind three guards:

* binding: loopback (127.0.0.1) by default; any other address needs a bearer token, read
  from an environment variable or a file (never from the command line, where every user of
  the machine can read it in the process list);
* DNS rebinding: the Host header must name the bound address (or an allowed one) and a
  browser's Origin must be an allowed one (the SDK's transport security);
* size: a request body over MAX_BODY_BYTES is refused before it is parsed.
"""

from __future__ import annotations

import errno
import hmac
import ipaddress
import os
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from .errors import UsageError

MAX_BODY_BYTES = 2 << 20  # the largest legal call (a 1 MiB handoff text) and its JSON framing
TOKEN_ENV = "GITSTATE_MCP_TOKEN"
LOOPBACK_NAMES = ("localhost",)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token(env: str | None, file: Path | None) -> str | None:
    """The bearer token from ``file`` (a regular file, first line) or the variable ``env``."""
    from .safefile import read_regular

    if file is not None:
        try:
            text = read_regular(file, 4096).decode("utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read the token file {file}: {exc}",
                             rule="usage.token") from exc
    else:
        text = os.environ.get(env or TOKEN_ENV, "").strip()
    if not text:
        return None
    if len(text) < 16:
        raise UsageError("the bearer token must be at least 16 characters",
                         rule="usage.token")
    return text


class BearerAuth:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>``."""

    def __init__(self, app: App, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):  # constant time
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"text/plain"),
                                        (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body",
                            "body": b"a bearer token is required\n"})
                return
        await self.app(scope, receive, send)


def build_app(agent_dir: str | Path, host: str, port: int, token: str | None,
              allow_hosts: tuple[str, ...] = (), allow_origins: tuple[str, ...] = ()) -> App:
    """The ASGI app serving ``/mcp`` for ``agent_dir``."""
    from mcp.server.transport_security import TransportSecuritySettings

    from . import mcp_sdk
    from .mcp_server import build_server

    if not is_loopback(host) and token is None:
        raise UsageError(f"binding {host} (not loopback) needs a bearer token: set "
                         f"{TOKEN_ENV} or pass --token-file", rule="usage.token")
    names = ["127.0.0.1", "localhost", "[::1]"] if is_loopback(host) else [host]
    names += list(allow_hosts)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[f"{n}:{port}" for n in names] + [f"{n}:*" for n in allow_hosts],
        allowed_origins=[f"http://{n}:{port}" for n in names] + list(allow_origins))
    manager = mcp_sdk.session_manager(build_server(agent_dir), security_settings=security,
                                      max_request_body_size=MAX_BODY_BYTES)
    app: App = Endpoint(manager)
    return BearerAuth(app, token) if token else app


class Endpoint:
    """The ASGI app: ``/mcp`` goes to the SDK's session manager (whose ``run()`` is the
    app's lifespan); any other path is 404."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http" and scope.get("path") in ("/mcp", "/mcp/"):
            await self.manager.handle_request(scope, receive, send)
        elif scope["type"] == "http":
            await _plain(send, 404, b"not found\n")

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        async with self.manager.run():
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
        await send({"type": "lifespan.shutdown.complete"})


async def _plain(send: Send, status: int, body: bytes,
                 headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain"), *headers]})
    await send({"type": "http.response.body", "body": body})


def serve_http(agent_dir: str | Path, host: str, port: int, token: str | None,
               allow_hosts: tuple[str, ...] = (), allow_origins: tuple[str, ...] = ()) -> None:
    """Serve until interrupted; prints the endpoint's URL on stderr once listening."""
    import logging

    import uvicorn

    app = build_app(agent_dir, host, port, token, allow_hosts, allow_origins)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    listening = _listen(host.strip("[]"), port)  # bound before the address is announced
    shown = f"[{host}]" if ":" in host else host
    sys.stderr.write(f"gitstate: MCP over Streamable HTTP at http://{shown}:{port}/mcp"
                     + (" (bearer token required)" if token else "") + "; stop it with "
                     "Ctrl-C\n")
    sys.stderr.flush()
    uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on")).run(
        sockets=[listening])


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, or a usage error naming why the address cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=2048)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(f"port {port} on {host} is already in use (another server, "
                             "perhaps another `gitstate mcp --http`); nothing was started: "
                             "choose another with --port", rule="usage.port_in_use") from None
        raise UsageError(f"cannot listen on {host} port {port} ({exc.strerror or exc}); "
                         "nothing was started: check --host and --port",
                         rule="usage.listen") from None
