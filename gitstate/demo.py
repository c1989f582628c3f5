"""``gitstate demo``: replay the day of three stop-loss lines, with gitstate in place.

Runs in a temporary agent directory on a simulated clock (Asia/Taipei), through the same
``StateRepo`` every adapter uses, and prints what each wake-up does and sees.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import click

from .errors import CasMismatch
from .repo import StateRepo

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
    from . import receipts

    text = repo.render(now=clock.now)
    receipts.record(str(repo.state_dir / ".git"), text.encode(), now=clock.now,
                    head=repo.head(), runtime="demo", event="wake-up",
                    locale=repo.config.locale, tz=repo.config.timezone, max_chars=None,
                    run_id=None, run_head=None)
    click.echo(click.style("  | ", fg="green") + text.rstrip("\n").replace(
        "\n", "\n" + click.style("  | ", fg="green")) if text else "  (empty section)")


def run_demo(agent_dir: Path | None = None, keep: bool = False) -> Path:
    """Run the demo; returns the agent directory used."""
    temp = agent_dir is None
    root = Path(tempfile.mkdtemp(prefix="gitstate-demo-")) if agent_dir is None else agent_dir
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.toml").write_text(
        '[memory]\nworking_state_enabled = true\n\n[gitstate]\nlocale = "zh-TW"\n'
        'timezone = "Asia/Taipei"\nidentity_name = "trader-agent"\n'
        'identity_email = "trader-agent@example.invalid"\n', encoding="utf-8")
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
                        f"(set {current['set_at']}: {current['reason']}); nothing written",
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
        from .report import write_report

        site = Path(tempfile.mkdtemp(prefix="gitstate-demo-report-"))
        pages = write_report(repo, site, "trader-agent")
    click.secho(f"\nDone: {head[:12]} is HEAD; every change above is one commit.", bold=True)
    click.echo(f"The auditor's report ({pages} pages, no network needed): "
               f"{(site / 'index.html').as_uri()}")
    if temp and not keep:
        shutil.rmtree(root, ignore_errors=True)
    else:
        click.echo(f"Explore it: cd {root}/state && git log -p")
    return root


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
    for rec in repo.history(50):
        click.echo(f"  {rec['commit'][:7]} {rec['time']} {rec['op']} {rec['key'] or ''}: "
                   f"{rec['reason']}")
