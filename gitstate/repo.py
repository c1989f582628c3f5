"""The core: ``StateRepo``, the operations set / clear / handoff / get / render.

Adapters (CLI, MCP server, hooks, the Python API users) call this module and nothing below
it. Every write follows one path (:meth:`StateRepo._write`): take the kernel lock, repair
what a killed writer left, read the state at HEAD, apply the operation, check every limit,
commit with compare-and-swap, then refresh the working tree and the projection.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from . import faults, locking, rules
from .config import LOCALES, Config, load_config, resolve_tz
from .errors import (
    CasMismatch,
    HistoryRewritten,
    InjectionTooLarge,
    InvalidInput,
    KeyCapReached,
    NotInitialized,
    SectionTooLarge,
    StoreError,
    UsageError,
)
from .layout import HAND_EDITS_DIR, STATE_DIR
from .model import EMPTY, STATE_FILE, Entry, Handoff, Scalar, State, format_time
from .projection import Mark, Projection, record
from .render import (
    fit,
    phase_lines,
    render,
    section_chars,
    section_chars_bound,
    section_key_bytes,
)
from .schema import SCHEMA_FILE, WRITERS, Schema
from .store import GitStore
from .trailers import Change

HISTORY_IN_GET = 20


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""Default of ``expected``: no compare-and-swap. ``expected=None`` means "must be absent"."""


@dataclass
class WriteResult:
    """What a successful write returns."""

    op: str
    commit: str
    key: str | None = None
    old: Entry | None = None
    new: Entry | None = None
    handoff: Handoff | None = None
    truncated: bool = False
    live_keys: int = 0
    max_keys: int = 0
    warnings: list[str] = field(default_factory=list)
    replayed: bool = False
    reverted: str | None = None
    overridden: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "replayed": self.replayed,
            "reverted": self.reverted,
            "overridden": self.overridden,
            "ok": True,
            "op": self.op,
            "commit": self.commit,
            "key": self.key,
            "old": self.old.to_dict() if self.old else None,
            "new": self.new.to_dict() if self.new else None,
            "handoff": self.handoff.to_dict() if self.handoff else None,
            "truncated": self.truncated,
            "live_keys": self.live_keys,
            "max_keys": self.max_keys,
            "warnings": self.warnings,
        }


Mutation = Callable[[State, datetime], tuple[State, Change, WriteResult]]
Observation = Callable[[State, dict[str, Any]], dict[str, Scalar | None]]
"""A runtime function: (state at HEAD, payload) -> key updates (None clears the key)."""


