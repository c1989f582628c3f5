"""``repo.approvals``: request, decide, list, check and spend frozen-argument approvals
(gitstate/approvals/steps.py holds the rules).

A thin layer: it validates inputs with ``rules``, picks the policy from HEAD's schema, and
hands a pure planner to the write engine, like every other write of the facade. A spend,
an approval and a denial of an agent with a remote are committed through the remote
(gitstate/remote/sync.py's remote-first committer, whatever the sync mode), so each is the push with
lease: linearized there before the call is handed over or the decision returns.
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..approvals import steps as approvals
from ..approvals.steps import Spend, Verdict
from ..core import rules
from ..core.errors import GitStateError, InvalidInput, Refused, StoreError
from ..core.records import ApprovalRequest
from ..history import approvals as approval_life
from ..write import requests

if TYPE_CHECKING:
    from ..core.policy import ApprovalPolicy
    from ..core.results import WriteResult
    from ..history.reader import StateReader
    from ..runs.ledger import Ledger
    from ..store import GitStore
    from ..write.engine import Committer, WriteEngine
    from ..write.planners import Base, Plan


class Approvals:
    """The approvals of one opened repository (``repo.approvals``): built on first use from
    the parts it needs, the reader, store and engine of the opening, its writer kind and
    actor, the remote-first committer and the run ledgers (each fetched only when used)."""

    def __init__(self, reader: StateReader, store: GitStore, engine: WriteEngine, *,
                 writer: str, actor: str, committer: Callable[[], Committer],
                 ledger: Callable[[], Ledger]) -> None:
        self.reader, self.store, self.engine = reader, store, engine
        self.writer, self.actor = writer, actor
        self.committer, self.ledger = committer, ledger

    def __call__(self, finished: bool = True) -> builtins.list[dict[str, Any]]:
        """``repo.approvals()``, as before the namespace: :meth:`list`, with a warning."""
        from ..moved import deprecated

        deprecated("repo.approvals()", "repo.approvals.list()")
        return self.list(finished)

    def now(self) -> datetime:
        return self.engine.now()

    def policies(self, commit: str | None = None) -> dict[str, ApprovalPolicy]:
        """The approval policies of the schema at ``commit`` (default HEAD), by tool."""
        schema = self.reader.schema_at(commit or self.reader.head())
        return dict(schema.approvals) if schema else {}

    def request(self, tool: str, args: Any, reason: str, *,
                         actor: str | None = None,
                         request_id: str | None = None) -> ApprovalRequest:
        """Freeze ``tool(args)`` as a pending approval (one commit). Returns an
        :class:`ApprovalRequest`: the approval's id (a ``str``) with the commit, tool,
        arguments and reason. Only a tool the schema's ``approvals`` names can be
        requested."""
        tool = rules.check_key(tool)
        if not isinstance(args, dict):
            raise InvalidInput("a tool's arguments are a JSON object", rule="approval.args")
        args = rules.check_value(args, "args")
        reason = rules.check_reason(reason)
        who = rules.check_actor(actor or self.actor)
        request = requests.fingerprint(request_id, "approval.request", tool, args, reason)

        def plan(base: Base) -> Any:
            return approvals.plan_request_for(base, tool=tool, args=args, reason=reason,
                                              actor=who)

        result = self.engine.write(plan, request)
        assert result.key is not None
        return ApprovalRequest(result.key[len(approvals.PREFIX):], commit=result.commit,
                               tool=tool, args=args, reason=reason)

    def approve(self, approval_id: str, reason: str, *, actor: str | None = None,
                request_id: str | None = None) -> WriteResult:
        """Approve a pending approval (only a writer its policy names)."""
        return self._decide(approval_id, True, reason, actor, request_id)

    def deny(self, approval_id: str, reason: str, *, actor: str | None = None,
             request_id: str | None = None) -> WriteResult:
        """Deny a pending approval: the call it froze never runs."""
        return self._decide(approval_id, False, reason, actor, request_id)

    def _decide(self, approval_id: str, approve: bool, reason: str, actor: str | None,
                request_id: str | None) -> WriteResult:
        reason = rules.check_reason(reason)
        who = rules.check_actor(actor or self.actor)
        request = requests.fingerprint(request_id, "approval.decide", approval_id, approve,
                                       reason)
        writer = self.writer
        return self._linearized(lambda base: approvals.plan_decide(
            base, dict(base.schema.approvals) if base.schema else {}, writer,
            approval_id=approval_id, approve=approve, reason=reason, actor=who,
            finished=self._finished(base)), request, None)

    def _finished(self, base: Base) -> approval_life.Finished:
        """A retired approval's record, read back from the base's history."""
        return approval_life.finished_in(self.store, base.commit or None)

    def _linearized(self, plan: Callable[[Base], Plan], request: dict[str, str] | None,
                    tool: str | None) -> WriteResult:
        """A spend or a decision, linearized through the remote's main whatever the sync
        mode (the commit is the push with lease: of two clones, one wins and the other is
        refused with the winner's commit). No remote: a local write. A remote that cannot
        be reached refuses it (``approval.offline``), unless it is the spend of a tool whose
        policy says ``offline_spend: true``: then it commits here, at that risk."""
        from ..write.engine import LocalCommitter

        if self.store.remote_url() is None:
            return self.engine.write(plan, request)
        try:
            return self.engine.write(plan, request, committer=self.committer())
        except StoreError as exc:
            if exc.rule not in ("remote.unreachable", "remote.timeout"):
                raise
            policy = self.policies().get(tool) if tool else None
            if policy is None or not policy.offline_spend:
                raise Refused(f"the remote cannot be reached to linearize this "
                              f"{'spend' if tool else 'decision'} ({exc.message}), so another "
                              "clone could make it too; try again when it can"
                              + (f", or accept that risk with `offline_spend: true` in "
                                 f"schema.yaml's approvals policy for {tool}" if tool else ""),
                              rule="approval.offline") from exc
            return self.engine.write(plan, request, committer=LocalCommitter(self.reader))

    def list(self, finished: bool = True) -> builtins.list[dict[str, Any]]:
        """Every approval record, newest first: the live ones from the state and, with
        ``finished``, those denied, spent or expired and retired from it, as their last step
        in the history left them."""
        head = self.reader.head()
        state = self.reader.state_at(head)
        if finished:
            from ..core.model import State

            gone = {k: e for k, e in approval_life.history(self.reader.history_iter(
                contains=approvals.PREFIX.encode())).items() if k not in state.keys}
            state = State({**gone, **state.keys})
        return approvals.listing(state, self.engine.judged_now(head))

    def verdict(self, tool: str, args: Any) -> Verdict:
        """Whether ``tool(args)`` may run now as far as approvals go, and why not. Advisory:
        it reads HEAD as it is now; only :meth:`spend` decides who runs the call. It is
        judged at the time a spend on HEAD would be (``WriteEngine.judged_now``)."""
        head = self.reader.head()
        return approvals.can_run(self.reader.state_at(head), self.policies(head), tool, args,
                                 self.engine.judged_now(head))

    def consume(self, approval_id: str, tool: str | None = None, args: Any = None, *,
                         reason: str | None = None, actor: str | None = None,
                         request_id: str | None = None) -> WriteResult:
        """Spend an approval (one commit); given ``tool`` and ``args``, they must be exactly
        the approved call. A retry with the same ``request_id`` returns the first result; any
        other second consume is refused. The low-level step under :meth:`spend`, which
        is what a tool call uses: it runs the body only for the spend it won."""
        who = rules.check_actor(actor or self.actor)
        text = rules.check_reason(reason or f"run {tool or 'the approved call'} with approval "
                                  f"{approval_id}")
        request = requests.fingerprint(request_id, "approval.consume", approval_id, tool,
                                       args)
        return self._linearized(lambda base: approvals.plan_consume(
            base, approval_id=approval_id, tool=tool, args=args, reason=text, actor=who,
            state_at=self.reader.state_at, finished=self._finished(base)), request, tool)

    @contextlib.contextmanager
    def spend(self, approval_id: str, tool: str, args: Any, *,
                       run_id: str | None = None, tool_call_id: str | None = None,
                       reason: str | None = None,
                       actor: str | None = None) -> Iterator[Spend]:
        """``with repo.approvals.spend(approval_id, tool, args) as call:`` enters only once
        the approval's consume commit is written (the compare-and-swap on main, pushed with
        lease when the agent has a remote, whatever the sync mode) and hands over the frozen
        call (``call.tool``, ``call.args``); otherwise it raises the refusal, so the body
        never runs for an approval it did not win (a lost race: ``approval.not_runnable``,
        naming the winner's commit). A remote that cannot be reached refuses the spend
        (``approval.offline``) unless the policy says ``offline_spend: true``.

        If the body raises, the outcome is recorded before the exception goes on: in the
        run ledger as a ``tool_result_recorded`` event when ``run_id`` is given (the run is
        checked to accept it before the spend), else on main as the approval's ``outcome``
        step. Either way the approval stays consumed: never lost silently, never reused."""
        call = self._spend(approval_id, tool, args, run_id, tool_call_id, reason, actor)
        try:
            yield call
        except BaseException as exc:
            try:
                self._record_failure(call, exc)
            except GitStateError as failed:
                exc.add_note(f"the failure could not be recorded ({failed.rule}: "
                             f"{failed.message}); approval {call.approval_id} stays consumed "
                             f"(commit {call.commit[:12]})")
            raise

    def _spend(self, approval_id: str, tool: str, args: Any, run_id: str | None,
               tool_call_id: str | None, reason: str | None, actor: str | None) -> Spend:
        tool = rules.check_key(tool)
        if not isinstance(args, dict):
            raise InvalidInput("a tool's arguments are a JSON object", rule="approval.args")
        args = rules.check_value(args, "args")
        who = rules.check_actor(actor or self.actor)
        text = rules.check_reason(reason or f"spend approval {approval_id}: run {tool}")
        call_id = None
        if run_id is not None:
            call_id = tool_call_id or f"spend-{approval_id}"
            self._check_run_accepts(run_id, call_id, approval_id)
        def plan(base: Base) -> Plan:
            return approvals.plan_consume(base, approval_id=approval_id, tool=tool, args=args,
                                          reason=text, actor=who, state_at=self.reader.state_at,
                                          finished=self._finished(base))

        try:
            result = self._linearized(plan, None, tool)
        except Refused as exc:
            if exc.rule == "approval.not_runnable" and exc.details.get("status") == "consumed":
                raise self._lost(approval_id, exc) from None
            if exc.rule == "approval.void" and exc.details.get("key"):
                raise self._voided(exc) from None
            raise
        assert result.key is not None and result.commit is not None and result.new is not None
        value = result.new.value
        assert isinstance(value, dict)
        text_args, digest = approvals.frozen(value["args"])
        return Spend(result.key[len(approvals.PREFIX):], tool, text_args, digest,
                     result.commit, who, run_id, call_id)

    def _lost(self, approval_id: str, exc: Refused) -> Refused:
        """The refusal of a spend that lost: the winner's consume commit and actor."""
        key = approval_id if approvals.is_approval_key(approval_id) \
            else approvals.PREFIX + approval_id
        winner = None
        for rec in self.reader.history_iter(contains=key.encode()):
            old, new = rec.get("old"), rec.get("new")
            if rec.get("key") == key and isinstance(new, dict) and isinstance(old, dict) \
                    and old.get("status") == "approved" and new.get("status") == "consumed":
                winner = rec["commit"]
                break
        by = exc.details.get("consumed_by")
        return Refused(f"{exc.message}: spent by {by or 'another writer'}"
                       + (f" in commit {winner[:12]}" if winner else "")
                       + "; the call was not handed over", rule=exc.rule,
                       **{**exc.details, "winner": winner})

    def _voided(self, exc: Refused) -> Refused:
        """A void refusal, naming the commit that changed the key since the decision."""
        key, seen = exc.details["key"], exc.details.get("decided_on")
        changed_in = None
        for rec in self.reader.history_iter():
            if rec["commit"] == seen or rec["parent"] is None:
                break
            after = self.reader.state_at(rec["commit"]).keys.get(key)
            before = self.reader.state_at(rec["parent"]).keys.get(key)
            if (after.value if after else None) != (before.value if before else None):
                changed_in = rec["commit"]
                break
        message = exc.message if changed_in is None else exc.message.replace(
            " changed since", f" changed in {changed_in[:12]} since", 1)
        return Refused(message, rule=exc.rule, **{**exc.details, "changed_in": changed_in})

    def _check_run_accepts(self, run_id: str, call_id: str, approval_id: str) -> None:
        """Before the spend: the run would accept this call's result (it exists, is not
        stopped, waits for no approval, has not recorded the call)."""
        from ..runs import model as runs

        ledger = self.ledger()
        view = ledger.read(run_id)
        writers, _main = ledger.policy()
        runs.apply_event({"format": runs.FORMAT, "goal": view.goal.to_dict(), "state": view.state},
                         _result_event(call_id, approval_id, self.now()), self.writer,
                         self.now(), writers=writers)

    def _record_failure(self, call: Spend, exc: BaseException) -> None:
        error = _error_text(exc)
        reason = rules.check_reason(f"{call.tool} failed after approval {call.approval_id} "
                                    f"was spent in {call.commit[:12]}: {error}"[:2000])
        if call.run_id is not None:
            assert call.tool_call_id is not None
            self.ledger().event(call.run_id, _result_event(call.tool_call_id, call.approval_id,
                                                       self.now()), reason)
            return
        self.engine.write(lambda base: approvals.plan_outcome(
            base, approval_id=call.approval_id, error=error, reason=reason,
            actor=call.actor, finished=self._finished(base)))


def _result_event(call_id: str, approval_id: str, now: datetime) -> dict[str, Any]:
    from ..core.model import format_time

    return {"type": "tool_result_recorded", "tool_call_id": call_id,
            "evidence_ref": f"approval.{approval_id}:failed", "observed_at": format_time(now)}


def _error_text(exc: BaseException) -> str:
    """The error as the outcome keeps it: one line, bounded, each suspected secret withheld
    (gitstate/core/secretscan.py), and plain text the input rules accept; else its type alone."""
    from ..core.secretscan import scan
    from ..core.textsafe import inline

    text = inline(f"{type(exc).__name__}: {exc}")[:approvals.ERROR_MAX_CHARS]
    for _ in range(20):
        found = scan(text)
        if found is None:
            break
        text = text[:found.start] + "[withheld]" + text[found.end:]
    try:
        checked = rules.check_value(text, "error")
    except GitStateError:
        return type(exc).__name__
    return checked if isinstance(checked, str) else type(exc).__name__
