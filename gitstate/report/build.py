"""`gitstate report --html DIR` and `gitstate serve`: the auditor's pages, on disk or live.

The report is a static site (gitstate/report/html.py; no script, no network, works from
file://): ``index.html`` (the overview), ``keys/<key>.html`` (each key's timeline),
``commits/<id>.html`` for the newest commits (data.COMMIT_PAGES) and ``at/<time>.html``,
the state at chosen instants (data.instants), listed by ``at/index.html``. With a fleet root,
``index.html`` lists every agent under it and each agent's site goes to ``agents/<agent>/``.

The site is built whole in a fresh directory beside DIR and renamed into place
(publish.publish_tree): nothing is written inside a directory gitstate did not just make,
so no link planted there is followed, and a browser never reads a half site. DIR must be
absent, empty, or (with ``force``) a site written before holding exactly what it listed;
a site written before without ``force`` is refused (``report.out_exists``), anything else
always (``report.out_not_dir``, ``report.out_not_ours``).

``serve`` builds the same pages per request from the live repository, read-only (GET and
HEAD only, no path outside those kinds; ``at/<time>.html`` for any time, not only the
listed instants), on 127.0.0.1 unless told otherwise, behind the
checks of ``mcp --http`` (httpguard: Host, Origin, a bearer token, required off loopback).
"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import UsageError, disk_full
from ..system import publish
from . import data as reportdata
from . import html as htmlreport

if TYPE_CHECKING:
    from ..api.repo import StateRepo

Progress = Callable[[str], None]


def _publish(out: Path, pages: dict[str, str], progress: Progress | None,
             force: bool) -> int:
    """Write the site (every page at once, see the module's docstring); the page count."""
    def tick(i: int) -> None:
        if progress and (i % 100 == 0 or i == len(pages)):
            progress(f"{i}/{len(pages)} pages")

    try:
        publish.publish_tree(out, {rel: text.encode("utf-8") for rel, text in pages.items()},
                              tick, replace=force)
    except publish.OutputRefused as exc:
        hint = "; pass --force to replace it" if exc.rule == "report.out_exists" else ""
        raise UsageError(f"{exc}{hint}", rule=exc.rule) from exc
    except OSError as exc:
        if exc.errno == errno.ENOSPC:  # the half-written site is gone with its directory
            raise disk_full(f"the site {out} could not be written; nothing was "
                            "replaced") from exc
        raise
    return len(pages)


def site(repo: StateRepo, name: str, commits: frozenset[str] = frozenset(),
         instants: frozenset[str] = frozenset()) -> htmlreport.Site:
    """The pages' shared context: the agent's zone (config.resolve_tz) and the time now."""
    from ..system.config import resolve_tz

    return htmlreport.Site(name, resolve_tz(repo.config.timezone), repo.now(), commits,
                           instants)


def build(repo: StateRepo, name: str) -> dict[str, str]:
    """Every page of one agent: relative path -> HTML."""
    lines = reportdata.timelines(repo)
    commits = reportdata.commit_pages(repo)
    instants = reportdata.instants(repo, lines)
    ctx = site(repo, name, frozenset(d["commit"] for d in commits),
               frozenset(i["stamp"] for i in instants))
    states = [reportdata.state_at(repo, instant) for instant in instants]
    pages = {"index.html": htmlreport.overview_page(ctx, reportdata.overview(repo, name),
                                                    sorted(lines)),
             "at/index.html": htmlreport.at_index_page(ctx, states)}
    for key, tl in lines.items():
        pages[f"keys/{htmlreport.slug(key)}.html"] = htmlreport.key_page(ctx, key, tl)
    for data in commits:
        pages[f"commits/{data['commit']}.html"] = htmlreport.commit_page(ctx, data)
    for state in states:
        pages[f"at/{state['stamp']}.html"] = htmlreport.at_page(ctx, state)
    return pages


def write_report(repo: StateRepo, out: Path, name: str,
                 progress: Progress | None = None, force: bool = False) -> int:
    """Write one agent's site as ``out``; returns the number of pages. A site written
    there before is replaced only with ``force`` (else ``report.out_exists``)."""
    return _publish(out, build(repo, name), progress, force)


def write_fleet(root: Path, out: Path, progress: Progress | None = None,
                force: bool = False) -> int:
    """A site per agent under ``root`` and an index over them; returns the page count."""
    from ..api.repo import StateRepo
    from ..audit.fleet import fleet
    from ..system.config import resolve_tz

    rows = fleet(root)
    pages: dict[str, str] = {}
    zones = {}
    for n, row in enumerate(rows, 1):
        if "error" in row:
            continue
        with StateRepo(root / row["agent"]) as repo:
            zones[row["agent"]] = resolve_tz(repo.config.timezone)
            prefix = f"agents/{htmlreport.slug(row['agent'])}/"
            pages.update({prefix + rel: text
                          for rel, text in build(repo, row["agent"]).items()})
        if progress:
            progress(f"{n}/{len(rows)} agents")
    pages["index.html"] = htmlreport.fleet_page(rows, zones)
    return _publish(out, pages, progress, force)


def page_for(repo: StateRepo, name: str, path: str) -> str | None:
    """One page, built now (``serve``); None for any path that is not one of ours."""
    parts = path.strip("/").split("/")
    if parts in ([""], ["index.html"], ["at", ""], ["at", "index.html"]):
        lines = reportdata.timelines(repo)
        ctx = _linked(repo, name, lines)
        if parts[0] == "at":
            return htmlreport.at_index_page(ctx, [reportdata.state_at(repo, i) for i in
                                                  reportdata.instants(repo, lines)])
        return htmlreport.overview_page(ctx, reportdata.overview(repo, name), sorted(lines))
    if len(parts) != 2 or not parts[1].endswith(".html"):
        return None
    if parts[0] == "keys":
        lines = reportdata.timelines(repo)
        for key, tl in lines.items():
            if htmlreport.slug(key) + ".html" == parts[1]:
                return htmlreport.key_page(_linked(repo, name, lines), key, tl)
        return None
    if parts[0] == "commits":
        commit = parts[1][:-5]
        if len(commit) != 40 or any(c not in "0123456789abcdef" for c in commit):
            return None
        for data in reportdata.commit_pages(repo):
            if data["commit"] == commit:
                return htmlreport.commit_page(_linked(repo, name, None), data)
        return None
    if parts[0] == "at":  # live, any instant: at/<YYYYmmddTHHMMSSZ>.html
        moment = reportdata.parse_stamp(parts[1][:-5])
        if moment is None:
            return None
        lines = reportdata.timelines(repo)
        known = {i["stamp"]: i for i in reportdata.instants(repo, lines)}
        instant = known.get(parts[1][:-5]) or {
            "time": moment, "why": "the time asked for", "stamp": parts[1][:-5]}
        return htmlreport.at_page(_linked(repo, name, lines),
                                  reportdata.state_at(repo, instant))
    return None


def _linked(repo: StateRepo, name: str,
            lines: dict[str, dict[str, Any]] | None) -> htmlreport.Site:
    """The context of a page served alone: which commits and instants have a page."""
    from ..audit.views import log

    lines = reportdata.timelines(repo) if lines is None else lines
    commits = frozenset(str(r["commit"]) for r in log(repo, limit=reportdata.COMMIT_PAGES))
    return site(repo, name, commits,
                frozenset(i["stamp"] for i in reportdata.instants(repo, lines)))


def serve(agent_dir: Path, host: str, port: int, token: str | None,
          ready: Callable[[str], None] | None = None, allow_hosts: tuple[str, ...] = (),
          allow_origins: tuple[str, ...] = (), token_env: str = "GITSTATE_REPORT_TOKEN",
          request_timeout: float | None = None) -> None:
    """Serve the pages live until interrupted, behind httpguard's checks (the same as
    ``mcp --http``): Host, Origin, the bearer token; its headers on every response. A
    request's head must arrive within ``request_timeout`` seconds of the connection's opening
    (httpguard.REQUEST_SECONDS by default), else the connection is closed unanswered."""
    import contextlib
    import socket
    import sys
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from ..api.repo import StateRepo
    from ..system.httpguard import REQUEST_SECONDS, SECURITY_HEADERS, Guard

    name = agent_dir.resolve().name
    seconds = request_timeout or REQUEST_SECONDS

    class Handler(BaseHTTPRequestHandler):
        timeout = seconds  # each read; the deadline below bounds them all
        default_request_version = "HTTP/1.0"  # a malformed request's answer has headers too
        expired = False

        def setup(self) -> None:
            super().setup()
            self.deadline = threading.Timer(seconds, self._expire)
            self.deadline.daemon = True
            self.deadline.start()

        def _expire(self) -> None:
            self.expired = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)

        def parse_request(self) -> bool:
            ok = super().parse_request()  # the head has arrived (serve reads no body)
            self.deadline.cancel()
            if self.expired:
                self.close_connection = True
                return False
            return ok

        def finish(self) -> None:
            self.deadline.cancel()
            super().finish()

        def send_error(self, code: int, message: str | None = None,
                       explain: str | None = None) -> None:
            if not self.expired:  # nothing is answered on a connection cut by the deadline
                super().send_error(code, message, explain)

        def end_headers(self) -> None:  # every response, send_error's included
            for header, value in SECURITY_HEADERS:
                self.send_header(header, value)
            super().end_headers()

        def _plain(self, status: int, text: bytes, headers: tuple[tuple[str, str], ...],
                   body: bool) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(text)))
            for header, value in headers:
                self.send_header(header, value)
            self.end_headers()
            if body:
                self.wfile.write(text)

        def _refused(self, body: bool) -> bool:
            refusal = guard.check(self.path.split("?", 1)[0],
                                  {k.lower(): v for k, v in self.headers.items()})
            if refusal is not None:
                self._plain(refusal.status, refusal.body(), refusal.headers, body)
            return refusal is not None

        def _answer(self, body: bool) -> None:
            if self._refused(body):
                return
            try:
                with StateRepo(agent_dir) as repo:
                    text = page_for(repo, name, self.path.split("?", 1)[0])
            except Exception:  # one bad request must not stop the server
                self.send_error(500, "the page could not be built")
                return
            if text is None:
                self.send_error(404)
                return
            data = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def do_GET(self) -> None:
            self._answer(True)

        def do_HEAD(self) -> None:
            self._answer(False)

        def _read_only(self) -> None:
            if not self._refused(True):
                self._plain(405, b"gitstate: the pages are read-only: GET and HEAD only "
                            b"[http.method]\n", (("Allow", "GET, HEAD"),), True)

        do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _read_only

        def log_message(self, format: str, *args: Any) -> None:
            return

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 1024  # a burst of connections waits in the kernel, not in SYN retries

        def handle_error(self, request: Any, client_address: Any) -> None:
            if isinstance(sys.exc_info()[1], OSError):
                return  # the client went away, or the deadline cut it: no traceback
            super().handle_error(request, client_address)

    server = Server((host, port), Handler)
    guard = Guard(host, int(server.server_address[1]), token, allow_hosts, allow_origins,
                  token_hint=f"the one the server was started with (${token_env} or its "
                  "--token-file)")
    if ready:
        ready(f"http://{host}:{server.server_address[1]}/")
    try:
        server.serve_forever()
    finally:
        server.server_close()
