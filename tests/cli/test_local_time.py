"""Times on the command line are the agent's: a time without an offset given to any option
is read in the agent's zone (config.toml [gitstate] timezone; unset, the machine's), text
output prints times in that zone with their offset, JSON keeps UTC. The demo's agent
(Asia/Taipei) is the case: its 11:03 wake-up saw 262, its 14:20 review set 258."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import click
import pytest

from gitstate.cli import cli
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    agent = tmp_path_factory.mktemp("demo") / "agent"
    out = run_cli("demo", "--agent-dir", str(agent))
    assert out.returncode == 0, out.stderr
    assert "HEAD holds 262 (set 2026-08-13T09:04:00+08:00:" in out.stdout  # its own times too
    return agent


def test_a_time_without_an_offset_is_the_agents_wall_clock(demo: Path) -> None:
    """`render --at 2026-08-13T11:03` is what the 11:03 (+08:00) wake-up saw (262), as
    are the same moment with its offset and in UTC; get --at, render --now (the wake-up's
    own fast path), log --since and run --deadline / --at read the same way."""
    for at in ("2026-08-13T11:03", "2026-08-13T11:03+08:00", "2026-08-13T03:03Z"):
        out = run_cli("render", "--at", at, agent_dir=demo)
        assert out.returncode == 0 and "stop_loss.2317 = 262" in out.stdout, (at, out.stdout)
    got = json.loads(run_cli("get", "--at", "2026-08-13T11:03", "--json", agent_dir=demo).stdout)
    assert got["keys"]["stop_loss.2317"]["value"] == 262
    # 258 is valid until 08-14 14:20 in Taipei: at 14:19 there it is live, at 14:21 not
    assert "= 258" in run_cli("render", "--now", "2026-08-14T14:19", agent_dir=demo).stdout
    assert "= 258" not in run_cli("render", "--now", "2026-08-14T14:21", agent_dir=demo).stdout
    out = run_cli("log", "--since", "2026-08-13T14:00", "--json", agent_dir=demo)
    assert [c["new"] for c in json.loads(out.stdout)["changes"]] == [258]
    out = run_cli("run", "start", "r1", "--goal", "g", "--criterion", "c", "-r", "r",
                  "--deadline", "2026-08-20T09:00", "--json", agent_dir=demo)
    assert json.loads(out.stdout)["goal"] and "2026-08-20T01:00:00Z" in out.stdout
    out = run_cli("run", "show", "r1", "--at", "2026-08-13T11:03", agent_dir=demo)
    assert out.returncode == 1 and "2026-08-13T11:03:00+08:00" in out.stderr


def test_text_output_is_local_with_its_offset_and_json_stays_utc(demo: Path) -> None:
    """log, get, show, blame and fleet print the agent's time with +08:00; --json keeps the
    stored UTC form."""
    log = run_cli("log", "-n", "1", agent_dir=demo).stdout
    assert log.startswith("2026-08-13T14:20:00+08:00") and \
        "(expires 2026-08-14T14:20:00+08:00)" in log
    get = run_cli("get", agent_dir=demo).stdout
    assert "set 2026-08-13T14:20:00+08:00" in get and "(2026-08-13T09:36:00+08:00)" in get
    assert "time   2026-08-13T14:20:00+08:00" in run_cli("show", agent_dir=demo).stdout
    assert "2026-08-13T14:20:00+08:00" in run_cli("blame", agent_dir=demo).stdout
    fleet = run_cli("fleet", str(demo.parent)).stdout
    assert fleet.startswith("agent: ") and "; last 2026-08-13T14:20:00+08:00 " in fleet, fleet
    data = json.loads(run_cli("get", "--json", agent_dir=demo).stdout)
    assert data["keys"]["stop_loss.2317"]["set_at"] == "2026-08-13T06:20:00Z"


def test_a_refusal_quotes_times_in_the_agents_zone(demo: Path) -> None:
    """A refusal's message names the value's set time as every other output does, in the
    agent's zone with its offset (it said 06:20:00Z in a +08:00 agent); --json keeps UTC."""
    out = run_cli("set", "stop_loss.2317", "1", "--reason", "r", "--expect", "5",
                  agent_dir=demo)
    assert out.returncode == 1 and "HEAD holds 258 (set 2026-08-13T14:20:00+08:00" in \
        out.stderr, out.stderr
    out = run_cli("set", "stop_loss.2317", "1", "--reason", "r", "--expect", "5", "--json",
                  agent_dir=demo)
    assert json.loads(out.stdout)["current"]["set_at"] == "2026-08-13T06:20:00Z"


