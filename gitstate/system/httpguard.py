"""The checks every HTTP endpoint of gitstate makes before it answers: ``gitstate mcp --http``
(an ASGI app, gitstate/mcp/http.py) and ``gitstate serve`` (the report's pages,
gitstate/report/build.py).

In order, for every request:

1. DNS rebinding: the Host header must name the bound address and port — the loopback names
   on loopback, any IP literal on a wildcard bind (``0.0.0.0``, ``::``: a rebinding needs a
   name), else the bound address — or a name given with ``--allow-host`` (any port), else
   421 (``http.host``);
2. a browser's Origin, when sent, must be ``http://`` one of those names with the port, or an
   ``--allow-origin``, else 403 (``http.origin``);
3. every ``/.well-known/`` path in any case and at any depth (the OAuth discovery paths
   ``/.well-known/oauth-protected-resource``, ``/.well-known/oauth-authorization-server``,
   ``/.well-known/openid-configuration``, their suffixed and prefixed forms: the server
   serves no well-known resource) and the endpoints a client falls back to without them
   (``/register``, ``/authorize``, ``/token``) are 404 before any token is asked for
   (``http.no_oauth``): the server has no OAuth, and a 401 there makes a host (Claude Code)
   report a rejected dynamic client registration instead of the missing header;
4. with a bearer token configured, ``Authorization: Bearer <token>`` (the scheme in any
   case, the token compared in constant time): none, another scheme or a bare ``Bearer``
   gets 401 with ``WWW-Authenticate: Bearer realm="gitstate"``
   (``http.token_missing``), another gets 401 with ``error="invalid_token"``
   (``http.token_invalid``), each with its own message.

Every response, refusals and errors included, carries SECURITY_HEADERS (a CSP that allows no
script, frame or resource, and ``nosniff``).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import UsageError

LOOPBACK_NAMES = ("localhost",)
SECURITY_HEADERS = (
    ("Content-Security-Policy",
     "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
)
OAUTH_DEFAULTS = ("/register", "/authorize", "/token")
"""The endpoints an OAuth client falls back to when the discovery paths are 404."""
REQUEST_SECONDS = 10.0
"""How long a client may take to send one request, head and body (``--request-timeout``)."""


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True


def _is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def read_token(env: str | None, file: Path | None, default_env: str) -> str | None:
    """The bearer token from ``file`` (a regular file, first line) or the variable ``env``
    (``default_env`` when None); None when neither holds one."""
    from .safefile import read_regular

    if file is not None:
        try:
            text = read_regular(file, 4096).decode("utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read the token file {file}: {exc}",
                             rule="usage.token") from exc
    else:
        text = os.environ.get(env or default_env, "").strip()
    if not text:
        return None
    if len(text) < 16:
        raise UsageError("the bearer token must be at least 16 characters",
                         rule="usage.token")
    return text


def require_token_off_loopback(host: str, token: str | None, where: str) -> None:
    """Binding anything but loopback without a token is refused before anything listens."""
    if not is_loopback(host) and token is None:
        raise UsageError(f"binding {host} (not loopback) needs a bearer token: {where}",
                         rule="usage.token")


@dataclass(frozen=True)
class Refusal:
    status: int
    rule: str
    message: str
    headers: tuple[tuple[str, str], ...] = ()

    def body(self) -> bytes:
        return f"gitstate: {self.message} [{self.rule}]\n".encode()


def _split_host(value: str) -> tuple[str, int | None] | None:
    """``name[:port]`` or ``[v6][:port]`` as (lower-case name, port); None when malformed."""
    if value.startswith("["):
        end = value.find("]")
        name, rest = (value[:end + 1], value[end + 1:]) if end > 0 else ("", "")
    elif ":" in value:
        name, colon, port = value.rpartition(":")
        rest = colon + port
    else:
        name, rest = value, ""
    if not name:
        return None
    if not rest:
        return name.lower(), None
    if not rest[1:].isdigit() or len(rest) > 6:
        return None
    return name.lower(), int(rest[1:])


@dataclass(frozen=True)
class Guard:
    """What one bound endpoint accepts (see the module's docstring)."""

    host: str
    port: int
    token: str | None = None
    allow_hosts: tuple[str, ...] = ()
    allow_origins: tuple[str, ...] = ()
    token_hint: str = "the server's token"

    def _names(self) -> tuple[str, ...]:
        if is_loopback(self.host):
            return ("127.0.0.1", "localhost", "[::1]")
        bound = self.host if not (":" in self.host and not self.host.startswith("[")) \
            else f"[{self.host}]"
        return (bound.lower(),)

    def _named(self, name: str) -> bool:
        return name in self._names() or (_is_wildcard(self.host) and _is_ip(name))

    def host_ok(self, value: str | None) -> bool:
        parsed = _split_host(value or "")
        if parsed is None:
            return False
        name, port = parsed
        if name in (n.lower() for n in self.allow_hosts):
            return True
        return (port or 80) == self.port and self._named(name)

    def origin_ok(self, value: str | None) -> bool:
        if value is None:
            return True  # not a browser, or a same-origin request
        if value in self.allow_origins:
            return True
        parsed = _split_host(value[len("http://"):]) if value.startswith("http://") else None
        if parsed is None or (parsed[1] or 80) != self.port:
            return False
        return self._named(parsed[0]) or parsed[0] in (n.lower() for n in self.allow_hosts)

    def check(self, path: str, headers: dict[str, str]) -> Refusal | None:
        """The refusal for a request to ``path`` with ``headers`` (names lower-case), or
        None to serve it."""
        host = headers.get("host")
        if not self.host_ok(host):
            return Refusal(421, "http.host", f"the Host header {host!r} does not name this "
                           f"server (a DNS rebinding?): use http://{self._names()[0]}:"
                           f"{self.port}/, or start the server with --allow-host NAME")
        origin = headers.get("origin")
        if not self.origin_ok(origin):
            return Refusal(403, "http.origin", f"the Origin {origin!r} is not allowed to "
                           "call this server: start it with --allow-origin ORIGIN to allow "
                           "a page there")
        lowered = path.lower()
        if path in OAUTH_DEFAULTS or "/.well-known/" in lowered + "/":
            return Refusal(404, "http.no_oauth", "this server has no OAuth: configure the "
                           "client to send the server's bearer token as a header "
                           "(Authorization: Bearer <token>)")
        if self.token is None:
            return None
        # The scheme is case-insensitive (RFC 7235); another scheme (Basic) or a bare
        # "Bearer" carries no bearer token at all: that is a missing token, not a wrong one.
        scheme, _, credentials = (headers.get("authorization") or "").strip().partition(" ")
        if scheme.lower() != "bearer" or not credentials.strip():
            return Refusal(401, "http.token_missing", "a bearer token is required: send "
                           f"Authorization: Bearer <token>, the token being {self.token_hint}",
                           (("WWW-Authenticate", 'Bearer realm="gitstate"'),))
        if not hmac.compare_digest(credentials.strip().encode(), self.token.encode()):
            return Refusal(401, "http.token_invalid", "the bearer token sent is not this "
                           f"server's: send {self.token_hint}",
                           (("WWW-Authenticate", 'Bearer realm="gitstate", '
                             'error="invalid_token", error_description="the bearer token '
                             'is not this server\'s"'),))
        return None
