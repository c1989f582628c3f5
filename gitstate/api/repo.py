"""``StateRepo``: the facade over one agent's working state, and the Python API.

Adapters (the CLI, the MCP server, hooks) and users call this class; it validates the
inputs (``rules``), turns each operation into a planner (``planners``, ``revert``) and hands
it to the write engine (``engine``), which owns the one write path. Reads go through the
shared ``StateReader``. What is specific to main's working tree and to a remote is wired
here: ``MainTree`` (recovery, the working tree, the projection, the schema cache) and
``Remote`` (push, pull, remote-first commits), ``ThreadTravel`` (LangGraph threads)."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from ..accept import trust
from ..core import rules
from ..core.errors import InvalidInput, NotInitialized, Refused, StoreError, UsageError, disk_full
from ..core.layout import STATE_DIR, STATE_FILE, WRITTEN_DIRS, stray_files
from ..core.model import EMPTY, State, Value, format_time
from ..core.records import HistoryEntry
from ..core.render import fit, phase_lines, render, section_key_bytes
from ..core.results import (
    DiscardResult,
    KeyState,
    SchemaReport,
    StateView,
    SyncResult,
    SyncStatus,
    WriteResult,
)
from ..core.schema import WRITERS, Schema
from ..core.schemafile import parse_schema
from ..core.trailers import Change
from ..history.projection import Projection
from ..history.reader import StateReader
from ..remote.sync import Remote, clone
from ..runs import format as runformat
from ..store import GitStore, ref_names
from ..store.transport import limits_for
from ..system import clock as clockbase
from ..system import locking, safefile
from ..system.config import LOCALES, Config, load_config, resolve_tz
from ..threads.sync import ThreadTravel
from ..write import maintenance, planners, requests
from ..write.engine import WriteEngine, identity, tz_offset
from ..write.maintree import MainTree
from ..write.planners import UNSET, Base, Expected, Observation, Plan
from .approvals import ApprovalMethods
from .runs import RunMethods

HISTORY_IN_GET = 20

__all__ = ["HISTORY_IN_GET", "UNSET", "StateRepo"]


class StateRepo(ApprovalMethods, RunMethods, ThreadTravel):
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
        self.state_dir = self.agent_dir / STATE_DIR
        if not (self.state_dir / ".git").is_dir():
            raise NotInitialized(f"{self.agent_dir} has no gitstate repository (no "
                                 f"{self.state_dir}/.git); run `gitstate init` first")
        safefile.real_dirs(self.agent_dir, WRITTEN_DIRS)  # no directory of ours is a link
        self.config = config if config is not None else load_config(self.agent_dir)
        self.actor = rules.check_actor(actor or writer)
        self.store = GitStore(self.state_dir)
        self.store.set_durability(self.config.durability)
        self.store.limits = limits_for(self.config)
        self.store.signer = trust.signer(  # every commit of this opening (docs/remote.md)
            signing_key or os.environ.get("GITSTATE_SIGNING_KEY") or self.config.signing_key)
        self.projection = Projection(self.state_dir)
        self.reader = StateReader(self.state_dir, self.store, self.projection)
        self.tree = MainTree(self.reader)
        self.engine = WriteEngine(self.reader, self.config,
                                  clock or clockbase.TrustedClock(self.store.git_dir),
                                  recover=self.tree.recover, writer=writer,
                                  hooks=[self.tree.after_commit, self._maintain],
                                  after_unlock=[self.store.consolidate])
        self.remote = Remote(self.engine, self.tree)
        if self.config.sync == "remote-first":
            self.engine.committer = self.remote
        self.observations: dict[str, Observation] = {}
        self._session = runformat.session_id()  # this opening, in run events' Gitstate-Process
        if self.store.head() is None:
            raise NotInitialized(f"{self.state_dir} has no commit on main; run `gitstate init`")
        self.tree.repair_on_open()

    @property
    def durability(self) -> str:
        """The durability mode in force (``auto`` resolved for this file system)."""
        return self.store.flush.mode

    def _maintain(self, commit: str, plan: Plan, base: Base) -> None:
        """Post-commit: start background packing when loose objects pile up."""
        with contextlib.suppress(OSError):
            maintenance.maybe_start(self.store, self.agent_dir, self.config, commit)

    # -- lifecycle ------------------------------------------------------------------------

    @classmethod
    def init(cls, agent_dir: str | Path, *, actor: str | None = None, writer: str = "runtime",
             clock: Callable[[], datetime] | None = None,
             config: Config | None = None,
             signing_key: str | Path | None = None) -> StateRepo:
        """Create ``<agent_dir>/state`` with a first commit; idempotent on an existing one,
        and it finishes an init that was interrupted (killed, disk full). Parallel inits of
        one directory take turns and all end with the same repository."""
        agent_dir = Path(agent_dir)
        state_dir = agent_dir / STATE_DIR
        config = config or load_config(agent_dir)
        who = rules.check_actor(actor or writer)
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
            with locking.directory(state_dir):
                _create(state_dir, config, who, clock or clockbase.TrustedClock(state_dir / ".git"))
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise disk_full(f"cannot create {state_dir}; nothing usable was left") from exc
            raise StoreError(f"cannot create {state_dir} ({exc.strerror or exc}); nothing "
                             "usable was left behind: run `gitstate init` again once fixed",
                             rule=getattr(exc, "rule", None) or "store.io") from exc
        return cls(agent_dir, actor=actor, writer=writer, clock=clock, config=config,
                   signing_key=signing_key)

    @classmethod
    def clone(cls, url: str, agent_dir: str | Path, *, writer: str = "runtime") -> StateRepo:
        """A new agent directory from an existing remote state repository; every remote
        commit is checked like a local write first (``accept.main``)."""
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
        commit = commit or self.head()
        schema = self.schema_at(commit)
        return schema.allowed_tools(self.state_at(commit), self.now()) if schema else None

    def can_run(self, tool: str, args: Any = None) -> bool:
        """Whether ``tool`` is legal now: the current phase allows it (always, without
        phases in the schema), and, for a tool schema.yaml's ``approvals`` names, an
        approval of exactly ``args`` exists, unexpired and unconsumed. Advisory: an answer
        from HEAD as it is now, which another process or clone may spend a moment later;
        run an approved call with ``spend_approval``, which hands it over only to the
        spend that won."""
        allowed = self.allowed_tools()
        if allowed is not None and tool not in allowed:
            return False
        if tool in self._policies():
            return args is not None and self.approval_verdict(tool, args).ok
        return True

    def check_schema(self, candidate: Schema | None = None) -> SchemaReport:
        """Violations of HEAD's schema (or of ``candidate``, before setting it): live ones
        (refused at write time, so never for HEAD's) and expired ones (kept, not injected)."""
        schema = candidate or self.schema()
        if schema is None:
            return SchemaReport(None, [], [])
        state = self.state()
        live = set(state.live(self.now()))
        everything = schema.violations(state, set())
        live_problems = schema.violations(state, live or {"\0"})
        return SchemaReport(schema.version, live_problems,
                            [p for p in everything if p not in live_problems])

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
            try:
                return self.projection.rebuild(self.store, self.head())
            except OSError as exc:  # the old projection is still in place: nothing was lost
                if exc.errno == errno.ENOSPC:
                    raise disk_full("the history was not rebuilt; the file is as it was") from exc
                raise StoreError(f"the history could not be rebuilt ({exc.strerror or exc}); "
                                 "the previous file was left as it was", rule="store.io") from exc

    def get(self, now: datetime | None = None, history: int = HISTORY_IN_GET,
            commit: str | None = None) -> StateView:
        """Everything: keys (expired marked), handoff, recent history, HEAD, count, cap.
        With ``commit``, the state as of that commit (``--at``)."""
        with self.engine.mutex:
            mark, head = self.reader.snapshot()
            head = commit or head
            state = self.state_at(head)
            moment = now or self.now()
            recent, rewritten = self.reader.recent(head, history, mark) if commit is None \
                else (self.reader.history_from(commit, history), [])
            live = state.live(moment)
            schema = self.schema_at(head)
            return StateView(
                head=head, now=format_time(moment),
                keys={k: KeyState.of(e, k not in live) for k, e in sorted(state.keys.items())},
                handoff=state.handoff, history=[HistoryEntry.of(r) for r in recent],
                live_keys=len(live), max_keys=self.config.max_keys,
                section_bytes=section_key_bytes(state, moment),
                section_max_bytes=self.config.section_max_bytes,
                schema_version=schema.version if schema else None,
                phase=schema.phase(state, live) if schema else None,
                allowed_tools=schema.allowed_tools(state, moment) if schema else None,
                warnings=self.worktree_warnings() + rewritten if commit is None else [])

    def render(self, now: datetime | None = None, locale: str | None = None,
               commit: str | None = None, max_chars: int | None = None,
               set_tool: str | None = None, get_tool: str | None = None) -> str:
        """The section for a wake-up at ``now`` (of the state at ``commit``, default HEAD);
        empty when injection is disabled. With ``max_chars`` (a runtime's budget), a section
        that would be longer has its handoff line replaced by a pointer to it
        (``render.fit``); key lines are never cut. ``set_tool`` / ``get_tool``: the tools
        it names (default: [gitstate] set_tool / get_tool)."""
        if not self.config.enabled:
            return ""
        locale = locale or self.config.locale
        if locale not in LOCALES:
            raise UsageError(f"locale must be one of {', '.join(LOCALES)}", rule="usage.locale")
        commit = commit or self.head()
        state, moment = self.state_at(commit), now or self.now()
        schema = self.schema_at(commit)
        extra = phase_lines(schema.compiled() if schema else None, state, moment, locale)
        tz = resolve_tz(self.config.timezone)
        tools = set_tool or self.config.set_tool, get_tool or self.config.get_tool
        if max_chars is not None:
            return fit(state, moment, locale, tz, extra, max_chars, *tools)[0]
        return render(state, moment, locale, tz, extra, tools[0])

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
        schema = self.schema()
        spec = schema.spec(key) if schema is not None else None
        if spec is not None and spec.sensitive == "redact":  # only the keyed hash is stored
            from ..history.redact import redact, repo_key

            secret = repo_key(self.state_dir / ".git")
            value = redact(value, secret)
            if expected is not UNSET and expected is not None:
                expected = redact(expected, secret)
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
        info = self.store.commit_info(commit)
        before = self.state_at(info.parents[0]) if info.parents else EMPTY
        after = self.state_at(commit)
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

    def register_observation(self, kind: str, fn: Observation) -> None:
        """Register a runtime function that turns an observation into state updates."""
        self.observations[rules.check_key(kind)] = fn

    def apply_observation(self, kind: str, payload: dict[str, Any], *,
                          reason: str | None = None,
                          request_id: str | None = None) -> WriteResult:
        """Apply a registered observation as one commit (the model never sets the phase)."""
        fn = self.observations.get(kind)
        if fn is None:
            raise InvalidInput(f"unknown observation {kind!r}; registered: "
                               f"{', '.join(sorted(self.observations)) or '(none)'}",
                               rule="observation.unknown")
        text = rules.check_reason(reason or planners.observation_reason(kind, payload))
        who = rules.check_actor(self.actor)
        return self.engine.write(lambda base: planners.plan_observe(
            base, self.writer, kind=kind, updates=fn(base.state, payload), reason=text,
            actor=who), requests.fingerprint(request_id, "observe", kind, payload))

    # -- remotes --------------------------------------------------------------------------

    def push(self) -> SyncResult:
        """Publish local commits (see ``sync``): a lease, and re-application when the
        remote moved on."""
        from ..history import refusals
        from ..runs import sync as runsync

        result = self.remote.push()
        # the network is waited on without the write lock; the tracking refs move under it
        result.runs = runsync.push(self.store, self.remote.url(), self.engine.locked)
        journal = refusals.push(self.store, self.remote.url(), self.engine.locked)
        if journal:
            result.runs["refusals_not_pushed"] = journal
        return result

    def pull(self) -> SyncResult:
        """Fast-forward from the remote; a diverged or rewritten remote is refused. The
        run ledgers come too, each replayed before it is taken (gitstate/runs/sync.py)."""
        from ..history import refusals
        from ..runs import sync as runsync

        result = self.remote.pull()
        schema = self.schema()
        # each fetch waits on the network without the write lock, then takes it to check
        result.runs = runsync.pull(self.store, self.remote.url(),
                                   dict(schema.run_writers) if schema else {},
                                   lock=self.engine.locked, trust=trust.Trust.of(self.config))
        result.runs["refusal_journals"] = refusals.pull(self.store, self.remote.url(),
                                                        lock=self.engine.locked)
        return result

    def sync_status(self) -> SyncStatus:
        """Where main stands against the commit last seen on the remote (no network)."""
        return self.remote.status()


def _attempt(op: str, key: str, value: Value | None, expected: Expected, actor: str,
             reason: str, request_id: str | None) -> dict[str, Any]:
    """What the refusal journal keeps of a write a rule refuses."""
    return {"op": op, "key": key, "attempted": value, "actor": actor, "reason": reason,
            "expected": None if expected is UNSET else {"value": expected},
            "request_id": request_id}


def _create(state_dir: Path, config: Config, actor: str,
            clock: Callable[[], datetime]) -> None:
    """The repository and its first commit (directory lock held)."""
    from ..remote.githooks import install

    _refuse_foreign(state_dir)
    store = GitStore.create(state_dir)
    try:
        install(store.git_dir)
        with store.lock():
            if store.head() is not None:
                return
            with store.writing():
                when = clock()
                change = Change(op="init", reason="Initialize gitstate working state",
                                actor=actor)
                commit = store.commit(None, {STATE_FILE: EMPTY.to_bytes()}, change.message(),
                                      identity(config), int(when.timestamp()),
                                      tz_offset(config, when))
                if commit is not None:
                    store.checkout(commit)
                    Projection(state_dir).catch_up(store, commit)
    finally:
        store.close()


def _refuse_foreign(state_dir: Path) -> None:
    """init writes only into a new or empty directory or repository, or gitstate's own
    (whose main holds working_state.json); anything else is refused before it is touched."""
    refs = ref_names(state_dir / ".git") if (state_dir / ".git").is_dir() else []
    if refs:
        store = GitStore(state_dir)
        try:
            head = store.head()
            if head is not None and store.read_file(head, STATE_FILE) is not None:
                return
        finally:
            store.close()
        what = f"a git repository with history of its own ({', '.join(refs[:3])})"
    else:
        stray = stray_files(state_dir)
        if not stray:
            return
        what = f"a directory holding files that are not gitstate's ({', '.join(stray[:3])})"
    raise Refused(f"{state_dir} is {what}; gitstate keeps an agent's state in a repository "
                  "of its own and wrote nothing: give a new or empty agent directory "
                  f"(--agent-dir DIR), or move {state_dir} aside", rule="init.not_gitstate")
