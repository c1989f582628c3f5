"""MCP over Streamable HTTP: ``gitstate mcp --http``, for agents that reach their state over
the network.

The same server as on stdio (server.build_server), behind these guards:

* binding: loopback (127.0.0.1) by default; any other address needs a bearer token, read
  from an environment variable or a file (never from the command line, where every user of
  the machine can read it in the process list);
* httpguard, the checks ``gitstate serve`` makes too: the Host header (DNS rebinding, 421),
  a browser's Origin (403), the OAuth discovery paths (404, before the token), the bearer
  token (401, a missing one and a wrong one told apart), a CSP and ``nosniff`` on every
  response;
* size: a request body over MAX_BODY_BYTES is refused before it is parsed;
* time: a request's head and body must arrive within ``--request-timeout`` seconds of its
  first byte (and a new connection's first request within as long), else 408 and the
  connection is closed (TimedH11Protocol), so stalled requests hold no connection;
* sessions: at most ``--max-sessions`` open at once (the SDK's cap; the next initialize gets
  503 ``mcp.sessions_full`` naming the setting), each ended after ``--session-idle`` seconds
  with no request in flight (the SDK's idle expiry);
* logs: a session id is a bearer credential for its session, so none is ever written to
  stderr (RedactingFormatter on every log record, the SDK's and uvicorn's included).
"""

from __future__ import annotations

import errno
import json
import logging
import re
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import UsageError
from ..system.httpguard import REQUEST_SECONDS, SECURITY_HEADERS, Guard

if TYPE_CHECKING:
    import asyncio

MAX_BODY_BYTES = 2 << 20  # the largest legal call (a 1 MiB handoff text) and its JSON framing
TOKEN_ENV = "GITSTATE_MCP_TOKEN"
MAX_SESSIONS = 64
SESSION_IDLE_SECONDS = 600.0


@dataclass(frozen=True)
class Limits:
    """The HTTP server's bounds (``mcp --http`` options of the same names)."""

    request_timeout: float = REQUEST_SECONDS
    max_sessions: int = MAX_SESSIONS
    session_idle: float = SESSION_IDLE_SECONDS

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
              token_env: str = TOKEN_ENV, limits: Limits = Limits()) -> App:
    """The ASGI app serving ``/mcp`` for ``agent_dir``."""
    from ..system.httpguard import require_token_off_loopback
    from . import events as mcp_events
    from . import sdk as mcp_sdk
    from .server import build_server

    require_token_off_loopback(host, token, f"set {token_env} or pass --token-file")
    guard = Guard(host, port, token, allow_hosts, allow_origins,
                  token_hint=f"the one the server was started with (${token_env} or its "
                  "--token-file)")
    # the Host and Origin checks are httpguard's (security_settings=None leaves the SDK's off)
    # event ids, a priming event with `retry` and Last-Event-ID replay (events.py)
    manager = mcp_sdk.session_manager(build_server(agent_dir), security_settings=None,
                                      event_store=mcp_events.event_store(),
                                      retry_interval=mcp_events.RETRY_MS,
                                      max_request_body_size=MAX_BODY_BYTES,
                                      max_sessions=limits.max_sessions,
                                      session_idle_timeout=limits.session_idle)
    return Guarded(Endpoint(manager, limits), guard)


