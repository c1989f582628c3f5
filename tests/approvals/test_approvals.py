"""Frozen-argument approvals (seed 004): request, decide, run exactly what was approved,
once. Lifecycle, expiry, denial, the wrong writer, changed arguments, a restart between
approval and run (a real process), and every way around it refused: a plain set, a revert,
an adopted hand edit, the agent over MCP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.audit import integrity
from gitstate.audit import views as audit
from gitstate.core.errors import InvalidInput, Refused
from tests.helpers import Clock, run_cli

SCHEMA = """\
version: 1
unknown_keys: allow
approvals:
  refund: {writers: [human], ttl_hours: 24}
  wire: {writers: [runtime, human]}
"""
ARGS = {"ticket": "T-2317", "amount": 120, "currency": "TWD"}


@pytest.fixture
def runtime(agent_dir: Path, clock: Clock) -> StateRepo:
    repo = StateRepo.init(agent_dir, clock=clock)
    repo.set_schema(SCHEMA, "tools that need a human")
    return repo


def _human(repo: StateRepo, clock: Clock) -> StateRepo:
    return StateRepo(repo.agent_dir, writer="human", clock=clock)


def test_the_lifecycle(runtime: StateRepo, clock: Clock) -> None:
    assert runtime.can_run("lookup", {"any": 1})  # needs no approval
    assert not runtime.can_run("refund", ARGS)
    approval = runtime.approvals.request("refund", ARGS, "customer asked for a refund")
    assert runtime.approvals.verdict("refund", ARGS).reason.endswith("(waiting for a decision)")
    [listed] = runtime.approvals.list()
    assert listed["id"] == approval and listed["status"] == "pending"
    assert listed["args"] == ARGS and len(listed["args_sha256"]) == 64
    with pytest.raises(Refused) as exc:
        runtime.approvals.approve(approval, "I approve myself")  # the runtime is not a writer of refund
    assert exc.value.rule == "approval.writer"
    with _human(runtime, clock) as human:
        human.approvals.approve(approval, "ticket checked")
    # key order of the arguments never matters; any changed argument is named
    assert runtime.can_run("refund", dict(reversed(list(ARGS.items()))))
    changed = runtime.approvals.verdict("refund", {**ARGS, "amount": 150})
    assert not changed.ok and "args.amount: 120 approved, 150 asked" in changed.reason
    added = runtime.approvals.verdict("refund", {**ARGS, "note": "x"})
    assert "args.note: (absent) approved" in added.reason
    assert not runtime.can_run("refund")  # no arguments: nothing can match
    first = runtime.approvals.consume(approval, "refund", ARGS, request_id="run-1")
    retry = runtime.approvals.consume(approval, "refund", ARGS, request_id="run-1")
    assert retry.replayed and retry.commit == first.commit
    with pytest.raises(Refused) as exc:
        runtime.approvals.consume(approval, "refund", ARGS)
    assert exc.value.rule == "approval.not_runnable" and "consumed" in exc.value.message
    assert not runtime.can_run("refund", ARGS)
    trailers = audit.show(runtime, runtime.head())["trailers"]
    assert [t for t in trailers if t[0] == "Gitstate-Approval"] == [
        ["Gitstate-Approval", "consume"]]
    assert all(c.ok for c in integrity.verify(runtime))


def test_consume_checks_the_arguments_too(runtime: StateRepo, clock: Clock) -> None:
    approval = runtime.approvals.request("refund", ARGS, "r")
    with _human(runtime, clock) as human:
        human.approvals.approve(approval, "ok")
    with pytest.raises(Refused) as exc:
        runtime.approvals.consume(approval, "refund", {**ARGS, "amount": 121})
    assert "argument changed" in exc.value.message
    with pytest.raises(Refused):
        runtime.approvals.consume(approval, "wire", ARGS)  # another tool
    runtime.approvals.consume(approval)  # no call given: the approved one
    with pytest.raises(Refused):
        runtime.approvals.consume(approval)


def test_expiry_and_denial_never_let_it_run(runtime: StateRepo, clock: Clock) -> None:
    late = runtime.approvals.request("refund", ARGS, "r")
    with _human(runtime, clock) as human:
        human.approvals.approve(late, "ok")
        clock.advance(hours=25)
        assert not runtime.can_run("refund", ARGS)
        assert "expired" in runtime.approvals.verdict("refund", ARGS).reason
        with pytest.raises(Refused):
            runtime.approvals.consume(late, "refund", ARGS)
        pending = runtime.approvals.request("refund", ARGS, "again")
        clock.advance(hours=25)
        with pytest.raises(Refused) as exc:
            human.approvals.approve(pending, "too late")
        assert exc.value.rule == "approval.expired"
        denied = runtime.approvals.request("refund", ARGS, "once more")
        human.approvals.deny(denied, "amount too high")
        assert not runtime.can_run("refund", ARGS)
        with pytest.raises(Refused) as exc:
            human.approvals.approve(denied, "changed my mind")
        assert exc.value.rule == "approval.decided"
    assert not runtime.can_run("refund", ARGS)


def test_a_policy_may_name_the_runtime(runtime: StateRepo) -> None:
    approval = runtime.approvals.request("wire", {"to": "acct-1"}, "pay the supplier")
    runtime.approvals.approve(approval, "automatic below the limit")
    assert runtime.can_run("wire", {"to": "acct-1"})


def test_only_declared_tools_and_object_arguments(runtime: StateRepo) -> None:
    with pytest.raises(InvalidInput) as exc:
        runtime.approvals.request("lookup", ARGS, "r")
    assert exc.value.rule == "approval.not_required"
    with pytest.raises(InvalidInput):
        runtime.approvals.request("refund", [1, 2], "r")
    with pytest.raises(InvalidInput):
        runtime.approvals.request("refund", {"bad key": 1}, "r")


def test_nothing_else_writes_an_approval(runtime: StateRepo, clock: Clock) -> None:
    """A plain set or clear (any writer, the agent over MCP included), a revert and an
    adopted hand edit are refused; the record stays as the planners wrote it."""
    approval = runtime.approvals.request("refund", ARGS, "r")
    key = f"approval.{approval}"
    forged = {**runtime.state().keys[key].value, "status": "approved"}
    for writer in ("agent", "runtime", "human"):
        with StateRepo(runtime.agent_dir, writer=writer, clock=clock) as repo:
            with pytest.raises(InvalidInput) as exc:
                repo.set(key, forged, "approve myself")
            assert exc.value.rule == "approval.reserved"
            with pytest.raises(InvalidInput):
                repo.clear(key, "erase the request")
    with _human(runtime, clock) as human:
        decided = human.approvals.approve(approval, "ok")
        with pytest.raises(InvalidInput) as exc:
            human.revert(decided.commit, "undo the approval")
        assert exc.value.rule == "approval.reserved"
    consumed = runtime.approvals.consume(approval, "refund", ARGS)
    with pytest.raises(InvalidInput):  # a revert of consume would re-arm the approval
        runtime.revert(consumed.commit, "run it twice")
    path = runtime.state_dir / "working_state.json"
    data = json.loads(path.read_bytes())
    assert key not in data["keys"]  # the spend retired it; a hand edit bringing it back:
    [spent] = [a for a in runtime.approvals.list() if a["id"] == approval]
    data["keys"][key] = {"actor": "runtime", "expires_at": spent["expires_at"], "reason": "r",
                         "set_at": spent["set_at"],
                         "value": {**consumed.new.value, "status": "approved"}}
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2, sort_keys=True) + "\n")
    with pytest.raises(InvalidInput) as exc:
        runtime.adopt("adopt my edit")
    assert exc.value.rule == "approval.reserved"
    assert key not in runtime.state().keys
    assert [a["status"] for a in runtime.approvals.list() if a["id"] == approval] == ["consumed"]


def test_the_agent_over_mcp_sees_but_never_decides(runtime: StateRepo) -> None:
    """The agent's tools: the pending approval is in working_state_get and the rendered
    section; a working_state_set of it is refused."""
    import anyio

    from tests.mcp.test_mcp import _call, connect

    approval = runtime.approvals.request("refund", ARGS, "r")

    async def main() -> None:
        async with connect(runtime.agent_dir) as client:
            err, out, _ = await _call(client, "working_state_get")
            assert not err and out["keys"][f"approval.{approval}"]["value"]["status"] == \
                "pending"
            err, out, _ = await _call(client, "working_state_set", key=f"approval.{approval}",
                                      value_json='{"status": "approved"}',
                                      reason="approve myself")
            assert err and out["error"] == "approval.reserved"

    anyio.run(main)
    assert f"approval.{approval}" in runtime.render(locale="en")
    assert runtime.approvals.list()[0]["status"] == "pending"


def test_approval_survives_a_restart_between_approve_and_run(tmp_path: Path) -> None:
    """Request in one process, approve with the CLI (another process), run from a third:
    the approval lives in the repository, not in any process (real clocks throughout)."""
    runtime = StateRepo.init(tmp_path / "agent")
    runtime.set_schema(SCHEMA, "tools that need a human")
    approval = runtime.approvals.request("refund", ARGS, "r")
    runtime.close()
    listed = run_cli("approvals", "--json", agent_dir=runtime.agent_dir, process=True)
    assert json.loads(listed.stdout)["approvals"][0]["id"] == approval
    out = run_cli("approve", approval, "--reason", "checked by phone", agent_dir=runtime.agent_dir,
                  process=True)
    assert out.returncode == 0, out.stderr
    check = run_cli("tools", "--can-run", "refund", "--args-json", json.dumps(ARGS),
                    agent_dir=runtime.agent_dir, process=True)
    assert check.returncode == 0, check.stderr
    wrong = run_cli("tools", "--can-run", "refund", "--args-json",
                    json.dumps({**ARGS, "amount": 999}), agent_dir=runtime.agent_dir)
    assert wrong.returncode == 1 and "args.amount: 120 approved, 999 asked" in wrong.stderr
    with StateRepo(runtime.agent_dir) as again:
        assert again.can_run("refund", ARGS)
        again.approvals.consume(approval, "refund", ARGS)
        assert not again.can_run("refund", ARGS)


def test_bad_approval_declarations_are_named(runtime: StateRepo) -> None:
    for text, fragment in (
            ("approvals:\n  refund: {writers: [agent]}\n", "the agent never decides"),
            ("approvals:\n  refund: {ttl_hours: 0}\n", "ttl_hours"),
            ("approvals:\n  refund: {colour: red}\n", "only writers, ttl_hours, offline_spend"),
            ("approvals: [refund]\n", "must map tool names"),
            ("approvals:\n  refund: {offline_spend: 1}\n", "offline_spend must be true or"),
            ("approvals:\n  refund: {void_if_changed: limit}\n", "must list keys or"),
            ("approvals:\n  refund: {void_if_changed: ['a b']}\n", "void_if_changed: ")):
        with pytest.raises(InvalidInput) as exc:
            runtime.set_schema(f"version: 2\n{text}", "bad")
        assert fragment in exc.value.message, exc.value.message

