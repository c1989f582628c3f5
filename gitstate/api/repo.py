"""``StateRepo``: the facade over one agent's working state, and the Python API.

Adapters (the CLI, the MCP server, hooks) and users call this class; it validates the
inputs (``rules``), turns each operation into a planner (``planners``, ``revert``) and hands
it to the write engine (``engine``), which owns the one write path. Reads go through the
shared ``StateReader``. What is specific to main's working tree is wired here:
``MainTree`` (recovery, the working tree, the projection, the schema cache).

Capabilities beyond the key table are namespaces, each built on first use from the parts
it needs: ``repo.approvals`` (gitstate/api/approvals.py), ``repo.runs``
(gitstate/api/runs.py) and ``repo.remote`` (gitstate/api/remote.py). Opening a repository
builds the store, the reader, the main tree and the write engine, nothing else; the
methods that moved into a namespace still answer, with a DeprecationWarning."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import rules
from ..core.errors import UsageError
from ..core.model import State, Value
from ..core.records import HistoryEntry
from ..core.results import (
    DiscardResult,
    SchemaReport,
    StateView,
    WriteResult,
)
from ..core.schema import WRITERS, Schema
from ..core.schemafile import parse_schema
from ..history.projection import Projection
from ..history.reader import StateReader
from ..history.redact import redactor
from ..moved import Moved
from ..system import clock as clockbase
from ..system.config import Config, load_config
from ..write import maintenance, planners, requests
from ..write.engine import WriteEngine
from ..write.maintree import MainTree
from ..write.planners import UNSET, Expected
from . import create, views

if TYPE_CHECKING:
    from .approvals import Approvals
    from .observations import Observations
    from .remote import RemoteSide
    from .runs import Runs

HISTORY_IN_GET = 20


__all__ = ["HISTORY_IN_GET", "UNSET", "StateRepo"]


class StateRepo:
    """One agent's working state: ``<agent_dir>/state`` plus ``<agent_dir>/config.toml``.

    ``writer`` is the schema's writer kind of every call through this object: ``agent``
    (the MCP server), ``runtime`` (the Python API) or ``human`` (the CLI)."""

    def __init__(
        self,
        agent_dir: str | Path,
        *,
        actor: str | None = None,
        writer: str = "runtime",
        clock: Callable[[], datetime] | None = None,
        config: Config | None = None,
        signing_key: str | Path | None = None,
    ) -> None:
        if writer not in WRITERS:
            raise UsageError(f"writer must be one of {', '.join(WRITERS)}", rule="usage.writer")
        self.writer = writer
        self.agent_dir = Path(agent_dir)
        self.state_dir = create.state_dir_of(self.agent_dir)
        self.config = config if config is not None else load_config(self.agent_dir)
        self.actor = rules.check_actor(actor or writer)
        self.store = create.open_store(self.state_dir, self.config, signing_key)
        self.projection = Projection(self.state_dir)
        self.reader = StateReader(self.state_dir, self.store, self.projection)
        self.tree = MainTree(self.reader)
        self.engine = WriteEngine(self.reader, self.config,
                                  clock or clockbase.TrustedClock(self.store.git_dir),
                                  recover=self.tree.recover, writer=writer,
                                  hooks=[self.tree.after_commit, functools.partial(
                                      maintenance.after_commit, self.store,
                                      self.agent_dir, self.config)],
                                  after_unlock=[self.store.consolidate])
        if self.config.sync == "remote-first":  # every write commits through the remote
            self.engine.committer = self.remote.main
        self.tree.repair_on_open()

    # -- capabilities, each built on first use ----------------------------------------------

    @functools.cached_property
    def approvals(self) -> Approvals:
        """Frozen-argument approvals: request, approve, deny, list, verdict, spend."""
        from .approvals import Approvals

        return Approvals(self.reader, self.store, self.engine, writer=self.writer,
                         actor=self.actor, committer=lambda: self.remote.main,
                         ledger=lambda: self.runs)

    @functools.cached_property
    def runs(self) -> Runs:
        """The run ledgers (refs/heads/runs/*, never main) and promotion to the key table."""
        from .runs import Runs

        return Runs(self.store, self.config, self.reader, self.engine, writer=self.writer,
                    actor=self.actor)

    @functools.cached_property
    def remote(self) -> RemoteSide:
        """Main's remote: push, pull, status, and LangGraph threads when asked."""
        from .remote import RemoteSide

        return RemoteSide(self.store, self.reader, self.engine, self.tree, self.config)

    @functools.cached_property
    def observations(self) -> Observations:
        """Runtime functions turning observations into state updates (one commit each)."""
        from .observations import Observations

        return Observations(self.engine, writer=self.writer, actor=self.actor)

    request_approval = Moved("approvals.request")
    approve = Moved("approvals.approve")
    deny = Moved("approvals.deny")
    approval_verdict = Moved("approvals.verdict")
    consume_approval = Moved("approvals.consume")
    spend_approval = Moved("approvals.spend")
    promote = Moved("runs.promote")
    push_threads = Moved("remote.push_threads")
    pull_threads = Moved("remote.pull_threads")
    register_observation = Moved("observations.register")
    apply_observation = Moved("observations.apply")
    push = Moved("remote.push")
    pull = Moved("remote.pull")
    sync_status = Moved("remote.status")

    @property
    def durability(self) -> str:
        """The durability mode in force (``auto`` resolved for this file system)."""
        return self.store.flush.mode

    @classmethod
    def init(cls, agent_dir: str | Path, *, actor: str | None = None, writer: str = "runtime",
             clock: Callable[[], datetime] | None = None,
             config: Config | None = None,
             signing_key: str | Path | None = None) -> StateRepo:
        """Create ``<agent_dir>/state`` with a first commit; idempotent on an existing one,
        and it finishes an init that was interrupted (killed, disk full). Parallel inits of
        one directory take turns and all end with the same repository."""
        config = config or load_config(Path(agent_dir))
        create.init(Path(agent_dir), config, rules.check_actor(actor or writer), clock)
        return cls(agent_dir, actor=actor, writer=writer, clock=clock, config=config,
                   signing_key=signing_key)

    @classmethod
    def clone(cls, url: str, agent_dir: str | Path, *, writer: str = "runtime") -> StateRepo:
        """A new agent directory from an existing remote state repository; every remote
        commit is checked like a local write first (gitstate/accept/)."""
        from ..remote.sync import clone

        remote = clone(url, Path(agent_dir))
        repo = cls(agent_dir, writer=writer)
        repo.rebuild_history()
        repo.tree.write_schema_cache(remote)
        return repo

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> StateRepo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading --------------------------------------------------------------------------

    def now(self) -> datetime:
        return self.engine.now()

    def head(self) -> str:
        return self.reader.head()

    def state_at(self, commit: str) -> State:
        return self.reader.state_at(commit)

    def state(self) -> State:
        """The state at HEAD (never the working tree)."""
        return self.reader.state_at(self.head())

    def schema_at(self, commit: str) -> Schema | None:
        """The schema committed at ``commit``, or None when the repository has none."""
        return self.reader.schema_at(commit)

    def schema(self) -> Schema | None:
        return self.reader.schema_at(self.head())

    def allowed_tools(self, commit: str | None = None) -> list[str] | None:
        """The tools the current phase allows; None when the schema declares no phases."""
        return views.allowed_tools(self.reader, self.engine, commit)

    def can_run(self, tool: str, args: Any = None) -> bool:
        """Whether ``tool`` is legal now: the current phase allows it (always, without
        phases in the schema), and, for a tool schema.yaml's ``approvals`` names, an
        approval of exactly ``args`` exists, unexpired and unconsumed. Advisory: an answer
        from HEAD as it is now, which another process or clone may spend a moment later;
        run an approved call with ``repo.approvals.spend``, which hands it over only to the
        spend that won."""
        allowed = self.allowed_tools()
        return (allowed is None or tool in allowed) and (
            tool not in self.approvals.policies()
            or (args is not None and self.approvals.verdict(tool, args).ok))

    def check_schema(self, candidate: Schema | None = None) -> SchemaReport:
        """Violations of HEAD's schema (or of ``candidate``, before setting it): live ones
        (refused at write time, so never for HEAD's) and expired ones (kept, not injected)."""
        return views.schema_report(self.reader, self.engine, candidate)

    def worktree_warnings(self) -> list[str]:
        return self.reader.worktree_warnings()

    def history(self, n: int = HISTORY_IN_GET) -> list[HistoryEntry]:
        """The newest ``n`` changes, newest first (the projection, caught up in memory)."""
        mark, head = self.reader.snapshot()
        return [HistoryEntry.of(r) for r in self.reader.recent(head, n, mark)[0]]

    def history_iter(self, contains: bytes | None = None) -> Iterator[HistoryEntry]:
        """Every change newest first (``contains``: only lines with these bytes)."""
        return map(HistoryEntry.of, self.reader.history_iter(contains))

    def full_history(self) -> list[HistoryEntry]:
        """Every change, oldest first."""
        return [HistoryEntry.of(r) for r in self.reader.full_history()]

    def rebuild_history(self) -> int:
        """Rewrite the projection from git alone (also accepts a rewritten branch)."""
        with self.engine.locked():
            return create.rebuild_history(self.projection, self.store, self.head())

    def get(self, now: datetime | None = None, history: int = HISTORY_IN_GET,
            commit: str | None = None) -> StateView:
        """Everything: keys (expired marked), handoff, recent history, HEAD, count, cap.
        With ``commit``, the state as of that commit (``--at``)."""
        return views.state_view(self.reader, self.engine, self.config, now, history, commit)

    def render(self, now: datetime | None = None, locale: str | None = None,
               commit: str | None = None, max_chars: int | None = None,
               set_tool: str | None = None, get_tool: str | None = None) -> str:
        """The section for a wake-up at ``now`` (of the state at ``commit``, default HEAD);
        empty when injection is disabled. With ``max_chars`` (a runtime's budget), a section
        that would be longer has its handoff line replaced by a pointer to it
        (``render.fit``); key lines are never cut. ``set_tool`` / ``get_tool``: the tools
        it names (default: [gitstate] set_tool / get_tool)."""
        return views.section(self.reader, self.engine, self.config, now, locale, commit,
                             max_chars, set_tool, get_tool)

    # -- writing --------------------------------------------------------------------------

    def set(self, key: str, value: Value, reason: str, *, ttl_hours: float | None = None,
            expected: Expected = UNSET, actor: str | None = None,
            request_id: str | None = None) -> WriteResult:
        """Set one key. ``expected`` (a value, or None for "absent") is checked against HEAD.
        A retried ``request_id`` returns the first result without a second commit."""
        key = rules.check_key(key)
        value = rules.check_value(value, key)
        reason = rules.check_reason(reason)
        ttl = rules.check_ttl(ttl_hours)
        if expected is not UNSET and expected is not None:
            expected = rules.check_value(expected, f"expected {key}")
        who = rules.check_actor(actor or self.actor)
        hashed = redactor(self.state_dir / ".git", self.schema(), key)
        if hashed is not None:  # sensitive: redact — only the keyed hash is stored
            value = hashed(value)
            expected = hashed(expected) if expected not in (UNSET, None) else expected
        request = requests.fingerprint(request_id, "set", key, value, reason, ttl,
                                       None if expected is UNSET else ["expected", expected])
        return self.engine.write(lambda base: planners.plan_set(
            base, self.writer, key=key, value=value, reason=reason, ttl=ttl,
            expected=expected, actor=who), request, attempt=_attempt(
                "set", key, value, expected, who, reason, request_id))

    def clear(self, key: str, reason: str, *, expected: Expected = UNSET,
              actor: str | None = None, request_id: str | None = None) -> WriteResult:
        """Retire one key; its history stays in the log."""
        key = rules.check_key(key)
        reason = rules.check_reason(reason)
        if expected is not UNSET and expected is not None:
            expected = rules.check_value(expected, f"expected {key}")
        who = rules.check_actor(actor or self.actor)
        request = requests.fingerprint(request_id, "clear", key, reason,
                                       None if expected is UNSET else ["expected", expected])
        return self.engine.write(lambda base: planners.plan_clear(
            base, self.writer, key=key, reason=reason, expected=expected, actor=who), request,
            attempt=_attempt("clear", key, None, expected, who, reason, request_id))

    def handoff(self, note: str | None = None, *, status: str | None = None,
                next_steps: str | None = None, evidence: str | None = None,
                blocker: str | None = None, reason: str | None = None,
                actor: str | None = None, request_id: str | None = None) -> WriteResult:
        """Overwrite the handoff note (plain or structured, seed 000's rules)."""
        checked = rules.check_handoff(
            note, status, next_steps, evidence, blocker,
            plain_max_chars=self.config.handoff_plain_max_chars,
            max_bytes=self.config.handoff_max_bytes)
        who = rules.check_actor(actor or self.actor)
        text = rules.check_reason(reason if reason is not None
                                  else planners.handoff_reason(checked))
        request = requests.fingerprint(request_id, "handoff", note, status, next_steps,
                                       evidence, blocker)
        return self.engine.write(lambda base: planners.plan_handoff(
            base, checked, reason=text, actor=who), request)

    def revert(self, commit: str, reason: str, *, force: bool = False,
               actor: str | None = None, request_id: str | None = None) -> WriteResult:
        """Undo what ``commit`` changed, as one new commit; refused where the keys no longer
        hold that commit's values, unless ``force``."""
        from ..write.revert import plan_revert

        reason = rules.check_reason(reason)
        who = rules.check_actor(actor or self.actor)
        info, before, after = self.reader.around(commit)
        return self.engine.write(lambda base: plan_revert(
            base, info, before, after, reason=reason, actor=who, force=force),
            requests.fingerprint(request_id, "revert", commit, reason, force))

    def adopt(self, reason: str, *, actor: str | None = None) -> WriteResult:
        """Turn a hand edit of working_state.json into one audited commit, validated like
        any write."""
        from ..write.revert import plan_adopt

        who = rules.check_actor(actor or self.actor)
        reason = rules.check_reason(reason)
        return self.engine.write(lambda base: plan_adopt(
            base, self.tree.edited(), self.config, reason=reason, actor=who), adopting=True)

    def discard(self) -> DiscardResult:
        """Move a hand edit of working_state.json aside (kept under .git) and restore the
        file to HEAD."""
        with self.engine.locked():
            return self.tree.discard()

    def set_schema(self, text: str, reason: str, *, request_id: str | None = None,
                   actor: str | None = None) -> WriteResult:
        """Commit a new schema.yaml (audited); refused if the live state breaks it."""
        schema = parse_schema(text)
        reason = rules.check_reason(reason)
        who = rules.check_actor(actor or self.actor)
        return self.engine.write(lambda base: planners.plan_schema(
            base, schema, text, reason=reason, actor=who),
            requests.fingerprint(request_id, "schema", text, reason))


def _attempt(op: str, key: str, value: Value | None, expected: Expected, actor: str,
             reason: str, request_id: str | None) -> dict[str, Any]:
    """What the refusal journal keeps of a write a rule refuses."""
    return {"op": op, "key": key, "attempted": value, "actor": actor, "reason": reason,
            "expected": None if expected is UNSET else {"value": expected},
            "request_id": request_id}
