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
import dataclasses
import hashlib
import os
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gitstate.api.repo import StateRepo
from gitstate.approvals import steps as approvals
from gitstate.core.errors import GitStateError
from gitstate.core.model import format_time
from gitstate.core.trailers import Change
from gitstate.runs import model as runs
from gitstate.runs.format import PREFIX, encode_run, message
from gitstate.runs.validate import RunRefused, validate_event
from tests.forge import Forge
from tests.helpers import GIT, Clock, git, install_pre_receive, trust_remote
from tests.hostile_git_server import served
from tests.store.test_wire import Snapshot, _rule_of

pytestmark = pytest.mark.skipif(GIT is None, reason="needs the git CLI for the remote")
TRANSPORTS = ["path", "git", "http"]
SCHEMA = """\
version: 1
unknown_keys: allow
keys:
  fresh: {type: integer, ttl_hours: 1}
approvals:
  refund: {writers: [human], ttl_hours: 24}
  wire: {writers: [human], ttl_hours: 24, void_if_changed: [limit]}
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
        self.approval = self.a.approvals.request("refund", ARGS, "the customer asked")
        self.clock.advance(minutes=1)
        self.a.runs.start(RUN, description="refund O-1", criteria=["refunded"], risk="high",
                          reason="the customer asked")
        self.a.runs.event(RUN, {"type": "step_started", "step_id": "pay",
                                "description": "pay back", "side_effect": True}, "pay")
        self.a.store.set_remote_url(str(self.bare))
        self.a.push()
        self.b = tmp_path / "b"
        # who may claim a role is tests/accept/test_trust.py's business: here B takes the claims
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

    def push_to(self, server: Path, refspec: str) -> subprocess.CompletedProcess[str]:
        """``git push`` of ``refspec`` from the plain remote to ``server`` (its hook runs)."""
        return subprocess.run([GIT or "git", "-C", str(self.bare), "push", str(server),
                               refspec], capture_output=True, text=True, timeout=60,
                              check=False)

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


def _set(w: World, key: str = "other", new: object = 2, **fields: Any) -> Change:
    entry = Forge(w.bare).state().keys.get(key)
    return Change(op="set", reason="bump other", actor="runtime", key=key,
                  old=entry.value if entry else None, new=new, **fields)


def _set_changing_schema(w: World) -> str:
    """A plain set whose tree also carries a new schema.yaml (the key's bound removed)."""
    loose = SCHEMA.replace("ttl_hours: 1}", "ttl_hours: 1, max: 9}")
    return Forge(w.bare).commit(_set(w), extra={b"schema.yaml": (0o100644, loose.encode())},
                                when=w.at(2))


def _schema_commit(w: World, text: str, version: int) -> str:
    change = Change(op="schema", reason="schema", actor="runtime", schema_version=version)
    forge = Forge(w.bare)
    return forge.commit(change, state=forge.state(), when=w.at(2),
                        extra={b"schema.yaml": (0o100644, text.encode())})


def _message(w: World, edit: Any) -> str:
    """An honest set's message, edited as bytes."""
    change = _set(w)
    return Forge(w.bare).commit(change, message=edit(change.message()), when=w.at(2))


def _decided_on(w: World, pick: Any) -> str:
    _key, value, expires = _record(w)
    return Forge(w.bare).commit(_step(w, "approve", {**value, "status": "approved",
                                                     "decided_by": "operator",
                                                     "decided_on": pick(w)}, expires),
                                when=w.at(2))


def _consume_void(w: World) -> str:
    """An approval of wire, whose policy voids it when limit changes: limit changes after
    the decision; the consume the planner makes, minus that check."""
    w.a.set("limit", 500, "the limit")
    approval = w.a.approvals.request("wire", {"to": "x"}, "wire it")
    w.a.push()  # a decision is linearized through the remote
    w.clock.advance(minutes=1)
    with w.human() as human:
        human.approvals.approve(approval, "ok")
    w.clock.advance(minutes=1)
    w.a.set("limit", 50, "tighter")
    w.a.push()
    key = approvals.PREFIX + approval
    entry = Forge(w.bare).state().keys[key]
    assert isinstance(entry.value, dict)
    change = Change(op="set", reason="spend", actor="runtime", key=key, old=entry.value,
                    new={**entry.value, "status": "consumed", "consumed_by": "runtime"},
                    expires_at=entry.expires_at, extra=(("Approval", "consume"),))
    return Forge(w.bare).commit(change, when=Forge(w.bare).time() + 60)


def _root(w: World) -> str:
    return git(w.bare, "rev-list", "--max-parents=0", "main").stdout.strip()


VERSION_TWO = SCHEMA.replace("version: 1", "version: 2")
MAIN_ATTACKS = {
    "approve-after-expiry": (_approve_after_expiry, "approval.expired"),
    "approve-extends-expiry": (_approve_extending, "approval.rederive"),
    "request-without-ttl": (_request_without_ttl, "approval.rederive"),
    "consume-pending": (_consume_pending, "approval.not_runnable"),
    # schema.yaml changes only by a schema commit, re-derived by the schema planner
    "set-changes-schema": (_set_changing_schema, "schema.unaudited"),
    "schema-version-not-grown": (lambda w: _schema_commit(w, SCHEMA, 1), "schema.version"),
    "schema-version-trailer-lies": (lambda w: _schema_commit(w, VERSION_TWO, 7),
                                    "commit.rederive"),
    "schema-secret-comment": (lambda w: _schema_commit(
        w, VERSION_TWO + "# ghp_0123456789abcdefABCDEF0123456789abcd\n", 2),
        "secret.github_token"),
    "schema-nested-deep": (lambda w: _schema_commit(w, "[" * 20000 + "]" * 20000, 2),
                           "schema.invalid"),
    # the message is the one gitstate writes for the change, byte for byte
    "old-lies": (lambda w: Forge(w.bare).commit(
        dataclasses.replace(_set(w), old=999), when=w.at(2)), "trailer.old"),
    "unknown-trailer": (lambda w: Forge(w.bare).commit(
        _set(w, extra=(("Writer", "human"),)), when=w.at(2)), "trailer.unexpected"),
    "observation-on-set": (lambda w: Forge(w.bare).commit(
        _set(w, observation="forged"), when=w.at(2)), "trailer.unexpected"),
    "schema-version-on-set": (lambda w: Forge(w.bare).commit(
        _set(w, schema_version=99), when=w.at(2)), "trailer.unexpected"),
    "reverts-nothing": (lambda w: Forge(w.bare).commit(
        _set(w, reverts="0" * 40), when=w.at(2)), "trailer.reverts"),
    "clock-ahead": (lambda w: Forge(w.bare).commit(
        _set(w, clock="8999-01-01T00:00:00Z"), when=w.at(2)), "trailer.clock"),
    "request-not-a-fingerprint": (lambda w: Forge(w.bare).commit(
        _set(w, request={"id": "\u202eevil", "x": "y" * 5000}), when=w.at(2)),
        "trailer.request"),
    "version-99": (lambda w: _message(w, lambda m: m.replace(b"Version: 1", b"Version: 99")),
                   "commit.rederive"),
    "trailers-reordered": (lambda w: _message(w, lambda m: m.replace(
        b"Gitstate-Op: set\nGitstate-Key: other\n", b"Gitstate-Key: other\nGitstate-Op: set\n")),
        "commit.rederive"),
    # a set's expiry is the planner's: the recorded TTL, else the schema's default
    "default-ttl-dropped": (lambda w: Forge(w.bare).commit(_set(w, "fresh", 6), when=w.at(2)),
                            "ttl.rederive"),
    # a spend goes through the policy's void_if_changed, as a local one does
    "consume-void": (_consume_void, "approval.void"),
    # decided_on is the decision's parent (or, re-applied, a commit since the request)
    "decided-on-nothing": (lambda w: _decided_on(w, lambda _w: "f" * 40),
                           "approval.decided_on"),
    "decided-on-root": (lambda w: _decided_on(w, _root), "approval.decided_on"),
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
            repo.remote.pull()
        assert _rule_of(err.value) == rule, err.value.message
        assert not repo.can_run("refund", ARGS)
    before.unchanged()


@pytest.mark.parametrize("attack", sorted(MAIN_ATTACKS))
def test_the_hook_refuses_a_forged_approval_step(world: World, attack: str) -> None:
    make, rule = MAIN_ATTACKS[attack]
    server = world.guarded()
    forged = make(world)
    out = world.push_to(server, f"{forged}:refs/heads/main")
    assert out.returncode != 0 and f"[{rule}]" in out.stderr, out.stderr
    assert git(server, "rev-parse", "main").stdout.strip() != forged


def test_a_schema_nested_too_deep_is_refused_locally_too(world: World) -> None:
    """The parser every schema.yaml goes through refuses deep flow nesting by its rule,
    before ruamel (which recurses, and scans such text in quadratic time)."""
    started = time.monotonic()
    for text in ("[" * 20000 + "]" * 20000, "version: 2\nkeys: " + "{a: " * 12000 + "1"
                 + "}" * 12000):
        with pytest.raises(GitStateError) as err:
            world.a.set_schema(text, "deep")
        assert err.value.rule == "schema.invalid", err.value.message
    assert time.monotonic() - started < 5


def _decide_honestly(w: World, seen: str, *, consumed_by: bool) -> tuple[str, str]:
    """A decision and its spend as gitstate writes them, the spend without ``consumed_by``
    when ``consumed_by`` is false (a gitstate from before that field)."""
    key, value, expires = _record(w)
    approved = {**value, "status": "approved", "decided_by": "operator", "decided_on": seen}
    forge = Forge(w.bare)
    decided = forge.commit(_step(w, "approve", approved, expires), when=w.at(2))
    spent = {**approved, "status": "consumed"} | ({"consumed_by": "runtime"} if consumed_by
                                                  else {})
    consumed = forge.commit(Change(op="set", reason="spend", actor="runtime", key=key,
                                   old=approved, new=spent, expires_at=expires,
                                   extra=(("Approval", "consume"),)), when=w.at(3))
    return decided, consumed


def test_an_older_writers_spend_without_consumed_by_passes_pull_and_the_hook(
        world: World) -> None:
    server = world.guarded()
    _decided, consumed = _decide_honestly(world, _main(world), consumed_by=False)
    with StateRepo(world.b) as repo:
        repo.remote.pull()
        assert repo.state().keys[approvals.PREFIX + world.approval].value["status"] == \
            "consumed"
    out = world.push_to(server, f"{consumed}:refs/heads/main")
    assert out.returncode == 0, out.stderr


def test_a_decision_made_on_an_unpushed_commit_is_re_applied_naming_its_copy(
        world: World) -> None:
    """The human decides on A's unpushed commit (A had no remote then, so the decision was
    not linearized through one) while B moved the remote: push re-applies both, the decision
    naming the copy of the commit it was made on, and the guarded remote and B take it; a
    decision whose policy's key the remote changed meanwhile is refused."""
    server = world.guarded()
    world.a.store.set_remote_url(str(server))
    with StateRepo(world.b, clock=world.clock) as b:
        b.store.set_remote_url(str(server))
        b.set("elsewhere", 1, "B moves the remote")
        b.push()
    world.clock.advance(minutes=5)
    world.a.set("mine", 1, "an unpushed commit")
    made_on = world.a.store.head()
    world.a.store.set_remote_url(None)
    with world.human() as human:
        human.approvals.approve(world.approval, "ok")
    world.a.store.set_remote_url(str(server))
    pushed = world.a.push()
    assert pushed.rebased == 2 and not pushed.refused, pushed
    value = world.a.state().keys[approvals.PREFIX + world.approval].value
    assert value["decided_on"] != made_on
    assert value["decided_on"] == world.a.store.parents(world.a.store.head())[0]
    with StateRepo(world.b) as b:
        b.pull()
        assert b.state().keys[approvals.PREFIX + world.approval].value["status"] == "approved"
    wire = world.a.approvals.request("wire", {"to": "x"}, "wire it")
    world.a.push()
    with StateRepo(world.b, clock=world.clock) as b:
        b.pull()
        b.set("limit", 50, "B tightens the limit the wire policy binds")
        b.push()
    world.clock.advance(minutes=5)
    world.a.set("mine", 2, "another unpushed commit")
    world.a.store.set_remote_url(None)
    with world.human() as human:
        human.approvals.approve(wire, "ok, as the limit stood here")
    world.a.store.set_remote_url(str(server))
    pushed = world.a.push()
    assert [r["rule"] for r in pushed.refused] == ["remote.conflict"], pushed.refused
    assert "limit changed on the remote" in pushed.refused[0]["message"]


def test_honest_reverts_promotions_and_observations_rederive(world: World) -> None:
    """Each op through its own planner on the receiving side: a revert (of a set and of a
    clear), a run's finding promoted to a key, and an observation pass the hook and pull."""
    server = world.guarded()
    world.a.store.set_remote_url(str(server))
    world.a.set_schema(SCHEMA.replace("version: 1", "version: 2")
                       + "runs:\n  promotable:\n    \"refund.*\": [runtime]\n", "promotable")
    world.clock.advance(minutes=1)
    world.a.set("k", 1, "one")
    changed = world.a.set("k", {"to": "two"}, "two", ttl_hours=3).commit
    world.a.revert(changed, "back to one")
    gone = world.a.clear("k", "not needed").commit
    world.a.revert(gone, "wanted after all")
    world.a.runs.start("find-limit", description="find the limit", criteria=["found"],
                       risk="low", reason="start")
    world.a.runs.event("find-limit", {"type": "question_opened", "question": "which limit?"},
                       "asked")
    world.a.runs.event("find-limit", {"type": "question_answered", "question": "which limit?",
                                      "evidence_ref": "doc:7"}, "answered")
    world.a.runs.promote("find-limit", "refund.limit", 50, "the limit found",
                    evidence="doc:7")
    world.a.observations.register("price", lambda state, payload: {"price": payload["last"],
                                                                   "k": None})
    world.a.observations.apply("price", {"last": 262}, request_id="obs-1")
    pushed = world.a.push()
    assert pushed.pushed and not pushed.refused, pushed
    with StateRepo(world.b) as repo:
        repo.store.set_remote_url(str(server))
        repo.remote.pull()
        assert repo.state().keys["refund.limit"].value == 50
        assert repo.state().keys["price"].value == 262


# -- run ledgers ------------------------------------------------------------------------------

def _run_commit(w: World, event: dict[str, Any], *, when: int, writer: str = "runtime",
                author: int | None = None, process: str = "forger:1:abcdef") -> str:
    """A run commit exactly as the ledger writes one — the event applied by runs.py to the
    parent's run.json, the ledger's own message — unless the event itself is the lie."""
    import json

    head = git(w.bare, "rev-parse", PREFIX + RUN).stdout.strip()
    run = json.loads(git(w.bare, "show", f"{head}:run.json").stdout)
    moment = datetime.fromtimestamp(when, UTC)
    event = validate_event(event)
    with contextlib.suppress(RunRefused):  # the forger writes the run.json it wants
        run = runs.apply_event(run, event, writer, moment)
    if event["type"] == "approval_recorded" and event["decision"] == "approved":
        run["state"]["awaiting_approval"], run["state"]["stop_reason"] = None, None
        run["goal"]["status"] = "active"
    return _write_run(w, RUN, head, run, message("approved by phone", RUN, event, writer,
                                                 None, process), when, author)


def _write_run(w: World, run_id: str, parent: str | None, run: dict[str, Any], msg: bytes,
               when: int, author: int | None = None) -> str:
    blob = git(w.bare, "hash-object", "-w", "--stdin", input=encode_run(run).decode()).stdout
    tree = git(w.bare, "mktree", input=f"100644 blob {blob.strip()}\trun.json\n").stdout
    env = {**os.environ, "GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@x",
           "GIT_COMMITTER_NAME": "x", "GIT_COMMITTER_EMAIL": "x@x",
           "GIT_COMMITTER_DATE": f"{when} +0000",
           "GIT_AUTHOR_DATE": f"{author or when} +0000"}
    out = subprocess.run([GIT or "git", "-C", str(w.bare), "commit-tree", tree.strip(),
                          *(["-p", parent] if parent else []), "-F", "-"], input=msg,
                         capture_output=True, env=env, check=True)
    commit = out.stdout.decode().strip()
    git(w.bare, "update-ref", PREFIX + run_id, commit)
    return commit


GOAL = {"type": "goal_created", "description": "refund O-9", "criteria": ["done"],
        "constraints": [], "risk": "high", "owner": "runtime", "budget": {}}


def _goal_commit(w: World, event: dict[str, Any], *, writer: str = "runtime",
                 process: str = "forger:1:abcdef") -> str:
    """A new run's first commit: the run runs.new_run makes for the goal's fields (what a
    forger can compute), the ledger's message, unless the event, writer or process lie."""
    moment = datetime.now(UTC).replace(microsecond=0)
    run = runs.new_run("forged-9", description=event["description"],
                       criteria=event["criteria"], constraints=event["constraints"],
                       risk=event["risk"], owner=event["owner"], now=moment,
                       budget=event["budget"])
    return _write_run(w, "forged-9", None, run, message("start", "forged-9", event, writer,
                                                        None, process),
                      int(moment.timestamp()))


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
    # goal_created: fields the ledger never records, a junk budget, a goal too big to start
    "goal-extra-fields": (lambda w: _goal_commit(w, {**GOAL, "admin": True,
                                                     "note": "\u202eevil"}), "run.invalid"),
    "goal-budget-junk": (lambda w: _goal_commit(w, {**GOAL, "budget": {
        "max_iterations": 3, "junk": {"x": 1}}}), "run.invalid"),
    "goal-block-too-large": (lambda w: _goal_commit(w, {**GOAL, "description": "d" * 900,
                                                        "criteria": [c * 900 for c in "cefg"]}),
                             "run.block_too_large"),
    # trailers the ledger never writes: a writer that is no role, a process that is not
    # session_id's shape (hidden characters, 100 KB), on the first commit or a later one
    "goal-writer-root": (lambda w: _goal_commit(w, GOAL, writer="root\u200b"), "run.writer"),
    "goal-process-bidi": (lambda w: _goal_commit(w, GOAL, process="\u202e sess \u200b"),
                          "run.process"),
    "event-process-huge": (lambda w: _run_commit(w, {"type": "question_opened",
                                                     "question": "why?"}, when=w.at(3),
                                                 process="x" * 100_000), "run.process"),
}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("attack", sorted(RUN_ATTACKS))
def test_pull_refuses_a_forged_run_event(world: World, transport: str, attack: str) -> None:
    make, rule = RUN_ATTACKS[attack]
    with StateRepo(world.b) as repo:
        repo.remote.pull()
    make(world)
    before = Snapshot(world.b)
    with served(transport, world.bare) as url, StateRepo(world.b) as repo:
        repo.store.set_remote_url(url)
        with pytest.raises(GitStateError) as err:
            repo.remote.pull()
        assert err.value.rule == "remote.run_invalid", err.value.message
        assert f"[{rule}]" in err.value.message, err.value.message
        assert repo.runs.read(RUN).state["awaiting_approval"] == "pay"
    before.unchanged()


@pytest.mark.parametrize("attack", sorted(RUN_ATTACKS))
def test_the_hook_refuses_a_forged_run_event(world: World, attack: str) -> None:
    make, rule = RUN_ATTACKS[attack]
    server = world.guarded()
    forged = make(world)
    [ref] = git(world.bare, "for-each-ref", "--format=%(refname)", "--points-at", forged,
                PREFIX).stdout.split()
    out = world.push_to(server, f"{forged}:{ref}")
    assert out.returncode != 0 and f"[{rule}]" in out.stderr, out.stderr


def test_the_ledger_refuses_the_goals_the_replay_refuses(world: World) -> None:
    """A local start refuses the goals above as the replay does, by the same code."""
    for event, rule in (({**GOAL, "budget": {"max_iterations": 3, "junk": 1}}, "run.invalid"),
                        ({**GOAL, "description": "d" * 900,
                          "criteria": [c * 900 for c in "cefg"]}, "run.block_too_large")):
        with pytest.raises(RunRefused) as err:
            world.a.runs.start("local-9", reason="start",
                               **{k: v for k, v in event.items() if k != "type"})
        assert err.value.rule == rule


RUN_WRITERS = SCHEMA.replace("version: 1", "version: 2") + "runs:\n  writers:\n    cancelled: [runtime]\n"


def test_the_schemas_run_writers_hold_for_events_from_elsewhere(world: World) -> None:
    """schema.yaml narrows ``cancelled`` to the runtime: a human's cancel is refused here
    (run.writer), and so is one recorded elsewhere, by pull and by the hook — which checks
    it against the schema of the main pushed with it, in the same push."""
    server = world.guarded()  # holds the schema before the narrowing
    world.a.set_schema(RUN_WRITERS, "only the runtime cancels")
    world.a.push()
    with StateRepo(world.b) as repo:
        repo.remote.pull()
    with world.human() as human, pytest.raises(RunRefused) as err:
        human.runs.event(RUN, {"type": "cancelled", "reason": "stop"}, "stop it")
    assert err.value.rule == "run.writer"
    forged = _run_commit(world, {"type": "cancelled", "reason": "stop"}, when=w_now(),
                         writer="human")
    before = Snapshot(world.b)
    with StateRepo(world.b) as repo, pytest.raises(GitStateError) as pulled:
        repo.remote.pull()
    assert pulled.value.rule == "remote.run_invalid" and "[run.writer]" in \
        pulled.value.message, pulled.value.message
    before.unchanged()
    out = subprocess.run([GIT or "git", "-C", str(world.bare), "push", str(server),
                          "main:main", f"{forged}:{PREFIX}{RUN}"], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode != 0 and "[run.writer]" in out.stderr, out.stderr
    assert git(server, "rev-parse", "main").stdout.strip() != _main(world)


def w_now() -> int:
    return int(time.time())


def test_a_spent_approval_releases_no_run_here_or_from_elsewhere(world: World) -> None:
    """The human approves and the runtime spends the approval without recording it in the
    run: it releases the waiting run neither here nor from elsewhere (run.approval_spent),
    judged at the main commit the event cites."""
    server = world.guarded()
    world.clock.advance(hours=1)
    with world.human() as human:
        human.approvals.approve(world.approval, "the order checks out")
    world.clock.advance(minutes=1)
    world.a.approvals.consume(world.approval, "refund", ARGS)
    world.a.push()
    with StateRepo(world.b) as repo:
        repo.remote.pull()
    with pytest.raises(RunRefused) as err:
        world.a.runs.event(RUN, _recorded(world.approval), "released by a spent approval")
    assert err.value.rule == "run.approval_spent"
    forged = _run_commit(world, _recorded(world.approval, main_commit=_main(world)),
                         when=world.at(1.5))
    before = Snapshot(world.b)
    with StateRepo(world.b) as repo, pytest.raises(GitStateError) as pulled:
        repo.remote.pull()
    assert "[run.approval_spent]" in pulled.value.message, pulled.value.message
    before.unchanged()
    out = subprocess.run([GIT or "git", "-C", str(world.bare), "push", str(server),
                          "main:main", f"{forged}:{PREFIX}{RUN}"], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode != 0 and "[run.approval_spent]" in out.stderr, out.stderr


def test_main_and_a_run_citing_it_pass_the_hook_in_one_push(world: World) -> None:
    """Honest: the run's approval_recorded cites a main commit the new server receives in
    the same push; the hook checks the run against main as the push leaves it."""
    server = world.tmp / "srv" / "fresh.git"
    subprocess.run([GIT or "git", "init", "-q", "--bare", "-b", "main", str(server)],
                   check=True)
    install_pre_receive(server, world.tmp)
    world.clock.advance(hours=1)
    with world.human() as human:
        human.approvals.approve(world.approval, "the order checks out")
    world.clock.advance(minutes=1)
    world.a.runs.event(RUN, _recorded(world.approval), "the operator approved")
    out = git(world.a.state_dir, "push", str(server), "main", f"{PREFIX}{RUN}")
    assert out.returncode == 0, out.stderr
    assert git(server, "rev-parse", f"{PREFIX}{RUN}").stdout.strip() == \
        world.a.store.ref(PREFIX + RUN)


def test_honest_decisions_and_their_run_event_pass_pull_and_the_hook(world: World) -> None:
    """The control: the human approves on A, A's runtime records it in the run (the ledger
    cites main's commit), A pushes through the hook, B pulls all of it and can promote."""
    server = world.guarded()
    world.a.store.set_remote_url(str(server))
    world.clock.advance(hours=1)
    with world.human() as human:
        human.approvals.approve(world.approval, "the order checks out")
    world.clock.advance(minutes=1)
    view = world.a.runs.event(RUN, _recorded(world.approval), "the operator approved")
    assert view.next["action"] == "continue"
    recorded = world.a.runs.read(RUN)
    assert recorded.state["approval_refs"] == [world.approval]
    pushed = world.a.push()
    assert pushed.runs["pushed"] == [RUN], pushed.runs
    world.clock.advance(minutes=1)
    world.a.approvals.consume(world.approval, "refund", ARGS)  # linearized: pushed at once
    assert git(server, "rev-parse", "main").stdout.strip() == world.a.head()
    with StateRepo(world.b) as repo:
        repo.store.set_remote_url(str(server))
        pulled = repo.remote.pull()
        assert pulled.runs["pulled"] == [RUN]
        assert repo.runs.read(RUN).next["action"] == "continue"
        assert repo.runs.verify(RUN) == []


# -- refusal journals: the same clock rule --------------------------------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
def test_pull_refuses_a_journal_dated_ahead(world: World, transport: str) -> None:
    """A new journal whose one record is dated, and committed, a day ahead of the
    receiver's clock."""
    from tests.history.test_refusals import _forge

    with StateRepo(world.b) as repo:
        repo.remote.pull()
    ahead = datetime.fromtimestamp(int(time.time()) + 86400, UTC)
    git(world.bare, "update-ref", "refs/gitstate/refusals/00000000000000aa",
        _forge(world.bare, None, time=format_time(ahead)))
    before = Snapshot(world.b)
    with served(transport, world.bare) as url, StateRepo(world.b) as repo:
        repo.store.set_remote_url(url)
        with pytest.raises(GitStateError) as err:
            repo.remote.pull()
        assert err.value.rule == "remote.refusals_invalid", err.value.message
        assert "[time.future]" in err.value.message, err.value.message
    before.unchanged()


def _journal_lie(w: World, **fields: Any) -> str:
    from tests.history.test_refusals import _forge

    now = int(time.time())
    lie: dict[str, Any] = {}
    record = {"time": format_time(datetime.fromtimestamp(now, UTC)), "rule": "schema.range",
              "op": "set", "key": "stop_loss", "attempted": 1, "actor": "human",
              "writer": "human", "reason": "x"}
    for name in ("data", "message", "when"):
        if name in fields:
            lie[name] = fields.pop(name)
    return _forge(w.bare, None, lie=lie, **{**record, **fields})


def _summary_forged(w: World) -> str:
    from gitstate.history import refusalrecord

    entry = {**dict.fromkeys(refusalrecord.FIELDS), "time": format_time(datetime.now(UTC)),
             "rule": "schema.range", "op": "set", "key": "stop_loss", "attempted": 1,
             "actor": "human", "writer": "human", "reason": "x"}
    _data, msg, _when = refusalrecord.written(entry, 1, None, None)
    msg = msg.replace(b"refused set of stop_loss: schema.range",
                      b"refused consume of approval.c218a5e976a1: approval.expired")
    return _journal_lie(w, message=msg.replace(b"Gitstate-Seq: 1", b"Gitstate-Seq: 777"),
                        time=entry["time"])


def _true_for_one(w: World) -> str:
    from gitstate.history import refusalrecord

    entry = {**dict.fromkeys(refusalrecord.FIELDS), "time": format_time(datetime.now(UTC)),
             "rule": "schema.range", "op": "set", "key": "stop_loss", "attempted": 1,
             "actor": "human", "writer": "human", "reason": "x"}
    data = refusalrecord.written({**entry, "attempted": True}, 1, None, None)[0]
    return _journal_lie(w, data=data, time=entry["time"])


JOURNAL_ATTACKS = {
    # a record pinned to the top of every listing: its time is not its commit's
    "time-far-ahead-of-commit": (lambda w: _journal_lie(w, time="8999-12-31T23:59:59Z",
                                                        when=int(time.time())),
                                 "refusals.rederive"),
    "time-date-only": (lambda w: _journal_lie(w, time="2026-12-03"), "refusals.bad_record"),
    "attempted-unclipped": (lambda w: _journal_lie(w, attempted="A" * 30_000),
                            "refusals.rederive"),
    "summary-and-seq-forged": (_summary_forged, "refusals.rederive"),
    "json-true-for-1": (_true_for_one, "refusals.rederive"),
}
JOURNAL = "refs/gitstate/refusals/00000000000000aa"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("attack", sorted(JOURNAL_ATTACKS))
def test_pull_refuses_a_journal_record_the_journal_would_not_write(
        world: World, transport: str, attack: str) -> None:
    make, rule = JOURNAL_ATTACKS[attack]
    with StateRepo(world.b) as repo:
        repo.remote.pull()
    git(world.bare, "update-ref", JOURNAL, make(world))
    before = Snapshot(world.b)
    with served(transport, world.bare) as url, StateRepo(world.b) as repo:
        repo.store.set_remote_url(url)
        with pytest.raises(GitStateError) as err:
            repo.remote.pull()
        assert err.value.rule == "remote.refusals_invalid", err.value.message
        assert f"[{rule}]" in err.value.message, err.value.message
    before.unchanged()


@pytest.mark.parametrize("attack", sorted(JOURNAL_ATTACKS))
def test_the_hook_refuses_a_journal_record_the_journal_would_not_write(
        world: World, attack: str) -> None:
    make, rule = JOURNAL_ATTACKS[attack]
    server = world.guarded()
    forged = make(world)
    out = world.push_to(server, f"{forged}:{JOURNAL}")
    assert out.returncode != 0 and f"[{rule}]" in out.stderr, out.stderr


def test_an_honest_journal_passes_pull_and_the_hook(world: World) -> None:
    """The control: A's own refusals (an attempt clipped, a clock that stepped back)
    re-derive, through the hook and on B."""
    from gitstate.history import refusals

    server = world.guarded()
    world.a.store.set_remote_url(str(server))
    with contextlib.suppress(GitStateError):
        world.a.set("approval.x", {f"k{n}": "A" * 900 for n in range(3)}, "reserved")
    world.clock.advance(hours=-2)
    with contextlib.suppress(GitStateError):
        world.a.set("approval.y", 1, "stepped back")
    assert "refusals_not_pushed" not in world.a.push().runs
    assert refusals.problems(world.a.store) == []
    newer, older = refusals.entries(world.a.store)
    assert list(older["attempted"]) == ["clipped"] and newer["time"] < older["time"]
    assert world.a.store.commit_times(newer["commit"]) == \
        world.a.store.commit_times(older["commit"])  # dated the parent's: never back
    with StateRepo(world.b) as repo:
        repo.store.set_remote_url(str(server))
        repo.remote.pull()
        assert len([e for e in refusals.entries(repo.store)
                    if e.get("origin") != "local" and not e.get("damaged")]) == 2
