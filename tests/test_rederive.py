"""The one rule of foreign commits: a commit gitstate did not make here is taken only when
gitstate's own planners, at its parent's state and schema and at its time, make exactly it.

Each forgery below is as good as an attacker can make it — the right trailers, the state or
run.json its replay gives, the approval id derived as gitstate derives it — so that only the
one thing under test is wrong: a decision after the expiry, an expiry a decision extended, a
request without its policy's TTL, a spend of what was never approved, a run event citing an
approval main never held or a commit main does not have, times that go back or run ahead.
Each is met by pull over a path remote, git:// and smart HTTP (nothing kept) and by the real
pre-receive hook; honest work on another clone passes both."""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gitstate import approvals, runs
from gitstate.errors import GitStateError
from gitstate.model import format_time
from gitstate.repo import StateRepo
from gitstate.runformat import PREFIX, message
from gitstate.trailers import Change
from tests.forge import Forge
from tests.helpers import GIT, Clock, git, install_pre_receive, trust_remote
from tests.hostile_git_server import served
from tests.test_wire import Snapshot, _rule_of

pytestmark = pytest.mark.skipif(GIT is None, reason="needs the git CLI for the remote")
TRANSPORTS = ["path", "git", "http"]
SCHEMA = """\
version: 1
unknown_keys: allow
approvals:
  refund: {writers: [human], ttl_hours: 24}
"""
ARGS = {"order": "O-1", "amount": 120}
RUN = "refund-O-1"
HOUR = 3600


