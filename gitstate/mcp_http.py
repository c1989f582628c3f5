"""MCP over Streamable HTTP: ``gitstate mcp --http``, for agents that reach their state over
the network.

The same server as on stdio (mcp_server.build_server), behind these guards:

* binding: loopback (127.0.0.1) by default; any other address needs a bearer token, read
  from an environment variable or a file (never from the command line, where every user of
  the machine can read it in the process list);
* httpguard, the checks ``gitstate serve`` makes too: the Host header (DNS rebinding, 421),
  a browser's Origin (403), the OAuth discovery paths (404, before the token), the bearer
  token (401, a missing one and a wrong one told apart), a CSP and ``nosniff`` on every
  response;
* size: a request body over MAX_BODY_BYTES is refused before it is parsed.
"""

from __future__ import annotations

import errno
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

from .errors import UsageError
from .httpguard import SECURITY_HEADERS, Guard

MAX_BODY_BYTES = 2 << 20  # the largest legal call (a 1 MiB handoff text) and its JSON framing
TOKEN_ENV = "GITSTATE_MCP_TOKEN"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_SECURITY = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS]


class Guarded:
    """ASGI middleware: httpguard's checks before the app, its headers on every response."""

    def __init__(self, app: App, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def secured(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *_SECURITY]}
            await send(message)

        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers") or []}
        refusal = self.guard.check(str(scope.get("path", "")), headers)
        if refusal is not None:
            await _plain(secured, refusal.status, refusal.body(),
                         tuple((k.lower().encode(), v.encode()) for k, v in refusal.headers))
            return
        await self.app(scope, receive, secured)


def build_app(agent_dir: str | Path, host: str, port: int, token: str | None,
              allow_hosts: tuple[str, ...] = (), allow_origins: tuple[str, ...] = (),
              token_env: str = TOKEN_ENV) -> App:
    """The ASGI app serving ``/mcp`` for ``agent_dir``."""
    from . import mcp_sdk
    from .httpguard import require_token_off_loopback
    from .mcp_server import build_server

    require_token_off_loopback(host, token, f"set {token_env} or pass --token-file")
    guard = Guard(host, port, token, allow_hosts, allow_origins,
                  token_hint=f"the one the server was started with (${token_env} or its "
                  "--token-file)")
    # the Host and Origin checks are httpguard's (security_settings=None leaves the SDK's off)
    manager = mcp_sdk.session_manager(build_server(agent_dir), security_settings=None,
                                      max_request_body_size=MAX_BODY_BYTES)
    return Guarded(Endpoint(manager), guard)


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
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), *headers]})
    await send({"type": "http.response.body", "body": body})


def serve_http(agent_dir: str | Path, host: str, port: int, token: str | None,
               allow_hosts: tuple[str, ...] = (), allow_origins: tuple[str, ...] = (),
               token_env: str = TOKEN_ENV) -> None:
    """Serve until interrupted; prints the endpoint's URL on stderr once listening."""
    import logging

    import uvicorn

    app = build_app(agent_dir, host, port, token, allow_hosts, allow_origins, token_env)
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
