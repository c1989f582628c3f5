"""``gitstate demo``: replay the day of three stop-loss lines, with gitstate in place.

Runs in a temporary agent directory on a simulated clock (Asia/Taipei), through the same
``StateRepo`` every adapter uses, and prints what each wake-up does and sees.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import click

from ..api.repo import StateRepo
from ..core.errors import CasMismatch, UsageError
from ..core.localtime import local_text
from ..system import safefile

TZ = ZoneInfo("Asia/Taipei")


class _Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 8, 12, 8, 42, tzinfo=TZ)

    def at(self, month_day: str, hh_mm: str) -> None:
        month, day = (int(x) for x in month_day.split("-"))
        hour, minute = (int(x) for x in hh_mm.split(":"))
        self.now = datetime(2026, month, day, hour, minute, tzinfo=TZ)

    def __call__(self) -> datetime:
        return self.now


def _step(clock: _Clock, title: str) -> None:
    click.secho(f"\n[{clock.now:%m-%d %H:%M}] {title}", fg="cyan", bold=True)


def _section(repo: StateRepo, clock: _Clock) -> None:
    """A wake-up: the section it receives, and its receipt (as a hook records one)."""
    from ..history import receipts

    text = repo.render(now=clock.now)
    receipts.record(str(repo.state_dir / ".git"), text.encode(), now=clock.now,
                    head=repo.head(), runtime="demo", event="wake-up",
                    locale=repo.config.locale, tz=repo.config.timezone, max_chars=None,
                    run_id=None, run_head=None)
    click.echo(click.style("  | ", fg="green") + text.rstrip("\n").replace(
        "\n", "\n" + click.style("  | ", fg="green")) if text else "  (empty section)")


def run_demo(agent_dir: Path | None = None, keep: bool = True) -> Path:
    """Run the demo in ``agent_dir`` (new or empty), or in a new directory under the
    system's temporary directory; returns the directory used. The report is written
    inside it (``report/``). Without ``keep`` a temporary directory is removed at the end,
    report and all; a given directory is always kept."""
    temp = agent_dir is None
    if agent_dir is not None and agent_dir.exists() and (
            not agent_dir.is_dir() or any(agent_dir.iterdir())):
        raise UsageError(f"{agent_dir} is not a new or empty directory: the demo writes its "
                         "own config.toml and state/ there; give a new directory, or none "
                         "(a temporary one)", rule="usage.demo_dir")
    root = Path(tempfile.mkdtemp(prefix="gitstate-demo-")) if agent_dir is None else agent_dir
    root.mkdir(parents=True, exist_ok=True)
    safefile.write_atomic(root / "config.toml", (
        b'[memory]\nworking_state_enabled = true\n\n[gitstate]\nlocale = "zh-TW"\n'
        b'timezone = "Asia/Taipei"\nidentity_name = "trader-agent"\n'
        b'identity_email = "trader-agent@example.invalid"\n'))
    clock = _Clock()
    click.secho(f"gitstate demo: agent directory {root}", bold=True)
    with StateRepo.init(root, clock=clock, actor="agent") as repo:
        _step(clock, "Review: the agent sets its position cap.")
        repo.set("position_cap", "96%", "留最低手續費緩衝")

        clock.at("08-13", "09:04")
        _step(clock, "Pre-market strategy: stop-loss 262 for 2317, valid until 13:30.")
        repo.set("stop_loss.2317", 262, "跌破即出場不猶豫", ttl_hours=4 + 26 / 60)

        clock.at("08-13", "09:36")
        _step(clock, "Before wrapping up, the wake-up leaves a structured handoff.")
        repo.handoff("盤中每 3 分巡檢中；帳務已核對。", status="continue",
                     next_steps="核對完後回報總額")

        clock.at("08-13", "10:12")
        _step(clock, "A patrol re-derives 254 (-5% per an old strategy document) and, "
                     "believing the line is 250, sends it with expected_value=250.")
        try:
            repo.set("stop_loss.2317", 254, "-5% per the strategy document", expected=250)
        except CasMismatch as exc:
            current = exc.details["current"]
            click.secho(f"  refused [{exc.rule}]: HEAD holds {current['value']} "
                        f"(set {local_text(current['set_at'], TZ)}: {current['reason']}); "
                        "nothing written",
                        fg="red")

        clock.at("08-13", "11:03")
        _step(clock, "The 11:03 patrol wakes up. The tail of its prompt is:")
        _section(repo, clock)
        click.echo("  The price touches 261: below the one authoritative line, 262 -> exit.")

        clock.at("08-13", "14:00")
        _step(clock, "After 13:30 the day-scoped rule has expired; a wake-up now sees:")
        _section(repo, clock)

        clock.at("08-13", "14:20")
        _step(clock, "The review sets tomorrow's line, 258, with its reason.")
        repo.set("stop_loss.2317", 258, "明日沿用：跌破 258 出場", ttl_hours=24)
        clock.at("08-13", "14:25")
        _section(repo, clock)

        _step(clock, "The audit trail, straight from git (`git log`):")
        _print_log(repo)
        head = repo.head()
        from ..report.build import write_report

        site = root / "report"
        pages = write_report(repo, site, "trader-agent")
    click.secho(f"\nDone: {head[:12]} is HEAD; every change above is one commit.", bold=True)
    if temp and not keep:
        shutil.rmtree(root, ignore_errors=True)
        click.echo(f"Removed {root} and its report (--no-keep); run `gitstate demo` to keep "
                   "them.")
        return root
    click.echo(f"The auditor's report ({pages} pages, no network needed): "
               f"{(site / 'index.html').absolute().as_uri()}")
    _what_next(root.absolute(), temp)
    return root


def _what_next(root: Path, temp: bool) -> None:
    q = shlex.quote
    at = q(str(root))
    me = _program()
    click.secho(f"\nKept: {root}", bold=True)
    if temp:
        click.echo(f"  (under the system's temporary directory; `rm -rf {at}` removes it)")
    click.secho("What next:", bold=True)
    lines = [
        (f"export GITSTATE_AGENT_DIR={at}", "or --agent-dir DIR before each command"),
        (f"{me} get", "the state now, with the recent changes"),
        (f"{me} render --at 2026-08-13T11:03+08:00", "exactly what the 11:03 wake-up saw"),
        (f"{me} log --key stop_loss.2317", "the supersession chain of the stop-loss"),
        (f"{me} log --refused", "the write the compare-and-swap refused"),
        (f"{me} verify", "integrity, replay and the other checks"),
        (f"git -C {q(str(root / 'state'))} log -p", "the same audit trail with plain git"),
    ]
    width = max(len(cmd) for cmd, _ in lines)
    for cmd, what in lines:
        click.echo(f"  {cmd.ljust(width)}  # {what}")
    click.echo(f"Your own agent: `{me} --agent-dir ~/agents/NAME init`, then README.md's "
               "tour of the CLI, docs/mcp.md (the tools) and hooks/ (the section in every "
               "wake-up).")


def _program() -> str:
    """How to call gitstate again, as this run was called: `gitstate` when that name on
    PATH is this program, else the path it was called by (`.venv/bin/gitstate`)."""
    called = sys.argv[0] if sys.argv else ""
    if os.path.basename(called) != "gitstate":
        return "gitstate"  # python -m gitstate, or an embedding program
    found = shutil.which("gitstate")
    with contextlib.suppress(OSError):
        if found and os.path.samefile(found, called):
            return "gitstate"
    return shlex.quote(called)


def _print_log(repo: StateRepo) -> None:
    git = shutil.which("git")
    if git:
        out = subprocess.run(
            [git, "-C", str(repo.state_dir), "log", "--date=iso-strict",
             "--format=%h %ad %an%n    %s%n    %(trailers:key=Gitstate-Key,key=Gitstate-Old,"
             "key=Gitstate-New,key=Gitstate-Expires,separator=%x20%x20)"],
            capture_output=True, text=True, check=False, env={"TZ": "Asia/Taipei"},
        )
        if out.returncode == 0:
            for line in out.stdout.rstrip().splitlines():
                click.echo("  " + line)
            return
    for rec in [r.to_dict() for r in repo.history(50)]:
        click.echo(f"  {rec['commit'][:7]} {rec['time']} {rec['op']} {rec['key'] or ''}: "
                   f"{rec['reason']}")