class Endpoint:
    """The ASGI app: ``/mcp`` goes to the SDK's session manager (whose ``run()`` is the
    app's lifespan); any other path is 404."""

    def __init__(self, manager: Any, limits: Limits) -> None:
        self.manager = manager
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http" and scope.get("path") in ("/mcp", "/mcp/"):
            await self.manager.handle_request(scope, receive, self._sessions_full(send))
        elif scope["type"] == "http":
            await _plain(send, 404, b"not found\n")

    def _sessions_full(self, send: Send) -> Send:
        """``send``, with the SDK's 503 at its session cap restated: the rule, the setting,
        what to do (its own text says only "Too many open sessions")."""
        cap = self.limits.max_sessions
        text = (f"{cap} MCP sessions are open, the most this server keeps (--max-sessions "
                f"{cap}): end one (DELETE /mcp with its mcp-session-id), let one expire "
                f"(--session-idle {self.limits.session_idle:g} s without a request), or "
                "restart the server with a higher --max-sessions [mcp.sessions_full]")
        body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
            "code": -32603, "message": text, "data": {"rule": "mcp.sessions_full",
                                                       "max_sessions": cap}}}).encode()
        replaced = False

        async def watch(message: MutableMapping[str, Any]) -> None:
            nonlocal replaced
            if message["type"] == "http.response.start" and message["status"] == 503:
                replaced = True
                headers = [(k, v) for k, v in message.get("headers", [])
                           if k.lower() != b"content-length"]
                await send({**message, "headers": [
                    *headers, (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
            elif not replaced:
                await send(message)

        return watch

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


SESSION_ID = re.compile(r"(?<![0-9A-Za-z])[0-9a-fA-F]{32}(?![0-9A-Za-z])|"
                        r"(?<![0-9A-Za-z])[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")


class RedactingFormatter(logging.Formatter):
    """Every log line with session ids (the SDK's are uuid4 hex) replaced by
    ``<session id>``, the traceback of an exception included."""

    def format(self, record: logging.LogRecord) -> str:
        return SESSION_ID.sub("<session id>", super().format(record))


def client_gone(record: logging.LogRecord) -> bool:
    """False for the SDK's traceback of a client that went away mid-request (a request cut
    by --request-timeout among them): not the server's error, and a flood on stderr if
    each were logged."""
    exc = record.exc_info[1] if record.exc_info else None
    return type(exc).__name__ != "ClientDisconnect"


def timed_protocol(seconds: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with a deadline per request: from the connection's opening
    (or the first byte of the next request on it) until the request's head and body have
    all arrived. Past it: 408 when some of the request came, and the connection closed.
    uvicorn alone waits for a stalled head or body forever (its keep-alive timer runs only
    between requests). Uses the protocol's public attributes (conn, cycle, transport,
    loop) of uvicorn 0.3x-0.5x; tests/mcp/test_mcp_http_limits.py holds it to them."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    waiting = (h11.IDLE, h11.SEND_BODY)
    refusal = (f"gitstate: the request did not arrive within {seconds:g} s "
               "(--request-timeout) [http.request_timeout]\n").encode()
    response = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                + b"".join(k.encode() + b": " + v.encode() + b"\r\n" for k, v in SECURITY_HEADERS)
                + b"connection: close\r\ncontent-length: " + str(len(refusal)).encode()
                + b"\r\n\r\n" + refusal)

    class TimedH11Protocol(H11Protocol):
        deadline: asyncio.TimerHandle | None = None
        heard = False

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self.deadline is None and self.conn.their_state is h11.IDLE:
                self._arm()
            self.heard = True
            super().data_received(data)
            if self.conn.their_state not in waiting:
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self.heard = False
            self.deadline = self.loop.call_later(seconds, self._expired)

        def _disarm(self) -> None:
            if self.deadline is not None:
                self.deadline.cancel()
                self.deadline = None

        def _expired(self) -> None:
            self.deadline = None
            if self.transport.is_closing() or self.conn.their_state not in waiting:
                return
            if self.heard and (self.cycle is None or not self.cycle.response_started):
                self.transport.write(response)
            if self.cycle is not None:
                self.cycle.keep_alive = False
            self.transport.close()

    return TimedH11Protocol


def serve_http(agent_dir: str | Path, host: str, port: int, token: str | None,
               allow_hosts: tuple[str, ...] = (), allow_origins: tuple[str, ...] = (),
               token_env: str = TOKEN_ENV, limits: Limits = Limits()) -> None:
    """Serve until interrupted; prints the endpoint's URL on stderr once listening."""
    import uvicorn

    app = build_app(agent_dir, host, port, token, allow_hosts, allow_origins, token_env,
                    limits)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter("%(levelname)s: %(name)s: %(message)s"))
    handler.addFilter(client_gone)
    logging.basicConfig(level=logging.WARNING, handlers=[handler], force=True)
    listening = _listen(host.strip("[]"), port)  # bound before the address is announced
    shown = f"[{host}]" if ":" in host else host
    sys.stderr.write(f"gitstate: MCP over Streamable HTTP at http://{shown}:{port}/mcp"
                     + (" (bearer token required)" if token else "") + "; stop it with "
                     "Ctrl-C\n")
    sys.stderr.flush()
    # log_config=None: uvicorn's loggers go to the handler above, not to their own
    uvicorn.Server(uvicorn.Config(app, log_level="warning", log_config=None, lifespan="on",
                                  http=timed_protocol(limits.request_timeout))).run(
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
