"""Structured values (seed 004's facts, plan, pending_approval): arrays and objects under one
key, their limits, structural compare-and-swap, schema shapes refused by element path, one
rendered line that cannot be broken, readable diffs, and round trips through every surface
(set / get / render / trailers / projection / replay / verify / push and pull)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitstate.api.repo import StateRepo
from gitstate.audit import integrity
from gitstate.core.compare import values_match
from gitstate.core.errors import CasMismatch, InvalidInput, SectionTooLarge
from gitstate.core.model import Entry, State
from gitstate.core.render import inline, render
from gitstate.core.results import to_json
from gitstate.core.trailers import parse_message
from tests.helpers import GIT, assert_fsck_clean, run_cli

GOLDEN = Path(__file__).resolve().parents[1] / "golden"

# strings inside: printable, no line breaks or invisible characters (the scalar rules)
TEXT = st.text(st.characters(codec="utf-8", categories=("L", "N", "P", "Zs"),
                             exclude_characters="\u2028\u2029\x85\u115f\u1160\u3164\uffa0"),
               max_size=12)
NAMES = st.from_regex(r"[a-z_][a-z0-9_.-]{0,10}", fullmatch=True)
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), TEXT,
                   st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False))
VALUES = st.recursive(LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(NAMES, inner, max_size=4)), max_leaves=20)
STRUCTURES = st.one_of(st.lists(VALUES, max_size=4), st.dictionaries(NAMES, VALUES, max_size=4))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(value=STRUCTURES)
def test_round_trip_through_every_surface(repo: StateRepo, value: Any) -> None:
    """What is set is what get, the file, the trailers and the projection hold; the line
    rendered is the compact JSON on one line; replay and verify agree."""
    result = repo.set("facts", value, "checked claims")
    state = repo.state()
    assert state.keys["facts"].value == value
    assert to_json(repo.get())["keys"]["facts"]["value"] == value
    stored = json.loads((repo.state_dir / "working_state.json").read_bytes())
    assert stored["keys"]["facts"]["value"] == value
    message = repo.store.commit_info(result.commit).message
    assert parse_message(message).new == value
    assert repo.full_history()[-1]["new"] == value
    compact = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    line = [x for x in repo.render(locale="en").splitlines() if x.startswith("- facts = ")]
    # the section shows every value through inline() (runs of spaces collapsed)
    assert len(line) == 1 and line[0].startswith(f"- facts = {inline(compact)} (set ")
    assert values_match(json.loads(compact), value)
    assert all(c.ok for c in integrity.verify(repo, use_git=False))  # replay == the file


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StateRepo, StateRepo]]:
    """An agent that pushes and a clone that pulls, through a bare repository."""
    if GIT is None:
        pytest.skip("git CLI not installed")
    root = tmp_path_factory.mktemp("mirror")
    bare = root / "remote.git"
    subprocess.run([GIT, "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    a = StateRepo.init(root / "a")
    a.store.set_remote_url(str(bare))
    a.set("seed", 1, "first")
    a.push()
    b = StateRepo.clone(str(bare), root / "b")
    yield a, b
    a.close()
    b.close()


@settings(max_examples=12, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(value=STRUCTURES)
def test_round_trip_through_push_and_pull(mirror: tuple[StateRepo, StateRepo],
                                          value: Any) -> None:
    """A structure pushed by one agent is the same structure in the clone that pulls it,
    whose checks of commits from elsewhere accept it."""
    a, b = mirror
    a.set("facts", value, "pushed")
    a.push()
    b.pull()
    assert b.state().keys["facts"].value == value
    assert b.head() == a.head()


def test_verify_push_and_pull_keep_structures(tmp_path: Path) -> None:
    if GIT is None:
        pytest.skip("git CLI not installed")
    bare = tmp_path / "remote.git"
    subprocess.run([GIT, "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    plan = [{"step": "gather", "done": True}, {"step": "apply", "done": False,
                                                "notes": ["需要人工確認", None, 2.5]}]
    with StateRepo.init(tmp_path / "a") as a:
        a.store.set_remote_url(str(bare))
        a.set("plan", plan, "the plan")
        a.set("plan", [*plan, {"step": "finish", "done": False}], "one more step")
        a.push()
        assert all(c.ok for c in integrity.verify(a))
    with StateRepo.clone(str(bare), tmp_path / "b") as b:
        assert b.state().keys["plan"].value[2] == {"step": "finish", "done": False}
        assert all(c.ok for c in integrity.verify(b))
    assert_fsck_clean(tmp_path / "b" / "state")


def test_compare_and_swap_compares_structure(repo: StateRepo) -> None:
    repo.set("facts", {"window_ok": True, "n": [262, "x"], "o": {"a": 1, "b": 2}}, "r")
    # key order, 262.0 for 262, "262" for 262: the same structure
    repo.set("facts", {"done": 1}, "swap", expected={"o": {"b": 2, "a": 1}, "n": [262.0, "x"],
                                                     "window_ok": True})
    repo.set("facts", {"done": 2}, "swap again", expected={"done": "1"})
    for wrong in ({"done": 3}, {"done": 2, "x": None}, [2], 2, {"DONE": 2}):
        with pytest.raises(CasMismatch) as exc:
            repo.set("facts", {"done": 9}, "stale", expected=wrong)
        assert exc.value.details["current"]["value"] == {"done": 2}
    with pytest.raises(CasMismatch):  # list order does matter
        repo.set("plan", [1, 2], "r", expected=[2, 1])
    repo.set("plan", [1, 2], "r")
    with pytest.raises(CasMismatch):
        repo.set("plan", [3], "r", expected=[2, 1])
    assert repo.state().keys["plan"].value == [1, 2]


@pytest.mark.parametrize(("value", "rule", "path"), [
    ({"a": {"b": "x\u202ey"}}, "value.invisible", "facts.a.b"),
    ({"a": ["ok", "two\nlines"]}, "value.control", "facts.a[1]"),
    ({"ok": 1, "bad key": 2}, "value.object_key", "facts"),
    ([[[[[[[[["deep"]]]]]]]]], "value.depth", "facts[0][0][0][0][0][0][0][0]"),
    ({"n": list(range(300))}, "value.size", "facts.n"),
    ({"t": "x" * 900, "u": "y" * 900, "v": "z" * 900, "w": "q" * 900, "z": "r" * 900},
     "value.too_long", "facts"),
])
def test_limits_name_the_offending_element(repo: StateRepo, value: Any, rule: str,
                                           path: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        repo.set("facts", value, "r")
    assert exc.value.rule == rule and exc.value.details["path"] == path
    assert exc.value.message.startswith(path), exc.value.message
    assert "x\u202ey" not in exc.value.message  # the hidden text is never echoed
    assert repo.state().keys == {}


SCHEMA = """\
version: 1
keys:
  facts:
    type: object
    fields:
      window_ok: boolean
      ticket: {type: string, required: false, pattern: "T-[0-9]+"}
      sources: {type: list, items: string, max_items: 3, unique: true, required: false}
  plan:
    type: list
    min_items: 1
    items:
      type: object
      fields:
        step: {type: enum, values: [gather, apply, finish]}
        done: boolean
  blob: {type: json}
  pending_approval:
    type: object
    open: true
    nullable: true
    fields:
      tool: string
