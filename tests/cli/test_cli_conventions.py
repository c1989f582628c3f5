"""The command line's output conventions (docs/cli.md): --json on every command that prints
data, one JSON document per call (JSON Lines only with --jsonl), long listings bounded with a
note saying how to see the rest, lookups that miss suggesting the nearest name, `run promote
--as`, and docs/cli.md's command reference equal to the help text.

Run this file as a script to rewrite docs/cli.md's reference from the help."""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest

from gitstate.api.repo import StateRepo
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
CLI_DOC = ROOT / "docs" / "cli.md"
BEGIN, END = "<!-- reference: generated from --help -->", "<!-- end of reference -->"

NO_JSON = {  # commands that print no data of their own, and why
    "demo": "a guided walkthrough for a person; its agent directory is there to query",
    "hook": "speaks its runtime's hook protocol (JSON for Claude Code, the section for plain)",
    "install": "edits a host's config files and runs the host's own listing",
    "mcp": "a server (JSON-RPC on stdio or HTTP)",
    "serve": "a server (the report's pages over HTTP)",
    "render": "prints the section's exact bytes, what a wake-up receives (`get --json` has "
              "the state)",
}


def _leaves() -> list[tuple[str, click.Command]]:
    from gitstate.cli import cli

    out = []

    def walk(group: click.Group, ctx: click.Context, path: list[str]) -> None:
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None
            sub = click.Context(command, info_name=name, parent=ctx)
            if isinstance(command, click.Group):
                walk(command, sub, [*path, name])
            else:
                out.append((" ".join([*path, name]), command))

    walk(cli, click.Context(cli, info_name="gitstate"), [])
    return out


def reference() -> str:
    """docs/cli.md's command reference: each command's summary, arguments and options, as
    its help has them."""
    lines = [BEGIN, ""]
    for name, command in _leaves():
        summary = " ".join((command.help or "").split("\n\n")[0].split())
        args = [p.human_readable_name for p in command.params if isinstance(p, click.Argument)]
        opts = [" / ".join(sorted(p.opts, key=len, reverse=True))
                for p in command.params if isinstance(p, click.Option)]
        lines.append(f"### gitstate {name}")
        lines.append("")
        lines.append(summary)
        lines.append("")
        usage = " ".join(["gitstate", name, *args])
        lines.append(f"`{usage}`" + ("; " + ", ".join(f"`{o}`" for o in opts) if opts else ""))
        lines.append("")
    lines.append(END)
    return "\n".join(lines)


def test_the_docs_command_pages_match_the_help() -> None:
    text = CLI_DOC.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:end] == reference(), \
        "docs/cli.md's reference differs from --help: run `python -m tests.cli.test_cli_conventions`"


def test_every_command_that_prints_data_has_json() -> None:
    missing = []
    for name, command in _leaves():
        opts = {o for p in command.params for o in getattr(p, "opts", [])}
        if "--json" not in opts and name not in NO_JSON:
            missing.append(name)
    assert missing == []
    assert set(NO_JSON) <= {name for name, _ in _leaves()}


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("conventions") / "agent"
    with StateRepo.init(path) as repo:
        for n in range(55):
            repo.set("k", n, f"step {n}")
        repo.runs.start("refund-O-104", description="refund", criteria=["refund issued"],
                        reason="asked")
    return path


def test_json_is_one_document_and_jsonl_a_stream(agent: Path) -> None:
    for argv, name in ((["log"], "changes"), (["log", "--refused"], "refused"),
                       (["receipts"], "receipts"), (["run", "list"], "runs")):
        out = run_cli(*argv, "--json", agent_dir=agent)
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)  # one document, not one per line
        assert set(data) == {name, "more"} and isinstance(data[name], list), argv
    stream = run_cli("log", "-n", "3", "--jsonl", agent_dir=agent)
    rows = [json.loads(line) for line in stream.stdout.splitlines()]
    assert [r["new"] for r in rows] == [54, 53, 52]
    fleet = json.loads(run_cli("fleet", str(agent.parent), "--json").stdout)
    assert [a["agent"] for a in fleet["agents"]] == ["agent"]
    for argv in (["remote", "show"], ["history"], ["schema", "show"]):
        assert "--json" in run_cli(*argv, "--help", agent_dir=agent).stdout


def test_long_listings_have_a_default_limit_and_say_how_to_see_more(agent: Path) -> None:
    out = run_cli("log", agent_dir=agent)
    assert len(out.stdout.splitlines()) == 50
    assert "… 6 more changes; --all to see them" in out.stderr  # 55 sets and the init
    assert len(run_cli("log", "--all", agent_dir=agent).stdout.splitlines()) == 56
    data = json.loads(run_cli("log", "--limit", "5", "--json", agent_dir=agent).stdout)
    assert len(data["changes"]) == 5 and data["more"] == 51
    quiet = run_cli("log", "--all", "--json", agent_dir=agent)
    assert json.loads(quiet.stdout)["more"] == 0 and "more" not in quiet.stderr


def test_a_lookup_that_misses_suggests_the_nearest_name(agent: Path) -> None:
    out = run_cli("run", "show", "refund-O-105", agent_dir=agent)
    assert out.returncode == 1 and "[run.unknown]" in out.stderr
    assert "Did you mean 'refund-O-104'?" in out.stderr
    out = run_cli("log", "--key", "kk", agent_dir=agent)
    assert out.returncode == 1 and "Did you mean 'k'?" in out.stderr
    status = run_cli("status", agent_dir=agent).stdout
    assert "no remote" in status and "ahead" not in status


def test_run_promote_as_the_runtime(tmp_path: Path) -> None:
    """docs/runs.md's schema lets the runtime promote; the CLI can act as it (`--as`)."""
    agent = tmp_path / "agent"
    schema = tmp_path / "schema.yaml"
    schema.write_text('version: 1\nkeys:\n  "refund.*": {type: enum, values: [refunded]}\n'
                      'runs:\n  promotable:\n    "refund.*": [runtime]\n')
    with StateRepo.init(agent) as repo:
        repo.runs.start("r1", description="refund", criteria=["refund issued"], reason="asked")
        repo.runs.event("r1", {"type": "tool_result_recorded", "tool_call_id": "c1",
                               "evidence_ref": "refund:R-9",
                               "observed_at": "2026-08-13T01:00:00Z"}, "paid")
    assert run_cli("schema", "set", str(schema), "-r", "promotions", agent_dir=agent
                   ).returncode == 0
    human = run_cli("run", "promote", "r1", "--key", "refund.O-104", "--value", "refunded",
                    "--evidence", "refund:R-9", "-r", "done", agent_dir=agent)
    assert human.returncode == 1 and "[run.not_promotable]" in human.stderr, human.stderr
    out = run_cli("run", "promote", "r1", "--key", "refund.O-104", "--value", "refunded",
                  "--evidence", "refund:R-9", "-r", "done", "--as", "runtime", "--json",
                  agent_dir=agent)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["new"]["actor"].startswith("runtime")


def test_help_cites_only_docs_that_exist() -> None:
    for name, command in _leaves():
        text = command.get_help(click.Context(command, info_name=name))
        for cited in re.findall(r"docs/[\w.-]+\.md", text):
            assert (ROOT / cited).is_file(), f"gitstate {name} --help cites {cited}"


if __name__ == "__main__":
    doc = CLI_DOC.read_text(encoding="utf-8")
    head, tail = doc[:doc.index(BEGIN)], doc[doc.index(END) + len(END):]
    CLI_DOC.write_text(head + reference() + tail, encoding="utf-8")
