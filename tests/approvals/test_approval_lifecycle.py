"""A finished approval leaves the key table: a spend, a denial and a failed call's outcome
retire their record in the commit that finishes it, a request retires every expired one,
and an expired record may be cleared. So the live-key cap and the stored-key limit count
only approvals that can still be decided or spent, however many have come and gone; their
whole life stays in git and in ``gitstate approvals --all``. (bench/spend.py runs 10,000
cycles.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.audit import integrity
from gitstate.core.errors import InvalidInput, KeyCapReached
from tests.helpers import GIT, Clock, run_cli

SCHEMA = """\
version: 1
unknown_keys: allow
approvals:
  refund: {writers: [runtime]}
  wire: {writers: [runtime], ttl_hours: 1}
"""
CYCLES = 120  # request, approve, spend: past the 32 live keys nearly four times


def _approval_keys(repo: StateRepo) -> list[str]:
    return [k for k in repo.state().keys if k.startswith("approval.")]


def test_request_approve_spend_cycles_never_fill_the_table(agent_dir: Path) -> None:
    """Default caps (32 live keys, 256 stored): every cycle's request is accepted and its
    spend enters; the table holds no finished approval; the log and ``approvals --all``
    hold every one; verify replays the retirements; git agrees."""
    repo = StateRepo.init(agent_dir)
    repo.set_schema(SCHEMA, "refunds need an approval")
    spent = []
    for n in range(CYCLES):
        approval = repo.approvals.request("refund", {"order": n}, "the customer asked")
        repo.approvals.approve(approval, "within policy")
        with repo.approvals.spend(approval, "refund", {"order": n}) as call:
            spent.append(call.approval_id)
        if n % 40 == 0:  # denied ones leave as well
            denied = repo.approvals.request("refund", {"order": -n}, "asked again")
            repo.approvals.deny(denied, "a duplicate")
    assert _approval_keys(repo) == []
    listed = {a["id"]: a["status"] for a in repo.approvals.list()}
    assert [listed[a] for a in spent] == ["consumed"] * CYCLES
    assert sorted(listed.values()).count("denied") == 3
    out = run_cli("approvals", "--all", "--json", agent_dir=agent_dir)
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["approvals"]) == CYCLES + 3
    assert all(c.ok for c in integrity.verify(repo)), [c for c in integrity.verify(repo) if not c.ok]
    if GIT is not None:
        log = subprocess.run([GIT, "-C", str(repo.store.git_dir), "log", "--format=%B", "main"],
                             capture_output=True, text=True, check=True).stdout
        assert log.count("Gitstate-Approval: consume") == CYCLES
        assert log.count('Gitstate-Retired: ["approval.') == CYCLES + 3
        subprocess.run([GIT, "-C", str(repo.store.git_dir), "fsck", "--strict"], check=True,
                       capture_output=True)
    repo.close()


def test_a_retired_approval_keeps_its_rules(agent_dir: Path) -> None:
    """A second spend, a second decision and a second outcome of a retired record are
    refused by the planner's own rule, read back from the history."""
    repo = StateRepo.init(agent_dir)
    repo.set_schema(SCHEMA, "refunds need an approval")
    approval = repo.approvals.request("refund", {"order": 1}, "asked")
    repo.approvals.approve(approval, "ok")
    with pytest.raises(RuntimeError), repo.approvals.spend(approval, "refund", {"order": 1}):
        raise RuntimeError("the provider timed out")
    assert _approval_keys(repo) == []
    [record] = repo.approvals.list()
    assert record["status"] == "consumed" and record["outcome"] == "failed"
    from gitstate.core.errors import Refused

    with pytest.raises(Refused) as exc:
        repo.approvals.consume(approval, "refund", {"order": 1})
    assert exc.value.rule == "approval.not_runnable"
    assert exc.value.details["status"] == "consumed"
    with pytest.raises(Refused) as exc:
        repo.approvals.approve(approval, "again")
    assert exc.value.rule == "approval.decided"
    denied = repo.approvals.request("refund", {"order": 2}, "asked")
    repo.approvals.deny(denied, "no")
    with pytest.raises(Refused) as exc:
        repo.approvals.deny(denied, "no again")
    assert exc.value.rule == "approval.decided"
    assert not repo.can_run("refund", {"order": 1})
    assert all(c.ok for c in integrity.verify(repo))
    repo.close()


def test_expired_approvals_leave_the_stored_table(agent_dir: Path, clock: Clock) -> None:
    """Requests that are never decided expire; the next request retires them, so the
    stored-key limit (here 20) is never reached by them. An expired record may be cleared
    (a plain set at the limit names them); a live one may not."""
    (agent_dir / "config.toml").write_text("[gitstate]\nmax_stored_keys = 20\n")
    repo = StateRepo.init(agent_dir, clock=clock)
    repo.set_schema(SCHEMA, "wires need an approval")
    for n in range(100):
        repo.approvals.request("wire", {"to": n}, "asked")
        clock.advance(minutes=20)  # each lasts an hour: three are live at a time
    assert len(_approval_keys(repo)) <= 4
    assert len([a for a in repo.approvals.list() if a["expired"]]) >= 96
    # at the limit, the expired records the refusal names can be cleared
    for n in range(20 - len(repo.state().keys)):
        repo.set(f"k{n}", n, "fill")
    clock.advance(hours=2)
    with pytest.raises(KeyCapReached) as exc:
        repo.set("one.more", 1, "over the limit")
    expired = [k for k in exc.value.details["expired_keys"] if k.startswith("approval.")]
    assert expired
    for key in expired:
        repo.clear(key, "expired, never decided")
    repo.set("one.more", 1, "room again")
    live = repo.approvals.request("wire", {"to": "x"}, "asked")
    with pytest.raises(InvalidInput) as err:
        repo.clear(f"approval.{live}", "erase a live request")
    assert err.value.rule == "approval.reserved"
    assert all(c.ok for c in integrity.verify(repo))
    repo.close()