def test_without_a_configured_zone_the_machines_zone_is_the_agents(tmp_path: Path) -> None:
    """No [gitstate] timezone: the machine's zone (TZ here), for reading and printing."""
    run_cli("init", agent_dir=tmp_path)
    run_cli("set", "k", "1", "-r", "r", agent_dir=tmp_path)
    stamp = json.loads(run_cli("log", "-n", "1", "--jsonl", agent_dir=tmp_path).stdout)["time"]
    for tz, offset in (("UTC0", "+00:00"), ("Asia/Tokyo", "+09:00")):
        out = run_cli("log", "-n", "1", agent_dir=tmp_path, env={"TZ": tz}, process=True)
        assert out.stdout.split()[0].endswith(offset), out.stdout
    out = run_cli("get", "--at", "1999-01-01T00:00", agent_dir=tmp_path, env={"TZ": "UTC0"},
                  process=True)
    assert out.returncode == 2 and "no state existed yet at 1999-01-01T00:00:00+00:00" in \
        out.stderr, out.stderr
    assert stamp.endswith("Z")


def test_a_time_that_is_none_names_its_option(demo: Path) -> None:
    """`log --since yesterday` names --since (not --now), exit 2 and rule usage.now; a year
    out of range says which years are taken; --at names usage.at."""
    out = run_cli("log", "--since", "yesterday", agent_dir=demo)
    assert out.returncode == 2 and "[usage.now]: --since 'yesterday'" in out.stderr
    out = run_cli("render", "--now", "0001-01-01T00:00", agent_dir=demo)
    assert out.returncode == 2 and "only years 1970 to 8999" in out.stderr, out.stderr
    out = run_cli("get", "--at", "2026-13-01", agent_dir=demo)
    assert out.returncode == 2 and "[usage.at]" in out.stderr


def _commands(group: click.Group, ctx: click.Context) -> list[tuple[str, click.Command]]:
    out = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        out.append((f"{ctx.info_name} {name}", command))
        if isinstance(command, click.Group):
            out += _commands(command, click.Context(command, info_name=f"{ctx.info_name} "
                                                    f"{name}"))
    return out


def test_every_time_option_says_how_a_time_is_read() -> None:
    """Each option that takes a time (--at, --now, --since, --deadline) says in its help that
    a time without an offset is in the agent's time zone."""
    seen = []
    for path, command in _commands(cli, click.Context(cli, info_name="gitstate")):
        for param in command.params:
            if isinstance(param, click.Option) and \
                    param.name in ("at", "now", "since", "until", "deadline"):
                seen.append(f"{path} {param.opts[0]}")
                assert "agent's time zone" in (param.help or ""), (path, param.opts)
    assert {"gitstate render --at", "gitstate get --now", "gitstate log --since",
            "gitstate receipts --since", "gitstate run start --deadline",
            "gitstate run show --at"} <= set(seen), seen


def test_one_function_reads_every_given_time() -> None:
    """No CLI module and no wake-up path parses a time by itself: a given time goes through
    localtime.parse_given_time (model.parse_time reads the stored, UTC ones)."""
    files = [*sorted((ROOT / "gitstate" / "cli").glob("*.py")),
             ROOT / "gitstate" / "wakeup" / "fastpath.py"]
    for path in files:
        tree = ast.parse(path.read_text())
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | \
            {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} | \
            {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        assert not names & {"fromisoformat", "strptime", "parse_now"}, path
        if path.name in ("fastpath.py", "runs.py"):
            assert "parse_given_time" in names, path
