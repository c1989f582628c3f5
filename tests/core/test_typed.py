"""Specification of typed state: schema.yaml, writers, phases, observations, request ids."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.audit import integrity
from gitstate.core.errors import InvalidInput, Refused
from gitstate.core.model import State
from gitstate.core.results import to_json
from gitstate.core.schema import SchemaError
from gitstate.core.schemafile import dump_yaml, load_yaml, parse_schema
from tests.helpers import Clock, commit_count, git, run_cli

ROOT = Path(__file__).resolve().parents[2]
TRADING = (ROOT / "examples" / "schemas" / "trading.yaml").read_text(encoding="utf-8")
REFUND = (ROOT / "examples" / "schemas" / "refund.yaml").read_text(encoding="utf-8")


def _typed(agent_dir: Path, clock: Clock, text: str = TRADING, writer: str = "runtime") -> StateRepo:
    with StateRepo.init(agent_dir, clock=clock) as repo:
        repo.set_schema(text, "adopt the schema")
    return StateRepo(agent_dir, clock=clock, writer=writer)


def test_round_trip_keeps_comments_and_order() -> None:
    """ruamel round trip: load then dump gives the same text, comments included."""
    assert dump_yaml(load_yaml(TRADING)) == TRADING


def test_schema_show_prints_the_committed_file(agent_dir: Path, clock: Clock) -> None:
    """schema set is one commit; schema show prints it byte for byte."""
    _typed(agent_dir, clock).close()
    out = run_cli("schema", "show", agent_dir=agent_dir)
    assert out.stdout == TRADING
    message = git(agent_dir / "state", "log", "-1", "--format=%B").stdout
    assert message.startswith("adopt the schema\n\nGitstate-Op: schema")
    assert "Gitstate-Schema-Version: 1" in message


def test_types_are_enforced_never_coerced(agent_dir: Path, clock: Clock) -> None:
    """Wrong types and bounds are refused with the rule; "4" is not silently 4."""
    with _typed(agent_dir, clock, writer="agent") as repo:
        before = commit_count(repo.state_dir)
        bad = [("stop_loss.2317", "262", "schema.type"), ("stop_loss.2317", -1, "schema.range"),
               ("stop_loss.2317", 0, "schema.range"), ("stop_loss.2317", True, "schema.type"),
               ("position_cap", 96, "schema.type"), ("position_cap", "120%", "schema.range"),
               ("position_cap", "lots", "schema.type"), ("unknown_key", 1, "schema.unknown_key")]
        for key, value, rule in bad:
            with pytest.raises(InvalidInput) as err:
                repo.set(key, value, "r")
            assert err.value.rule == rule, (key, value)
        assert commit_count(repo.state_dir) == before
        result = repo.set("stop_loss.2317", 262, "break = exit")
        assert result.new is not None and result.new.expires_at == "2026-08-13T07:34:00Z"  # 6.5 h
        assert repo.set("position_cap", "96%", "buffer").new is not None


def test_coercion_only_when_declared(agent_dir: Path, clock: Clock) -> None:
    """With coerce: true an integer key accepts "4" and stores 4."""
    text = "version: 1\nkeys:\n  count:\n    type: integer\n    coerce: true\n"
    with _typed(agent_dir, clock, text) as repo:
        assert repo.set("count", "4", "r").new.value == 4  # type: ignore[union-attr]
        with pytest.raises(InvalidInput):
            repo.set("count", "four", "r")


def test_unknown_keys_policy_allow(agent_dir: Path, clock: Clock) -> None:
    """unknown_keys: allow lets undeclared keys through, still checking declared ones."""
    text = "version: 1\nunknown_keys: allow\nkeys:\n  n:\n    type: number\n"
    with _typed(agent_dir, clock, text) as repo:
        repo.set("anything", "goes", "r")
        with pytest.raises(InvalidInput):
            repo.set("n", "x", "r")


def test_writers_are_enforced(agent_dir: Path, clock: Clock) -> None:
    """The agent cannot set the runtime-owned phase; the runtime can; humans neither."""
    _typed(agent_dir, clock).close()
    with StateRepo(agent_dir, writer="agent") as agent, pytest.raises(InvalidInput) as err:
        agent.set("phase", "apply", "I decide")
    assert err.value.rule == "schema.writer"
    out = run_cli("set", "phase", "apply", "-r", "human", agent_dir=agent_dir)
    assert out.returncode == 1 and "schema.writer" in out.stderr
    with StateRepo(agent_dir, writer="runtime") as runtime:
        runtime.set("phase", "apply", "observed")
        with pytest.raises(InvalidInput) as err:
            runtime.clear("phase", "r")
        assert err.value.rule == "schema.not_nullable"


def test_schema_set_refused_when_live_state_breaks_it(agent_dir: Path, clock: Clock) -> None:
    """A schema the live state violates is refused, listing the violations; versions rise."""
    with StateRepo.init(agent_dir, clock=clock) as repo:
        repo.set("stop_loss.2317", "262", "typed as text before any schema")
        with pytest.raises(Refused) as err:
            repo.set_schema(TRADING, "too strict for what is live")
        assert err.value.rule == "schema.violations"
        assert "stop_loss.2317" in err.value.details["violations"][0]
        repo.clear("stop_loss.2317", "make room for the schema")
        repo.set_schema(TRADING, "now it fits")
        with pytest.raises(InvalidInput) as err2:
            repo.set_schema(TRADING, "same version again")
        assert err2.value.rule == "schema.version"
        assert all(c.ok for c in integrity.verify(repo))


def test_old_schema_policy_expired_entries_stay_readable(agent_dir: Path, clock: Clock) -> None:
    """Entries written under an older schema: validated on write, kept on read, listed."""
    text_v1 = "version: 1\nkeys:\n  limit:\n    type: string\n"
    with _typed(agent_dir, clock, text_v1) as repo:
        repo.set("limit", "high", "v1 allowed text", ttl_hours=1)
        clock.advance(hours=2)
        v2 = "version: 2\nkeys:\n  limit:\n    type: number\n"
        repo.set_schema(v2, "limits are numbers now")
        view = to_json(repo.get())
        assert view["keys"]["limit"]["value"] == "high" and view["keys"]["limit"]["expired"]
        assert view["schema_version"] == 2
    out = run_cli("schema", "check", "--json", agent_dir=agent_dir)
    report = json.loads(out.stdout)
    assert out.returncode == 0 and report["live"] == [] and "limit" in report["expired"][0]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a: &x [1]\nb: *x\n", "anchors"),
        ("version: 1\nkeys:\n  k:\n    type: blob\n", "type must be"),
        ("version: 0\n", "positive integer"),
        ("version: 1\nkeys:\n  ../x:\n    type: string\n", "declared key"),
        ("version: 1\nphase_key: p\nkeys:\n  p:\n    type: string\n", "enum"),
        ("version: 1\nkeys:\n  k:\n    type: string\n    pattern: '('\n", "bad pattern"),
        ("version: 1\nkeys:\n  k:\n    type: string\n    colour: red\n", "unknown fields"),
        ("version: 1\nkeys: [" + "[" * 20 + "]" * 20 + "]\n", "mapping"),
        ("x: " + "y" * 70000 + "\n", "over"),
        ("version: 1\nkeys:\n  k: {type: string\n", "not valid YAML"),
    ],
)
def test_bad_schemas_are_refused(text: str, fragment: str) -> None:
    """Malformed schemas, YAML bombs and oversized files are refused with a clear message."""
    with pytest.raises(SchemaError) as err:
        parse_schema(text)
    assert fragment in err.value.message


def test_billion_laughs_is_refused_before_expansion() -> None:
    """Nested aliases are refused at parse time, without building the document."""
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
        for i in range(20))
    with pytest.raises(SchemaError):
        parse_schema(bomb)


def test_phases_tools_and_the_rendered_line(agent_dir: Path, clock: Clock) -> None:
    """can_run / allowed_tools answer from HEAD; get and the section show them."""
    with _typed(agent_dir, clock, REFUND) as repo:
        assert repo.allowed_tools() == ["search", "get_ticket"]
        assert not repo.can_run("refund") and repo.can_run("get_ticket")
        repo.set("phase", "apply", "runtime moved on")
        assert repo.can_run("search") and to_json(repo.get())["allowed_tools"] == ["search", "refund"]
        # the phase allows refund now, but refund.yaml also makes it wait for an approval
        assert not repo.can_run("refund", {"ticket": "T1", "amount": 1})
        text = repo.render(locale="en")
        assert "Current phase: apply; allowed tools: search, refund" in text
    fast = run_cli("render", "--locale", "en", agent_dir=agent_dir)
    assert fast.stdout == text
    assert run_cli("tools", "--can-run", "finish", agent_dir=agent_dir).returncode == 1
    assert run_cli("tools", "--can-run", "search", agent_dir=agent_dir).returncode == 0
    needs = run_cli("tools", "--can-run", "refund", agent_dir=agent_dir)
    assert needs.returncode == 1 and "[approval.required]" in needs.stderr
    listed = json.loads(run_cli("tools", "--json", agent_dir=agent_dir).stdout)
    assert listed == {"phase": "apply", "allowed_tools": ["search", "refund"]}


def test_observations_own_the_transitions(agent_dir: Path, clock: Clock) -> None:
    """A registered observation is one commit naming it; unknown kinds are errors."""
    with _typed(agent_dir, clock, REFUND) as repo:
        repo.observations.register("get_ticket", lambda s, p: {"ticket_id": p["id"],
                                                              "phase": "apply"})
        before = commit_count(repo.state_dir)
        repo.observations.apply("get_ticket", {"id": "T1"})
        assert commit_count(repo.state_dir) == before + 1
        assert repo.state().keys["phase"].value == "apply"
        assert repo.state().keys["ticket_id"].value == "T1"
        message = git(repo.state_dir, "log", "-1", "--format=%B").stdout
        assert message.startswith("observation get_ticket:")
        assert "Gitstate-Observation: get_ticket" in message
        with pytest.raises(InvalidInput) as err:
            repo.observations.apply("teleport", {})
        assert err.value.rule == "observation.unknown"
        repo.observations.register("bad", lambda s, p: {"ticket_id": 12})
        with pytest.raises(InvalidInput):
            repo.observations.apply("bad", {})
        assert all(c.ok for c in integrity.verify(repo))


def test_refund_gateway_example(tmp_path: Path) -> None:
    """Seed 004's flow end to end: refund illegal in gather; a ready ticket moves the phase
    (an observation, never the model) and records the checked facts; the refund waits for a
    human's approval of its exact arguments, which survives the gateway's restart; a changed
    amount is refused, naming it; the approved call is spent, then runs once, and a second
    gateway that read the same approval is refused; then only finish is left."""
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import refund_gateway
    finally:
        sys.path.remove(str(ROOT / "examples"))
    log = refund_gateway.run(tmp_path / "agent")
    assert log[0].endswith("call=refund -> illegal_in_phase: refund")
    assert log[1].endswith("call=get_ticket -> ticket T1 ready")
    assert "phase=apply offered=['search', 'refund'] call=refund -> waiting_for_approval: " in log[2]
    approval = log[2].rsplit(" ", 1)[1]
    assert log[3].endswith(f"refused: approval {approval} was for other arguments (argument "
                           "changed: args.amount: 120 approved, 150 asked)")
    assert log[4].endswith(f"call=refund -> refunded 120 (approval {approval}, receipt "
                           "R-T1-120)")
    # a second gateway that read the approval before the spend is refused before paying
    assert log[5].startswith("twin gateway (it read: approved by human) -> refused "
                             f"[approval.not_runnable]: approval {approval} is consumed: spent "
                             "by runtime in commit ")
    assert log[6] == "phase=done offered=['finish'] call=search -> illegal_in_phase: search"
    assert log[7].endswith("call=finish -> finish ok") and len(log) == 8
    with StateRepo(tmp_path / "agent") as repo:
        state = repo.state()
        assert state.keys["ticket_id"].value == "T1"
        assert state.keys["facts"].value == {"window_ok": True, "customer_verified": True,
                                             "max_refund": 200}
        [record] = repo.approvals.list()
        assert record["status"] == "consumed" and record["decided_by"] == "human"
        assert not repo.can_run("refund", {"ticket": "T1", "amount": 120})
        assert all(c.ok for c in integrity.verify(repo))


def test_request_ids_make_retries_idempotent(repo: StateRepo) -> None:
    """Same id and arguments: the first result, no second commit; other arguments: refused."""
    first = repo.set("k", 1, "r", request_id="req-1")
    count = commit_count(repo.state_dir)
    again = repo.set("k", 1, "r", request_id="req-1")
    assert again.commit == first.commit and again.replayed and commit_count(repo.state_dir) == count
    with pytest.raises(Refused) as err:
        repo.set("k", 2, "r", request_id="req-1")
    assert err.value.rule == "request.conflict"
    h1 = repo.handoff("note", request_id="h-1")
    assert repo.handoff("note", request_id="h-1").commit == h1.commit
    c1 = repo.clear("k", "r", request_id="c-1")
    assert repo.clear("k", "r", request_id="c-1").commit == c1.commit
    out = run_cli("set", "j", "1", "-r", "r", "--request-id", "cli-1", "--json",
                  agent_dir=repo.agent_dir)
    out2 = run_cli("set", "j", "1", "-r", "r", "--request-id", "cli-1", "--json",
                   agent_dir=repo.agent_dir)
    assert json.loads(out.stdout)["commit"] == json.loads(out2.stdout)["commit"]
    assert json.loads(out2.stdout)["replayed"] is True


def test_state_model_unaffected_without_schema(repo: StateRepo) -> None:
    """Without schema.yaml, gitstate behaves as untyped (any safe key, any scalar)."""
    repo.set("anything.goes", "text", "r")
    assert repo.schema() is None and repo.allowed_tools() is None and repo.can_run("x")
    assert to_json(repo.get())["phase"] is None and isinstance(repo.state(), State)


def test_reverting_an_observation_and_a_schema_change(agent_dir: Path, clock: Clock) -> None:
    """An observation's multi-key commit reverts as one commit; a schema change says how."""
    with _typed(agent_dir, clock, REFUND) as repo:
        gather = repo.set("phase", "gather", "a run starts in gather").commit
        repo.observations.register("ready", lambda s, p: {"ticket_id": "T9", "phase": "apply"})
        observed = repo.observations.apply("ready", {})
        repo.revert(observed.commit, "the ticket was not ready after all")
        state = repo.state()
        assert "ticket_id" not in state.keys and state.keys["phase"].value == "gather"
        assert repo.allowed_tools() == ["search", "get_ticket"]
        assert all(c.ok for c in integrity.verify(repo))
        schema_commit = next(r["commit"] for r in repo.full_history() if r["op"] == "schema")
        with pytest.raises(InvalidInput) as err:
            repo.revert(schema_commit, "undo the schema")
        assert err.value.rule == "revert.schema"
        with pytest.raises(InvalidInput) as err2:  # the phase may never become absent
            repo.revert(gather, "back before the phase")
        assert err2.value.rule == "schema.not_nullable"
