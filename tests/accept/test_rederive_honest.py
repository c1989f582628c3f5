"""The one rule never refuses honest work: random sequences of local operations in every
namespace — sets with and without a TTL, clears, handoffs, schema changes, approvals
requested, approved, denied and spent, run events (approvals recorded included), refused
writes that land in the refusal journal, a clock that steps back — on one clone, pushed
through the real pre-receive hook, cloned by a second clone that goes on with its own
sequence, pushed back and pulled by the first. Every commit re-derives: main from its root
(foreign.check_range), every run from its first event (runcheck.replay_problems, as a
foreign ledger) and the journal (refusals.check_update), on both clones."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitstate.accept import main as foreign
from gitstate.accept.trust import Trust
from gitstate.api.repo import StateRepo
from gitstate.core.errors import GitStateError
from gitstate.core.layout import JOURNAL_REF
from gitstate.history import refusals
from gitstate.runs.check import replay_problems
from gitstate.runs.format import PREFIX
from tests.helpers import GIT, Clock, SigningKeys, install_pre_receive, trust_remote

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(GIT is None, reason="needs the git CLI for the remote")]

SCHEMAS = [
    "version: 1\nunknown_keys: allow\napprovals:\n  refund: {writers: [human], ttl_hours: 24}\n"
    "  wire: {writers: [runtime, human]}\n",
    "version: 2\nunknown_keys: allow\napprovals:\n  refund: {writers: [human], ttl_hours: 2}\n"
    "  wire: {writers: [runtime, human], ttl_hours: 0.5}\n",
]
OPS = ["set", "set_ttl", "clear", "handoff", "schema", "request", "approve", "deny",
       "consume", "run_start", "run_question", "run_answer", "run_side_effect",
       "run_approval", "refused", "later", "clock_back"]
STEPS = st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 5)), min_size=4, max_size=18)


class Agent:
    """One clone: its runtime and its human, sharing a clock that starts days back."""

    def __init__(self, repo: StateRepo, clock: Clock, human_key: Path | None = None) -> None:
        self.rt, self.clock = repo, clock
        self.human = StateRepo(repo.agent_dir, writer="human", actor="operator", clock=clock,
                               signing_key=human_key)

    def close(self) -> None:
        self.human.close()
        self.rt.close()

    def act(self, op: str, n: int) -> None:
        rt, human = self.rt, self.human
        self.clock.advance(minutes=7)
        pending = [a["id"] for a in rt.approvals.list() if a["status"] == "pending"]
        approved = [a for a in rt.approvals.list() if a["status"] == "approved" and not a["expired"]]
        # a spent approval releases no run (run.approval_spent): the runtime records the rest
        decided = [a for a in rt.approvals.list() if a["status"] not in ("pending", "consumed")]
        runs = [r["run_id"] for r in rt.runs.listing()]
        run = runs[n % len(runs)] if runs else None
        try:
            if op == "set":
                rt.set(f"k.{n % 3}", n * 10 - 7, f"set {n}")
            elif op == "set_ttl":
                rt.set(f"t.{n % 2}", {"at": n, "why": "跌破 262"}, "with a ttl",
                       ttl_hours=0.5 + n)
            elif op == "clear" and f"k.{n % 3}" in rt.state().keys:
                rt.clear(f"k.{n % 3}", "not needed")
            elif op == "handoff":
                rt.handoff(f"note {n}: next, check k.{n % 3}")
            elif op == "schema":
                rt.set_schema(SCHEMAS[n % 2], f"schema {n % 2}")
            elif op == "request":
                rt.approvals.request("refund" if n % 2 else "wire", {"order": f"O-{n}"},
                                    "the customer asked")
            elif op == "approve" and pending:
                human.approvals.approve(pending[n % len(pending)], "checked")
            elif op == "deny" and pending:
                human.approvals.deny(pending[n % len(pending)], "no")
            elif op == "consume" and approved:
                a = approved[n % len(approved)]
                rt.approvals.consume(a["id"], a["tool"], a["args"])
            elif op == "run_start":
                rt.runs.start(f"run-{n}", description="a task", criteria=["done"],
                              risk="high" if n % 2 else "low", reason="start")
            elif op == "run_question" and run:
                rt.runs.event(run, {"type": "question_opened", "question": f"q{n}?"}, "ask")
            elif op == "run_answer" and run:
                rt.runs.event(run, {"type": "question_answered", "question": f"q{n}?",
                                    "evidence_ref": f"doc:{n}"}, "answered")
            elif op == "run_side_effect" and run:
                rt.runs.event(run, {"type": "step_started", "step_id": f"s{n}",
                                    "description": "pay", "side_effect": True}, "pay")
            elif op == "run_approval" and run and decided:
                a = decided[n % len(decided)]
                decision = "denied" if a["status"] == "denied" else \
                    "expired" if a["expired"] else "approved"
                rt.runs.event(run, {"type": "approval_recorded", "approval_id": a["id"],
                                    "decision": decision}, "recorded the decision")
            elif op == "refused":
                rt.set("k.0", 1, "a stale compare-and-swap", expected="never")
            elif op == "later":
                self.clock.advance(hours=3 + n)
            elif op == "clock_back":
                self.clock.advance(minutes=-30 * (n + 1))  # the writer clamps to the parent
        except GitStateError:
            pass  # a refusal of an honest attempt (recorded in the journal where it applies)


def _all_rederive(repo: StateRepo) -> None:
    store = repo.store
    head = repo.head()
    assert foreign.check_range(store, None, head, repo.config) == []
    schema = repo.schema()
    writers = dict(schema.run_writers) if schema else {}
    for name, run_head in store.refs_under(PREFIX).items():
        assert replay_problems(store, name, run_head, writers, main=head, foreign=True,
                               now=time.time(), trust=Trust.of(repo.config)) == [], name
    journal = store.ref(JOURNAL_REF)
    if journal:
        assert refusals.check_update(store, None, journal) == []


def _round_trip(first: list[tuple[str, int]], second: list[tuple[str, int]], *,
                signed: bool = False) -> dict[str, int]:
    """Both sequences, pushed and pulled; what A holds at the end (for the fixed case).
    ``signed``: every role claim is proved by a real SSH signature (each clone's runtime
    and the human have keys; clones and server verify by the allowed signers), else the
    clones and the server take their remote's claims (``trust_remote``)."""
    root = Path(tempfile.mkdtemp(prefix="gitstate-rederive-"))
    try:
        bare = root / "remote.git"
        subprocess.run([GIT or "git", "init", "-q", "--bare", "-b", "main", str(bare)],
                       check=True)
        install_pre_receive(bare, root, trust_remote=not signed)
        keys = SigningKeys(root / "keys", "runtime:a", "runtime:b", "human:alice") \
            if signed else None
        if keys:
            keys.config(root / "a", "runtime:a")
            subprocess.run([GIT or "git", "-C", str(bare), "config", "gitstate.allowedSigners",
                            str(keys.allowed)], check=True)
        else:
            trust_remote(root / "a")
        human_key = keys.keys["human:alice"] if keys else None
        start = datetime.now(UTC).replace(microsecond=0) - timedelta(days=20)
        clock_a = Clock(start)
        a = Agent(StateRepo.init(root / "a", clock=clock_a), clock_a, human_key)
        a.rt.set_schema(SCHEMAS[0], "tools that need a human")
        a.rt.store.set_remote_url(str(bare))
        for op, n in first:
            a.act(op, n)
        _all_rederive(a.rt)
        pushed = a.rt.push()  # through the real hook: the same rule on the server
        assert not pushed.runs.get("refused"), pushed.runs
        if keys:  # before the clone: it checks what it takes by B's own trust settings
            keys.config(root / "b", "runtime:b")
        else:
            trust_remote(root / "b")
        StateRepo.clone(str(bare), root / "b").close()
        clock_b = Clock(clock_a.now + timedelta(minutes=5))
        b = Agent(StateRepo(root / "b", clock=clock_b), clock_b, human_key)
        b.rt.pull()
        for op, n in second:
            b.act(op, n)
        _all_rederive(b.rt)
        back = b.rt.push()
        assert not back.runs.get("refused"), back.runs
        pulled = a.rt.pull()
        assert pulled.runs["diverged"] == [], pulled.runs
        _all_rederive(a.rt)
        held = {"commits": len(a.rt.full_history()),
                "recorded": sum(len(r.state["approval_refs"]) for r in
                                (a.rt.runs.read(x["run_id"]) for x in a.rt.runs.listing())),
                "consumed": sum(x["status"] == "consumed" for x in a.rt.approvals.list()),
                "journal": int(a.rt.store.ref(JOURNAL_REF) is not None)}
        a.close()
        b.close()
        return held
    finally:
        shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(first=STEPS, second=STEPS)
def test_honest_work_always_rederives_across_clones(first: list[tuple[str, int]],
                                                    second: list[tuple[str, int]]) -> None:
    _round_trip(first, second)


def test_every_namespace_in_one_honest_round_trip() -> None:
    """A fixed sequence that reaches every kind of commit, so the property above is known to
    cover them: an approval recorded in a high-risk run on each clone, spends, a refusal, a
    clock that stepped back, a schema change with other TTLs — and every claim signed."""
    first = [("request", 1), ("run_start", 1), ("run_side_effect", 1), ("approve", 0),
             ("run_approval", 0), ("consume", 0), ("refused", 0), ("clock_back", 2),
             ("set_ttl", 1), ("schema", 1), ("request", 2), ("handoff", 1), ("clear", 0)]
    second = [("deny", 0), ("set", 0), ("request", 3), ("run_start", 3),
              ("run_side_effect", 3), ("run_approval", 0), ("later", 30), ("request", 5),
              ("refused", 1), ("clock_back", 5), ("handoff", 2), ("clear", 0)]
    held = _round_trip(first, second, signed=True)
    assert held["recorded"] >= 2 and held["consumed"] >= 1 and held["journal"] == 1, held