class StateRepo:
    """One agent's working state: ``<agent_dir>/state`` plus ``<agent_dir>/config.toml``."""

    def __init__(
        self,
        agent_dir: str | Path,
        *,
        actor: str | None = None,
        writer: str = "runtime",
        clock: Callable[[], datetime] | None = None,
        config: Config | None = None,
    ) -> None:
        if writer not in WRITERS:
            raise UsageError(f"writer must be one of {', '.join(WRITERS)}", rule="usage.writer")
        self.writer = writer  # the schema's writer kind: agent (MCP), runtime (API), human (CLI)
        self.agent_dir = Path(agent_dir)
        self.state_dir = self.agent_dir / STATE_DIR
        if not (self.state_dir / ".git").is_dir():
            raise NotInitialized(
                f"{self.agent_dir} has no gitstate repository (no {self.state_dir}/.git); "
                "run `gitstate init` first"
            )
        self.config = config if config is not None else load_config(self.agent_dir)
        self.actor = rules.check_actor(actor or writer)
        self._clock = clock or (lambda: datetime.now(UTC))
        self.store = GitStore(self.state_dir)
        self.projection = Projection(self.state_dir)
        self._mutex = threading.Lock()  # the flock serializes processes; this, threads
        self._cache: tuple[str, State] | None = None
        self._schemas: dict[str, Schema | None] = {}
        self.observations: dict[str, Observation] = {}
        if self.store.head() is None:
            raise NotInitialized(f"{self.state_dir} has no commit on main; run `gitstate init`")
        self._repair_on_open()

    def _repair_on_open(self) -> None:
        """On open, when no write is running: catch the projection up and repair what a
        killed write left in the working tree (hand edits are left alone, for `adopt`; a
        rewritten history is left for `verify` to report, never silently accepted)."""
        head = self.head()
        try:
            if self.projection.last_commit() == head and \
                    self.store.worktree_matches_stamp(head):
                return
        except StoreError:
            return  # a damaged object: leave everything as it is for `verify` to name
        with self.store.try_lock() as locked, contextlib.suppress(StoreError):
            if not locked:
                return
            head = self.head()  # a write may have landed before the lock was ours
            with contextlib.suppress(HistoryRewritten, OSError):
                self.projection.catch_up(self.store, head)
            status = self.store.worktree_status(head)
            # A leftover is repaired; a clean tree with a missing or stale stamp (lost in a
            # crash, or written by an older version) gets its stamp back, or every wake-up
            # would pay for the slow path until the next write.
            if not status.hand_edited and not self.store.worktree_matches_stamp(head):
                with contextlib.suppress(OSError):
                    self.store.checkout(head)
                    self.store.remove_temp_files()
                    self._refresh_schema_cache(head)

    # -- lifecycle ------------------------------------------------------------------------

    @classmethod
    def init(cls, agent_dir: str | Path, *, actor: str | None = None, writer: str = "runtime",
             clock: Callable[[], datetime] | None = None,
             config: Config | None = None) -> StateRepo:
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
                cls._init_locked(state_dir, config, who, clock)
        except OSError as exc:
            raise StoreError(f"cannot create {state_dir} ({exc.strerror or exc}); nothing "
                             "usable was left behind: run `gitstate init` again once fixed",
                             rule="store.disk_full" if exc.errno == errno.ENOSPC
                             else "store.io") from exc
        return cls(agent_dir, actor=actor, writer=writer, clock=clock, config=config)

    @staticmethod
    def _init_locked(state_dir: Path, config: Config, actor: str,
                     clock: Callable[[], datetime] | None) -> None:
        from .githooks import install

        store = GitStore.create(state_dir)
        try:
            install(store.git_dir)
            with store.lock():
                if store.head() is not None:
                    return
                with store.writing():
                    when = (clock or (lambda: datetime.now(UTC)))()
                    change = Change(op="init", reason="Initialize gitstate working state",
                                    actor=actor)
                    offset = resolve_tz(config.timezone).utcoffset(when)
                    commit = store.commit(None, {STATE_FILE: EMPTY.to_bytes()},
                                          change.message(), _identity(config),
                                          int(when.timestamp()),
                                          int(offset.total_seconds()) if offset else 0)
                    if commit is not None:
                        store.checkout(commit)
                        Projection(state_dir).catch_up(store, commit)
        finally:
            store.close()

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> StateRepo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading --------------------------------------------------------------------------

    def now(self) -> datetime:
        return self._clock().astimezone(UTC).replace(microsecond=0)

    def head(self) -> str:
        head = self.store.head()
        if head is None:
            raise NotInitialized(f"{self.state_dir} has no commit on main")
        return head

    def state_at(self, commit: str) -> State:
        if self._cache and self._cache[0] == commit:
            return self._cache[1]
        data = self.store.read_file(commit, STATE_FILE)
        try:
            state = State.from_bytes(data) if data is not None else EMPTY
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"{STATE_FILE} at {commit[:12]} is not valid: {exc}",
                             rule="store.bad_state") from exc
        self._cache = (commit, state)
        return state

    def state(self) -> State:
        """The state at HEAD (never the working tree)."""
        return self.state_at(self.head())

    # -- typed state (schema.yaml; see typed.py) ------------------------------------------

    def schema_at(self, commit: str) -> Schema | None:
        """The schema committed at ``commit``, or None when the repository has none."""
        blob = self.store.file_ids(commit).get(SCHEMA_FILE)
        if blob is None:
            return None
        if blob not in self._schemas:
            from .schema import parse_schema

            data = self.store.read_file(commit, SCHEMA_FILE) or b""
            self._schemas[blob] = parse_schema(data.decode("utf-8"))
        return self._schemas[blob]

    def schema(self) -> Schema | None:
        return self.schema_at(self.head())

    def allowed_tools(self, commit: str | None = None) -> list[str] | None:
        """The tools the current phase allows; None when the schema declares no phases."""
        from .typed import allowed_tools

        commit = commit or self.head()
        return allowed_tools(self.schema_at(commit), self.state_at(commit), self.now())

    def can_run(self, tool: str) -> bool:
        """Whether ``tool`` is legal now (always True without phases in the schema)."""
        allowed = self.allowed_tools()
        return allowed is None or tool in allowed

    def set_schema(self, text: str, reason: str, *, request_id: str | None = None,
                   actor: str | None = None) -> WriteResult:
        """Commit a new schema.yaml (audited); refused if the live state breaks it."""
        from .typed import set_schema

        return set_schema(self, text, reason, request_id=request_id, actor=actor)

    def register_observation(self, kind: str, fn: Observation) -> None:
        """Register a runtime function that turns an observation into state updates."""
        self.observations[rules.check_key(kind)] = fn

    def apply_observation(self, kind: str, payload: dict[str, Any], *,
                          reason: str | None = None,
                          request_id: str | None = None) -> WriteResult:
        """Apply a registered observation as one commit (the model never sets the phase)."""
        from .typed import apply_observation

        return apply_observation(self, kind, payload, reason=reason, request_id=request_id)

    def _refresh_schema_cache(self, commit: str) -> None:
        from .typed import write_schema_cache

        write_schema_cache(self, commit)

    def _check_schema_plan(self, before: State, after: State) -> None:
        """Revert and adopt obey the schema like any write."""
        schema = self.schema_at(self.head())
        if schema is None:
            return
        for key in sorted(before.keys.keys() | after.keys.keys()):
            old, new = before.keys.get(key), after.keys.get(key)
            if new is None and old is not None:
                schema.check_clear(key, self.writer)
            elif new is not None and (old is None or old != new) and \
                    schema.check_write(key, new.value, self.writer) != new.value:
                raise InvalidInput(f"{key} would need coercion", rule="schema.type")

    def worktree_warnings(self) -> list[str]:
        # Without the lock, a write landing mid-check leaves a file of a newer commit that
        # looks like a hand edit. A writer moves the ref before it writes the file, so a
        # HEAD that did not move across the check makes the answer true.
        for _ in range(5):
            head = self.head()
            status = self.store.worktree_status(head)
            if not status.hand_edited or self.head() == head:
                break
        return [
            f"{self.state_dir / name} was edited by hand and differs from HEAD; it is not "
            "injected. Commit it with `gitstate adopt --reason ...` or restore it with "
            "`gitstate adopt --discard`."
            for name in status.hand_edited
        ]

    def history(self, n: int = HISTORY_IN_GET) -> list[dict[str, Any]]:
        """The newest ``n`` changes, newest first, from the projection (caught up in memory
        when it is behind, without taking the write lock)."""
        mark, head = self.snapshot()
        return self._history(head, n, mark)[0]

    def snapshot(self) -> tuple[Mark, str]:
        """The projection's mark, then HEAD, in that order (see ``Mark``): without the
        lock, a write landing between the two reads must not look like a rewrite."""
        mark = self.projection.mark()
        return mark, self.head()

    def _history(self, head: str, n: int, mark: Mark) -> tuple[list[dict[str, Any]], list[str]]:
        """The newest changes, and the warning when the branch was rewritten."""
        try:
            pending = self.projection.missing(self.store, head, mark.last)
        except HistoryRewritten as exc:  # get still answers from git; verify and writes refuse
            return [record(info) for info, _ in zip(self.store.walk(head), range(n),
                                                    strict=False)], [exc.message]
        newest = list(reversed(pending))[:n]
        if len(newest) < n:
            newest += self.projection.tail(n - len(newest), mark.end)
        return newest, []

    def history_iter(self, contains: bytes | None = None) -> Iterator[dict[str, Any]]:
        """Every change newest first: commits the projection lacks, then the projection."""
        mark, head = self.snapshot()
        pending = self.projection.missing(self.store, head, mark.last)
        yield from reversed(pending)
        yield from self.projection.newest_first(contains, mark.end)

    def full_history(self) -> list[dict[str, Any]]:
        """Every change, oldest first."""
        mark, head = self.snapshot()
        return self.projection.all(mark.end) + \
            self.projection.missing(self.store, head, mark.last)

    def rebuild_history(self) -> int:
        """Rewrite the projection from git alone (also accepts a rewritten branch)."""
        with self._mutex, self.store.lock():
            try:
                return self.projection.rebuild(self.store, self.head())
            except OSError as exc:  # the old projection is still in place: nothing was lost
                raise StoreError(f"the history could not be rebuilt ({exc.strerror or exc}); "
                                 "the previous file was left as it was",
                                 rule="store.disk_full" if exc.errno == errno.ENOSPC
                                 else "store.io") from exc

    def get(self, now: datetime | None = None, history: int = HISTORY_IN_GET,
            commit: str | None = None) -> dict[str, Any]:
        """Everything: keys (expired marked), handoff, recent history, HEAD, count, cap.
        With ``commit``, the state as of that commit (``--at``)."""
        with self._mutex:
            mark, head = self.snapshot()
            head = commit or head
            state = self.state_at(head)
            moment = now or self.now()
            recent, rewritten = self._history(head, history, mark) if commit is None else (
                self._history_from(commit, history), [])
            live = state.live(moment)
            return {
                "head": head,
                "now": format_time(moment),
                "keys": {
                    k: {**e.to_dict(), "expired": k not in live}
                    for k, e in sorted(state.keys.items())
                },
                "handoff": state.handoff.to_dict() if state.handoff else None,
                "history": recent,
                "live_keys": len(live),
                "max_keys": self.config.max_keys,
                "section_bytes": section_key_bytes(state, moment),
                "section_max_bytes": self.config.section_max_bytes,
                "schema_version": (schema.version if (schema := self.schema_at(head)) else None),
                "phase": schema.phase(state, live) if schema else None,
                "allowed_tools": self.allowed_tools(head),
                "warnings": self.worktree_warnings() + rewritten if commit is None else [],
            }

    def _history_from(self, commit: str, n: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for rec in self.history_iter():
            if out or rec["commit"] == commit:
                out.append(rec)
                if len(out) >= n:
                    break
        return out

    def render(self, now: datetime | None = None, locale: str | None = None,
               commit: str | None = None, max_chars: int | None = None) -> str:
        """The section for a wake-up at ``now`` (of the state at ``commit``, default HEAD);
        empty when injection is disabled. With ``max_chars`` (a runtime's budget), a section
        that would be longer has its handoff line replaced by a pointer to it
        (``render.fit``); key lines are never cut."""
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
        if max_chars is not None:
            return fit(state, moment, locale, tz, extra, max_chars)[0]
        return render(state, moment, locale, tz, extra)

    # -- writing --------------------------------------------------------------------------

    def set(
        self,
        key: str,
        value: Scalar,
        reason: str,
        *,
        ttl_hours: float | None = None,
        expected: Any = UNSET,
        actor: str | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Set one key. ``expected`` (a value, or None for "absent") is checked against HEAD.
        A retried ``request_id`` returns the first result without a second commit."""
        key = rules.check_key(key)
        value = rules.check_value(value)
        reason = rules.check_reason(reason)
        ttl = rules.check_ttl(ttl_hours)
        if expected is not UNSET and expected is not None:
            expected = rules.check_value(expected)
        who = rules.check_actor(actor or self.actor)
        request = _request(request_id, "set", key, value, reason, ttl,
                           None if expected is UNSET else ["expected", expected])

        def mutate(state: State, now: datetime) -> tuple[State, Change, WriteResult]:
            schema = self.schema_at(self.head())
            stored = schema.check_write(key, value, self.writer) if schema else value
            old = state.keys.get(key)
            self._check_expected(key, old, expected, now)
            self._check_new_key(state, key, now)
            hours = ttl if ttl is not None else (schema.default_ttl(key) if schema else None)
            expires = format_time(now + timedelta(hours=hours)) if hours else None
            entry = Entry(value=stored, set_at=format_time(now), reason=reason, actor=who,
                          expires_at=expires)
            new_state = state.with_key(key, entry)
            self._check_section(new_state, now)
            change = Change(op="set", reason=reason, actor=who, key=key,
                            old=old.value if old else None, new=stored, expires_at=expires)
            return new_state, change, WriteResult("set", "", key=key, old=old, new=entry)

        return self._write(mutate, request=request)

    def clear(self, key: str, reason: str, *, expected: Any = UNSET,
              actor: str | None = None, request_id: str | None = None) -> WriteResult:
        """Retire one key; its history stays in the log."""
        key = rules.check_key(key)
        reason = rules.check_reason(reason)
        if expected is not UNSET and expected is not None:
            expected = rules.check_value(expected)
        who = rules.check_actor(actor or self.actor)
        request = _request(request_id, "clear", key, reason,
                           None if expected is UNSET else ["expected", expected])

        def mutate(state: State, now: datetime) -> tuple[State, Change, WriteResult]:
            schema = self.schema_at(self.head())
            if schema:
                schema.check_clear(key, self.writer)
            old = state.keys.get(key)
            self._check_expected(key, old, expected, now)
            if old is None:
                raise InvalidInput(f"key {key!r} is not set; nothing to clear",
                                   rule="clear.absent", key=key)
            change = Change(op="clear", reason=reason, actor=who, key=key, old=old.value)
            return state.with_key(key, None), change, WriteResult("clear", "", key=key, old=old)

        return self._write(mutate, request=request)

    def handoff(
        self,
        note: str | None = None,
        *,
        status: str | None = None,
        next_steps: str | None = None,
        evidence: str | None = None,
        blocker: str | None = None,
        reason: str | None = None,
        actor: str | None = None,
        request_id: str | None = None,
    ) -> WriteResult:
        """Overwrite the handoff note (plain or structured, seed 000's rules)."""
        checked = rules.check_handoff(
            note, status, next_steps, evidence, blocker,
            plain_max_chars=self.config.handoff_plain_max_chars,
            max_bytes=self.config.handoff_max_bytes,
        )
        who = rules.check_actor(actor or self.actor)
        if reason is None:
            summary = " ".join(checked.note.split())[:72] or checked.status or ""
            label = f"Handoff ({checked.status})" if checked.status else "Handoff"
            reason = f"{label}: {summary}" if summary else label
        reason = rules.check_reason(reason)

        def mutate(state: State, now: datetime) -> tuple[State, Change, WriteResult]:
            ho = Handoff(note=checked.note, left_at=format_time(now), actor=who,
                         status=checked.status, next_steps=checked.next_steps,
                         evidence=checked.evidence, blocker=checked.blocker)
            change = Change(op="handoff", reason=reason, actor=who, handoff=ho.fields())
            result = WriteResult("handoff", "", handoff=ho, truncated=checked.truncated)
            return state.with_handoff(ho), change, result

        request = _request(request_id, "handoff", note, status, next_steps, evidence, blocker)
        return self._write(mutate, request=request)

    def revert(self, commit: str, reason: str, *, force: bool = False,
               actor: str | None = None, request_id: str | None = None) -> WriteResult:
        """Undo what ``commit`` changed, as one new commit; refused where the keys no longer
        hold that commit's values, unless ``force``."""
        from .revert import plan_revert

        reason = rules.check_reason(reason)
        who = rules.check_actor(actor or self.actor)
        info = self.store.commit_info(commit)
        before = self.state_at(info.parents[0]) if info.parents else EMPTY
        after = self.state_at(commit)

        def mutate(state: State, now: datetime) -> tuple[State, Change, WriteResult]:
            plan = plan_revert(info, before, after, state, now, reason, who, force)
            self._check_schema_plan(state, plan.state)
            for key in plan.recreated:
                self._check_new_key(state, key, now)
            self._check_section(plan.state, now)
            result = WriteResult("revert", "", key=plan.change.key, reverted=commit,
                                 overridden=plan.conflicts)
            return plan.state, plan.change, result

        return self._write(mutate, request=_request(request_id, "revert", commit, reason, force))

    def adopt(self, reason: str | None = None, *, discard: bool = False,
              actor: str | None = None) -> WriteResult | dict[str, Any]:
        """Turn a hand edit of working_state.json into one audited commit, validated like
        any write; with ``discard``, move the edit aside and restore HEAD instead."""
        from .revert import plan_adopt

        who = rules.check_actor(actor or self.actor)
        if discard:
            with self._mutex, self.store.lock():
                status = self.store.worktree_status(self.head())
                saved = self._save_hand_edits(status.hand_edited)
                self.store.checkout(self.head())
                return {"ok": True, "op": "discard", "kept": [str(p) for _, p in saved]}
        reason = rules.check_reason(reason)

        def mutate(state: State, now: datetime) -> tuple[State, Change, WriteResult]:
            edited = (self.state_dir / STATE_FILE).read_bytes()
            plan = plan_adopt(state, edited, now, reason, who, self.config)
            self._check_schema_plan(state, plan.state)
            for key in plan.recreated:
                self._check_new_key(state, key, now)
            self._check_section(plan.state, now)
            return plan.state, plan.change, WriteResult("adopt", "")

        return self._write(mutate, keep_hand_edits=True)

    # -- the write path -------------------------------------------------------------------

    def _write(self, mutate: Mutation, keep_hand_edits: bool = False,
               request: dict[str, str] | None = None,
               files: dict[str, bytes | None] | None = None) -> WriteResult:
        try:
            return self._write_locked(mutate, keep_hand_edits, request, files)
        except OSError as exc:  # before the commit point: nothing was written
            rule = {errno.ENOSPC: "store.disk_full", errno.EROFS: "store.read_only",
                    errno.EACCES: "store.permission"}.get(exc.errno or 0, "store.io")
            raise StoreError(f"the write could not be made ({exc.strerror or exc}); nothing "
                             "was committed", rule=rule) from exc

    def _write_locked(self, mutate: Mutation, keep_hand_edits: bool,
                      request: dict[str, str] | None,
                      files: dict[str, bytes | None] | None) -> WriteResult:
        with self._mutex, self.store.lock(), self.store.writing():
            warnings = self._recover_locked(keep_hand_edits)
            remote_first = self.config.sync == "remote-first"
            if remote_first:
                from .sync import before_remote_first_write, commit_remote_first

                before_remote_first_write(self)
            if request is not None:
                from .typed import find_request

                earlier = find_request(self, request)
                if earlier is not None:
                    return earlier
            for _ in range(5):
                base = self.head()
                state = self.state_at(base)
                now, clock = self._commit_moment(base)
                new_state, change, result = mutate(state, now)
                self._check_injection(state, new_state, now, base)
                if request is not None:
                    change = dataclasses.replace(change, request=request)
                if clock is not None:
                    change = dataclasses.replace(change, clock=clock)
                data = new_state.to_bytes()
                args = (base, {STATE_FILE: data, **(files or {})}, change.message(),
                        _identity(self.config), int(now.timestamp()), self._tz_offset(now))
                commit = commit_remote_first(self, *args) if remote_first else \
                    self.store.commit(*args)
                if commit is None:
                    continue  # main moved under us (a writer outside gitstate): start over
                # The ref moved: the write is committed. Anything failing from here on is
                # repaired by the next operation, never retried as a second commit.
                self._cache = (commit, new_state)
                try:
                    self.store.checkout(commit, {STATE_FILE: data})
                    if files and SCHEMA_FILE in files:  # otherwise the cache is still HEAD's
                        self._refresh_schema_cache(commit)
                    faults.hit("worktree")
                    info = self.store.last_commit
                    if info is not None and info.id == commit and \
                            self.projection.last_commit() == base:
                        self.projection.append([record(info)])
                    else:
                        self.projection.catch_up(self.store, commit)
                except Exception as exc:
                    warnings.append(f"committed {commit[:12]}, but refreshing the working tree "
                                    f"or history failed ({exc}); the next operation repairs it")
                result.commit = commit
                with contextlib.suppress(OSError):
                    from .maintenance import maybe_start

                    maybe_start(self, commit)
                live = new_state.live(now)
                result.live_keys, result.max_keys = len(live), self.config.max_keys
                result.warnings = warnings
                return result
        raise StoreError("main kept moving while writing; another tool is writing this "
                         "repository", rule="store.contention")

    def _commit_moment(self, base: str) -> tuple[datetime, str | None]:
        """The time a commit on ``base`` carries: the clock, or the parent's time when the
        clock stepped back, so that commit times on main never decrease and ``--at`` always
        names one state. The raw clock then goes in the ``Gitstate-Clock`` trailer."""
        now = self.now()
        parent_time = self.store.commit_times(base)[1]
        if now.timestamp() >= parent_time:
            return now, None
        return datetime.fromtimestamp(parent_time, UTC), format_time(now)

    def _recover_locked(self, keep_hand_edits: bool = False) -> list[str]:
        """Under the lock: repair a killed writer's leftovers; keep hand edits aside."""
        head = self.head()
        warnings: list[str] = []
        clean = self.store.worktree_matches_stamp(head)
        status = None if clean else self.store.worktree_status(head)
        if keep_hand_edits:
            if status is None or not status.hand_edited:
                raise InvalidInput("working_state.json has no hand edit to adopt",
                                   rule="adopt.nothing")
            self.projection.catch_up(self.store, head)
            return warnings
        if status is None:
            self.projection.catch_up(self.store, head)
            return warnings
        if status.hand_edited:
            saved = self._save_hand_edits(status.hand_edited)
            warnings += [f"{name} had been edited by hand; the edit was kept at {path} and the "
                         "file restored to HEAD" for name, path in saved]
        if not status.clean:
            self.store.checkout(head)
            self.store.remove_temp_files()
            self._refresh_schema_cache(head)
        self.projection.catch_up(self.store, head)
        return warnings

    def _save_hand_edits(self, names: tuple[str, ...]) -> list[tuple[str, Path]]:
        keep = self.state_dir / ".git" / HAND_EDITS_DIR
        keep.mkdir(exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
        saved = []
        for name in names:
            src = self.state_dir / name
            dst = keep / f"{stamp}-{name}"
            src.replace(dst)
            saved.append((name, dst))
        return saved

    def _tz_offset(self, now: datetime) -> int:
        """Commits carry the configured zone's offset, so `git log` shows local times."""
        offset = resolve_tz(self.config.timezone).utcoffset(now)
        return int(offset.total_seconds()) if offset is not None else 0

    # -- rules that need the state --------------------------------------------------------

    @staticmethod
    def _check_expected(key: str, old: Entry | None, expected: Any, now: datetime) -> None:
        from .model import values_match

        if expected is UNSET:
            return
        current = None if old is None or old.is_expired(now) else old
        if expected is None:
            ok = current is None
        else:
            ok = old is not None and values_match(expected, old.value)
        if ok:
            return
        shown = "absent" if old is None else repr(old.value)
        raise CasMismatch(
            f"expected {key} to be {'absent' if expected is None else repr(expected)}, but "
            f"HEAD holds {shown}"
            + (f" (set {old.set_at} by {old.actor}: {old.reason})" if old else "")
            + ". Nothing was written; re-read the value and decide again.",
            key=key, expected=expected,
            current=({**old.to_dict(), "expired": old.is_expired(now)} if old else None),
        )

    def _check_new_key(self, state: State, key: str, now: datetime) -> None:
        live = state.live(now)
        if key in live:
            return
        rules.check_twin(key, state.keys)
        if len(live) >= self.config.max_keys:
            raise KeyCapReached(
                f"{len(live)} live keys already (the cap is {self.config.max_keys}); clear one "
                f"before adding {key!r}. Live keys: {', '.join(sorted(live))}",
                key=key, max_keys=self.config.max_keys, live_keys=sorted(live),
            )
        if key not in state.keys and len(state.keys) >= self.config.max_stored_keys:
            expired = sorted(set(state.keys) - set(live))
            raise KeyCapReached(
                f"{len(state.keys)} stored keys (the limit is {self.config.max_stored_keys}, "
                f"expired ones included); clear expired keys first: {', '.join(expired)}",
                rule="keys.stored_cap", key=key, expired_keys=expired,
            )

    def _check_injection(self, before: State, after: State, now: datetime,
                         base: str) -> None:
        """The whole section (keys, phase line, handoff; longest locale) must fit what the
        runtime keeps, so no wake-up ever gets a cut injection. A section already over the
        limit (a lowered limit, an older state) refuses only writes that make it longer."""
        limit = self.config.injection_max_chars
        schema = self.schema_at(base)
        compiled = schema.compiled() if schema else None
        if section_chars_bound(after, now, compiled) <= limit:
            return  # far from the limit: the exact count is not needed
        size = section_chars(after, now, compiled)
        if size <= limit or size <= section_chars(before, now, compiled):
            return
        if after.handoff != before.handoff:
            advice = f"Shorten the handoff by at least {size - limit} characters."
        else:
            advice = "Shorten the value or reason, clear a key, or shorten the handoff."
        raise InjectionTooLarge(
            f"the injected section would be {size} characters; the limit is {limit} "
            "([gitstate] injection_max_chars: what the agent's runtime keeps of one "
            f"injection, 10,000 for Claude Code). {advice} Nothing was written.",
            size=size, limit=limit)

    def _check_section(self, state: State, now: datetime) -> None:
        size = section_key_bytes(state, now)
        if size > self.config.section_max_bytes:
            raise SectionTooLarge(
                f"the key lines would take {size} bytes of the rendered section; the limit is "
                f"{self.config.section_max_bytes} ([gitstate] section_max_bytes). Shorten the "
                "value or reason, or clear a key.",
                size=size, limit=self.config.section_max_bytes,
            )


def _request(request_id: str | None, *args: Any) -> dict[str, str] | None:
    """The request trailer: the caller's id and a fingerprint of the call's arguments."""
    if request_id is None:
        return None
    from .typed import request_fingerprint

    return request_fingerprint(request_id, args)


def _identity(config: Config) -> bytes:
    return f"{config.identity_name} <{config.identity_email}>".encode()