class World:
    """A (the runtime, its clock 40 hours back), its human, and a bare remote; B a clone."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.bare = tmp_path / "srv" / "remote.git"
        self.bare.parent.mkdir()
        subprocess.run([GIT or "git", "init", "-q", "--bare", "-b", "main", str(self.bare)],
                       check=True)
        git(self.bare, "config", "http.receivepack", "true")
        self.t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=40)
        self.clock = Clock(self.t0)
        self.a = StateRepo.init(tmp_path / "a", clock=self.clock)
        self.a.set_schema(SCHEMA, "refunds need a human")
        self.clock.advance(minutes=1)
        self.approval = self.a.request_approval("refund", ARGS, "the customer asked")
        self.clock.advance(minutes=1)
        self.a.runs.start(RUN, description="refund O-1", criteria=["refunded"], risk="high",
                          reason="the customer asked")
        self.a.runs.event(RUN, {"type": "step_started", "step_id": "pay",
                                "description": "pay back", "side_effect": True}, "pay")
        self.a.store.set_remote_url(str(self.bare))
        self.a.push()
        self.b = tmp_path / "b"
        # who may claim a role is tests/test_trust.py's business: here B takes the claims
        trust_remote(self.b)
        StateRepo.clone(str(self.bare), self.b).close()

    def human(self) -> StateRepo:
        return StateRepo(self.a.agent_dir, writer="human", actor="operator", clock=self.clock)

    def guarded(self) -> Path:
        server = self.tmp / "srv" / "guarded.git"
        if not server.exists():
            subprocess.run([GIT or "git", "clone", "-q", "--bare", str(self.bare),
                            str(server)], check=True)
            install_pre_receive(server, self.tmp)
        return server

    def at(self, hours: float) -> int:
        return int((self.t0 + timedelta(hours=hours)).timestamp())


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


# -- approvals on main ----------------------------------------------------------------------

def _record(w: World) -> tuple[str, dict[str, Any], str | None]:
    key = approvals.PREFIX + w.approval
    entry = Forge(w.bare).state().keys[key]
    assert isinstance(entry.value, dict)
    return key, entry.value, entry.expires_at


def _step(w: World, step: str, value: dict[str, Any], expires: str | None, *,
          key: str | None = None, old: object = None, actor: str = "operator") -> Change:
    rec_key, rec_value, _ = _record(w)
    return Change(op="set", reason="decided", actor=actor, key=key or rec_key,
                  old=rec_value if old is None else old, new=value, expires_at=expires,
                  extra=(("Approval", step),))


def _approve_after_expiry(w: World) -> str:
    """The pending approval expired at t0+24h; a decision 6 h later that also sets a new
    expiry 366 days ahead (within the TTL cap of plain keys)."""
    _key, value, _ = _record(w)
    when = w.at(30)
    later = format_time(datetime.fromtimestamp(when, UTC) + timedelta(days=365))
    return Forge(w.bare).commit(_step(w, "approve", {**value, "status": "approved",
                                                     "decided_by": "operator"}, later),
                                when=when)


def _approve_extending(w: World) -> str:
    """A decision in time, but one that moves the expiry a day on."""
    _key, value, expires = _record(w)
    assert expires is not None
    later = format_time(datetime.fromisoformat(expires.replace("Z", "+00:00"))
                        + timedelta(days=1))
    return Forge(w.bare).commit(_step(w, "approve", {**value, "status": "approved",
                                                     "decided_by": "operator"}, later),
                                when=w.at(2))


def _request_without_ttl(w: World) -> str:
    """A request with the id gitstate derives, but no expiry although the policy says 24 h."""
    forge = Forge(w.bare)
    parent = forge.head()
    _text, digest = approvals.frozen({"order": "O-2", "amount": 9999})
    approval_id = hashlib.sha256(f"{parent}\0refund\0{digest}".encode()).hexdigest()[:12]
    value = {"tool": "refund", "args": {"order": "O-2", "amount": 9999},
             "args_sha256": digest, "status": "pending", "requested_by": "agent",
             "decided_by": None}
    change = Change(op="set", reason="please", actor="agent",
                    key=approvals.PREFIX + approval_id, old=None, new=value, expires_at=None,
                    extra=(("Approval", "request"),))
    return forge.commit(change, when=w.at(2))


def _consume_pending(w: World) -> str:
    _key, value, expires = _record(w)
    return Forge(w.bare).commit(_step(w, "consume", {**value, "status": "consumed"},
                                      expires, actor="runtime"), when=w.at(2))


MAIN_ATTACKS = {
    "approve-after-expiry": (_approve_after_expiry, "approval.expired"),
    "approve-extends-expiry": (_approve_extending, "approval.rederive"),
    "request-without-ttl": (_request_without_ttl, "approval.rederive"),
    "consume-pending": (_consume_pending, "approval.not_runnable"),
}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("attack", sorted(MAIN_ATTACKS))
def test_pull_refuses_a_forged_approval_step(world: World, transport: str,
                                             attack: str) -> None:
    make, rule = MAIN_ATTACKS[attack]
    make(world)
    before = Snapshot(world.b)
    with served(transport, world.bare) as url, StateRepo(world.b) as repo:
        repo.store.set_remote_url(url)
        with pytest.raises(GitStateError) as err:
            repo.pull()
        assert _rule_of(err.value) == rule, err.value.message
        assert not repo.can_run("refund", ARGS)
    before.unchanged()


@pytest.mark.parametrize("attack", sorted(MAIN_ATTACKS))
def test_the_hook_refuses_a_forged_approval_step(world: World, attack: str) -> None:
    make, rule = MAIN_ATTACKS[attack]
    server = world.guarded()
    forged = make(world)
    out = subprocess.run([GIT or "git", "-C", str(world.bare), "push", str(server),
                          f"{forged}:refs/heads/main"], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode != 0 and f"[{rule}]" in out.stderr, out.stderr
    assert git(server, "rev-parse", "main").stdout.strip() != forged


# -- run ledgers ------------------------------------------------------------------------------

def _run_commit(w: World, event: dict[str, Any], *, when: int, writer: str = "runtime",
                author: int | None = None) -> str:
    """A run commit exactly as the ledger writes one — the event applied by runs.py to the
    parent's run.json, the ledger's own message — unless the event itself is the lie."""
    import json

    head = git(w.bare, "rev-parse", PREFIX + RUN).stdout.strip()
    run = json.loads(git(w.bare, "show", f"{head}:run.json").stdout)
    moment = datetime.fromtimestamp(when, UTC)
    event = runs.validate_event(event)
    with contextlib.suppress(runs.RunRefused):  # the forger writes the run.json it wants
        run = runs.apply_event(run, event, writer, moment)
    if event["type"] == "approval_recorded" and event["decision"] == "approved":
        run["state"]["awaiting_approval"], run["state"]["stop_reason"] = None, None
        run["goal"]["status"] = "active"
    data = json.dumps(run, ensure_ascii=False, indent=2, sort_keys=True) + "\n"
    blob = git(w.bare, "hash-object", "-w", "--stdin", input=data).stdout
    tree = git(w.bare, "mktree", input=f"100644 blob {blob.strip()}\trun.json\n").stdout
    msg = message("approved by phone", RUN, event, writer, None, "forger:1:abcdef")
    env = {**os.environ, "GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@x",
           "GIT_COMMITTER_NAME": "x", "GIT_COMMITTER_EMAIL": "x@x",
           "GIT_COMMITTER_DATE": f"{when} +0000",
           "GIT_AUTHOR_DATE": f"{author or when} +0000"}
    out = subprocess.run([GIT or "git", "-C", str(w.bare), "commit-tree", tree.strip(),
                          "-p", head, "-F", "-"], input=msg, capture_output=True, env=env,
                         check=True)
    commit = out.stdout.decode().strip()
    git(w.bare, "update-ref", PREFIX + RUN, commit)
    return commit


def _main(w: World) -> str:
    return git(w.bare, "rev-parse", "main").stdout.strip()


def _recorded(approval_id: str, **extra: str) -> dict[str, Any]:
    return {"type": "approval_recorded", "approval_id": approval_id, "decision": "approved",
            **extra}


RUN_ATTACKS = {
    # an approval main never held
    "unknown-approval": (lambda w: _run_commit(w, _recorded("0000deadbeef",
                                                            main_commit=_main(w)),
                                               when=w.at(3)), "run.approval_unknown"),
    # main holds it, pending: the event claims approved
    "pending-called-approved": (lambda w: _run_commit(w, _recorded(w.approval,
                                                                   main_commit=_main(w)),
                                                      when=w.at(3)), "run.approval_mismatch"),
    # no link at all
    "no-link": (lambda w: _run_commit(w, _recorded(w.approval), when=w.at(3)),
                "run.approval_unlinked"),
    # a link to a commit main does not have
    "link-off-main": (lambda w: _run_commit(w, _recorded(w.approval, main_commit="ab" * 20),
                                            when=w.at(3)), "run.approval_unlinked"),
    # dated 2001, before the run's own events
    "time-backwards": (lambda w: _run_commit(w, {"type": "question_opened", "question": "?"},
                                             when=978307200), "time.backwards"),
    # dated a day ahead of the receiver's clock
    "time-future": (lambda w: _run_commit(w, {"type": "question_opened", "question": "?"},
                                          when=int(time.time()) + 86400), "time.future"),
    # the author date is not the commit's
    "author-date-differs": (lambda w: _run_commit(w, {"type": "question_opened",
                                                      "question": "?"},
                                                  when=w.at(3), author=w.at(1)),
                            "run.rederive"),
}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("attack", sorted(RUN_ATTACKS))
def test_pull_refuses_a_forged_run_event(world: World, transport: str, attack: str) -> None:
    make, rule = RUN_ATTACKS[attack]
    with StateRepo(world.b) as repo:
        repo.pull()
    make(world)
    before = Snapshot(world.b)
    with served(transport, world.bare) as url, StateRepo(world.b) as repo:
        repo.store.set_remote_url(url)
        with pytest.raises(GitStateError) as err:
            repo.pull()
        assert err.value.rule == "remote.run_invalid", err.value.message
        assert f"[{rule}]" in err.value.message, err.value.message
        assert repo.runs.read(RUN).state["awaiting_approval"] == "pay"
    before.unchanged()


@pytest.mark.parametrize("attack", sorted(RUN_ATTACKS))
def test_the_hook_refuses_a_forged_run_event(world: World, attack: str) -> None:
    make, rule = RUN_ATTACKS[attack]
    server = world.guarded()
    forged = make(world)
    out = subprocess.run([GIT or "git", "-C", str(world.bare), "push", str(server),
                          f"{forged}:{PREFIX}{RUN}"], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode != 0 and f"[{rule}]" in out.stderr, out.stderr


def test_honest_decisions_and_their_run_event_pass_pull_and_the_hook(world: World) -> None:
    """The control: the human approves on A, A's runtime records it in the run (the ledger
    cites main's commit), A pushes through the hook, B pulls all of it and can promote."""
    server = world.guarded()
    world.a.store.set_remote_url(str(server))
    world.clock.advance(hours=1)
    with world.human() as human:
        human.approve(world.approval, "the order checks out")
    world.clock.advance(minutes=1)
    view = world.a.runs.event(RUN, _recorded(world.approval), "the operator approved")
    assert view.next["action"] == "continue"
    recorded = world.a.runs.read(RUN)
    assert recorded.state["approval_refs"] == [world.approval]
    pushed = world.a.push()
    assert pushed.runs["pushed"] == [RUN], pushed.runs
    world.clock.advance(minutes=1)
    world.a.consume_approval(world.approval, "refund", ARGS)
    assert world.a.push().pushed
    with StateRepo(world.b) as repo:
        repo.store.set_remote_url(str(server))
        pulled = repo.pull()
        assert pulled.runs["pulled"] == [RUN]
        assert repo.runs.read(RUN).next["action"] == "continue"
        assert repo.runs.verify(RUN) == []


# -- refusal journals: the same clock rule --------------------------------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
def test_pull_refuses_a_journal_dated_ahead(world: World, transport: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A new journal whose one record is committed a day ahead of the receiver's clock."""
    from tests.test_refusals import _forge

    with StateRepo(world.b) as repo:
        repo.pull()
    ahead = int(time.time()) + 86400
    monkeypatch.setenv("GIT_COMMITTER_DATE", f"{ahead} +0000")
    monkeypatch.setenv("GIT_AUTHOR_DATE", f"{ahead} +0000")
    git(world.bare, "update-ref", "refs/gitstate/refusals/00000000000000aa",
        _forge(world.bare, None))
    before = Snapshot(world.b)
    with served(transport, world.bare) as url, StateRepo(world.b) as repo:
        repo.store.set_remote_url(url)
        with pytest.raises(GitStateError) as err:
            repo.pull()
        assert err.value.rule == "remote.refusals_invalid", err.value.message
        assert "[time.future]" in err.value.message, err.value.message
    before.unchanged()
