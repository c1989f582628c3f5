"""docs/mcp.md's table of hosts and clients is the one tests/hosttable.py generates, and
every test a cell names exists: the suite runs those tests, so a green run proves each
"yes" in the table."""

from __future__ import annotations

import ast
from pathlib import Path

from tests import hosttable

TESTS = Path(__file__).resolve().parents[1]


def test_every_named_test_exists() -> None:
    missing = []
    for named in hosttable.named_tests():
        file, name = named.split("::")
        tree = ast.parse((TESTS / file).read_text())
        functions = {n.name for n in ast.walk(tree)
                     if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
        if name not in functions:
            missing.append(named)
    assert not missing, missing


def test_the_doc_holds_the_generated_table() -> None:
    text = hosttable.DOC.read_text()
    assert hosttable.table_in_doc(text) == hosttable.render(), (
        "docs/mcp.md's host table is stale: run `python -m tests.hosttable`")


def test_a_failed_or_skipped_test_shows_in_its_cell() -> None:
    """The rendering from outcomes: a failure and a skip are never shown as a yes."""
    outcomes = {t: ("passed", "") for t in hosttable.named_tests()}
    turn = hosttable.GEMINI_TURN[0]
    outcomes[turn] = ("failed", "boom")
    outcomes[hosttable.TS[0]] = ("skipped", "node is not installed")
    table = hosttable.render(outcomes)
    gemini = next(line for line in table.splitlines() if line.startswith("| Gemini CLI"))
    assert gemini.count(f"FAILED: `{turn}`") == 4
    ts = next(line for line in table.splitlines() if line.startswith("| TypeScript SDK"))
    assert "skipped: node is not installed" in ts and "| yes |" not in ts