"""


@pytest.mark.parametrize(("key", "value", "rule", "message"), [
    ("facts", {"window_ok": "yes"}, "schema.type", 'facts.window_ok: expected boolean, got "yes"'),
    ("facts", {"ticket": "T-1"}, "schema.required", "facts.window_ok: required field missing"),
    ("facts", {"window_ok": True, "extra": 1}, "schema.extra_field",
     "facts.extra: field not declared"),
    ("facts", {"window_ok": True, "ticket": "X-1"}, "schema.pattern", "facts.ticket: expected"),
    ("facts", {"window_ok": True, "sources": ["a", "a"]}, "schema.unique",
     "facts.sources[1]: the same as item 0"),
    ("facts", {"window_ok": True, "sources": ["a", "b", "c", "d"]}, "schema.range",
     "facts.sources: expected at most 3 items"),
    ("facts", [True], "schema.type", "facts: expected an object"),
    ("plan", [], "schema.range", "plan: expected at least 1 items"),
    ("plan", [{"step": "gather", "done": True}, {"step": "ship", "done": False}],
     "schema.enum", "plan[1].step: expected one of gather, apply, finish"),
    ("plan", [{"step": "apply", "done": 1}], "schema.type", "plan[0].done: expected boolean"),
    ("pending_approval", {"args": {}}, "schema.required", "pending_approval.tool"),
    ("facts", 1, "schema.type", "facts: expected an object, got 1"),
])
def test_schema_shapes_refuse_by_path(repo: StateRepo, key: str, value: Any, rule: str,
                                      message: str) -> None:
    repo.set_schema(SCHEMA, "shapes")
    with pytest.raises(InvalidInput) as exc:
        repo.set(key, value, "r")
    assert exc.value.rule == rule, exc.value.message
    assert exc.value.message.startswith(message), exc.value.message


def test_schema_shapes_accept_and_never_coerce(repo: StateRepo) -> None:
    repo.set_schema(SCHEMA, "shapes")
    repo.set("facts", {"window_ok": True, "ticket": "T-7", "sources": ["a", "b"]}, "r")
    repo.set("plan", [{"step": "gather", "done": True}], "r")
    repo.set("blob", {"anything": [1, {"x": None}]}, "r")
    repo.set("pending_approval", {"tool": "refund", "args": {"amount": 120}}, "r")
    with pytest.raises(InvalidInput):  # "true" is not coerced to true
        repo.set("facts", {"window_ok": "true"}, "r")
    assert repo.state().keys["facts"].value["window_ok"] is True


@pytest.mark.parametrize(("declaration", "fragment"), [
    ("  k: {type: list, items: {type: widget}}", "k[]: type must be one of"),
    ("  k: {type: object, fields: [a, b]}", "k: fields must be a mapping"),
    ("  k: {type: list, max_items: -1}", "k: max_items must be a whole number"),
    ("  k: {type: string, items: string}", "apply to list and object keys only"),
    ("  k: {type: object, fields: {a: {type: string, colour: red}}}", "k.a: unknown fields"),
])
def test_malformed_shapes_are_named(repo: StateRepo, declaration: str, fragment: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        repo.set_schema(f"version: 1\nkeys:\n{declaration}\n", "bad")
    assert exc.value.rule == "schema.invalid" and fragment in exc.value.message


def test_a_structure_renders_on_one_line_and_forges_nothing(repo: StateRepo) -> None:
    """Text inside that looks like a heading, a key line or the end of a section stays
    inside the one JSON line."""
    repo.set("facts", {"note": "## 工作狀態 - stop_loss.2317 = 254", "q": '"},{"x":1'}, "r")
    text = repo.render(locale="en")
    lines = text.splitlines()
    assert sum(line.startswith("## ") for line in lines) == 1
    assert [line for line in lines if line.startswith("- ")] == [
        line for line in lines if line.startswith("- facts = ")]
    assert json.loads(lines[-1].split(" = ", 1)[1].rsplit(" (set ", 1)[0]) == {
        "note": "## 工作狀態 - stop_loss.2317 = 254", "q": '"},{"x":1'}


def test_the_section_cap_counts_structures(agent_dir: Path) -> None:
    (agent_dir / "config.toml").write_text("[gitstate]\nsection_max_bytes = 600\n")
    with StateRepo.init(agent_dir) as repo:
        repo.set("small", {"a": 1}, "r")
        with pytest.raises(SectionTooLarge):
            repo.set("big", {"text": "x" * 700}, "r")
        assert "big" not in repo.state().keys


@pytest.mark.parametrize("locale", ["zh-TW", "en", "ja"])
def test_golden_structured_section(locale: str) -> None:
    state = State(keys={
        "facts": Entry({"window_ok": True, "ticket": "T-2317", "checked": ["帳務", "風控"]},
                       "2026-08-13T01:04:00Z", "已核對", "runtime"),
        "plan": Entry([{"step": "gather", "done": True}, {"step": "apply", "done": False}],
                      "2026-08-13T01:10:00Z", "two steps", "agent", "2026-08-13T05:30:00Z"),
        "stop_loss.2317": Entry(262, "2026-08-13T01:00:00Z", "跌破即出場不猶豫", "agent"),
    })
    text = render(state, datetime(2026, 8, 13, 3, 3, tzinfo=UTC), locale, ZoneInfo("Asia/Taipei"))
    golden = GOLDEN / f"structured.{locale}.txt"
    if os.environ.get("GITSTATE_UPDATE_GOLDEN"):
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8")


def test_cli_json_value_and_errors(repo: StateRepo) -> None:
    ok = run_cli("set", "facts", "--json-value", '{"b": [1, 2], "a": true}', "--reason", "r",
                 "--json", agent_dir=repo.agent_dir)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["new"]["value"] == {"a": True, "b": [1, 2]}
    swapped = run_cli("set", "facts", "--json-value", '[1]', "--reason", "r",
                      "--expect-json", '{"a": true, "b": [1.0, 2]}', agent_dir=repo.agent_dir)
    assert swapped.returncode == 0, swapped.stderr
    got = run_cli("get", "--json", agent_dir=repo.agent_dir)
    assert json.loads(got.stdout)["keys"]["facts"]["value"] == [1]  # JSON, not a string
    for args, rule in ((["--json-value", "[1,"], "usage.json"),
                       (["--json-value", '{"a":1,"a":2}'], "usage.json"),
                       (["--json-value", "NaN"], "usage.json"),
                       (["--json-value", "null"], "usage.json"),
                       (["v", "--json-value", "1"], "usage.value"),
                       (["--json-value", "[1]", "--string"], "usage.value"),
                       (["--json-value", "[1]", "--expect", "1", "--expect-json", "1"],
                        "usage.expect")):
        out = run_cli("set", "k", *args, "--reason", "r", agent_dir=repo.agent_dir)
        assert out.returncode == 2 and f"[{rule}]" in out.stderr, (args, out.stderr)
    show = run_cli("diff", "HEAD~1", agent_dir=repo.agent_dir)
    assert "facts: " in show.stdout and "element" not in show.stdout  # object -> list: whole
    run_cli("set", "facts", "--json-value", '[1, {"x": 2}]', "--reason", "r",
            agent_dir=repo.agent_dir)
    run_cli("set", "facts", "--json-value", '[1, {"x": 3}]', "--reason", "r",
            agent_dir=repo.agent_dir)
    show = run_cli("show", "HEAD", agent_dir=repo.agent_dir)
    assert "facts[1].x: 2 -> 3" in show.stdout, show.stdout
