"""`gitstate report --html DIR` and `gitstate serve`: the auditor's pages."""

from __future__ import annotations

from pathlib import Path

import click

from ..system.httpguard import REQUEST_SECONDS
from .context import Ctx, emit, examples, json_option


@examples(
    "gitstate report --html site",
    "gitstate report --html site --force",
    "gitstate report --html /tmp/fleet-site --fleet /srv/agents",
    exits="Exit: 0 written; 2 a usage error: DIR holds a report written before and no "
          "--force (report.out_exists), DIR is a link or not a directory (report.out_not_dir)"
          " or holds anything else (report.out_not_ours), an uninitialised directory.",
)
@click.command()
@click.option("--html", "out", required=True, type=click.Path(file_okay=False,
              path_type=Path), help="The directory to write the site to: absent or empty; a "
              "site written before is refused unless --force (report.out_exists); anything "
              "else is refused (report.out_not_ours).")
@click.option("--force", is_flag=True, help="Replace a site written before in DIR (whole: a "
              "fresh directory renamed into place).")
@click.option("--fleet", "fleet_root", type=click.Path(file_okay=False, exists=True,
              path_type=Path), help="Every agent directory under this root, with an index.")
@json_option
@click.pass_obj
def report(obj: Ctx, out: Path, fleet_root: Path | None, force: bool, as_json: bool) -> None:
    """Write a static, self-contained site for auditors (no script, no network; open
    DIR/index.html from disk): the overview (every key, expired ones marked; handoff, verify,
    recent commits with old -> new, refused attempts and wake-ups), one timeline per key (the
    value over its events' span; sets, clears, expiries, reverts, refused attempts and
    wake-ups marked, with a legend; every event in a table), a page per recent commit (the
    key-level change and the section before and after), and the state at each recent
    wake-up, expiry and now (what `render --at` prints). Times are in the agent's zone with
    their offset. docs/auditing.md.
    """
    from ..report.build import write_fleet, write_report

    def progress(text: str) -> None:
        click.echo(f"  {text}", err=True)

    if fleet_root is not None:
        pages = write_fleet(fleet_root, out, progress, force)
    else:
        with obj.repo() as repo:
            pages = write_report(repo, out, obj.agent_dir.resolve().name, progress,
                                 force)
    index = (out / "index.html").resolve().as_uri()
    emit({"pages": pages, "index": index}, as_json, f"wrote {pages} pages: {index}")


@examples(
    "gitstate serve",
    "gitstate serve --host 0.0.0.0 --port 8080 --token-env GITSTATE_REPORT_TOKEN",
    exits="Exit: 130 after Ctrl-C; 1 a bad config.toml; 2 a usage error (no token off "
          "loopback: usage.token; an uninitialised directory); 3 the address cannot be bound "
          "(a --port in use: store.io) or the repository cannot be used.",
)
@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Anything but loopback needs a bearer token.")
@click.option("--port", type=click.IntRange(0, 65535), default=8766, show_default=True,
              help="Port to bind (0: any free port).")
@click.option("--token-env", default="GITSTATE_REPORT_TOKEN", show_default=True,
              help="Environment variable holding the bearer token (required off loopback).")
@click.option("--token-file", type=click.Path(dir_okay=False, path_type=Path),
              help="File holding the bearer token (first line); wins over --token-env.")
@click.option("--allow-host", multiple=True, help="Another Host header to accept, e.g. the "
              "name browsers use behind a proxy (repeatable).")
@click.option("--allow-origin", multiple=True, help="A browser Origin to accept "
              "(repeatable).")
@click.option("--request-timeout", type=click.FloatRange(0.1, 3600), default=REQUEST_SECONDS,
              show_default=True, metavar="SECONDS", help="A request's head must arrive "
              "within this of the connection's opening; a stalled one is closed.")
@click.pass_obj
def serve(obj: Ctx, host: str, port: int, token_env: str, token_file: Path | None,
          allow_host: tuple[str, ...], allow_origin: tuple[str, ...],
          request_timeout: float) -> None:
    """Serve the report's pages live and read-only (GET and HEAD), built per request from
    the repository as it is now.

    The same guards as `gitstate mcp --http`: the Host header must name the bound address
    (421 otherwise: a DNS-rebinding page is refused), a browser's Origin must be it or an
    --allow-origin (403), and off loopback a bearer token is required (401). docs/security.md.
    """
    from ..report.build import serve as serve_pages
    from ..system.httpguard import read_token, require_token_off_loopback

    token = read_token(token_env, token_file, "GITSTATE_REPORT_TOKEN")
    require_token_off_loopback(host, token, f"set ${token_env} or pass --token-file")
    obj.repo().close()  # fail fast, with the usual message, if not initialised
    serve_pages(obj.agent_dir, host, port, token,
                ready=lambda url: click.echo(f"serving {url} (Ctrl-C stops)", err=True),
                allow_hosts=allow_host, allow_origins=allow_origin, token_env=token_env,
                request_timeout=request_timeout)
