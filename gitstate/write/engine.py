"""The write engine: the one path every write takes, for any ref.

``WriteEngine.write(planner)``: take the thread mutex and the kernel lock, let the
recovery step repair what a killed writer left, answer a retried request id from history,
then loop: read the base (the ref's commit, its state and schema, the commit's time), run
the planner, run the whole-state check, commit through the committer with compare-and-swap
on the ref, and run the post-commit hooks. A committer that returns None (the ref moved:
another writer, or the remote in remote-first mode) starts the loop over on the new base.

What is specific to main (the working tree, the projection, the schema cache) and to a
remote (remote-first commits) is plugged in by the caller: the engine knows refs, states
and plans only. After the ref moved the write is committed; a failing hook becomes a
warning, repaired by the next operation, never a second commit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from ..core.errors import InvalidInput, Refused, StoreError, disk_full
from ..core.layout import BRANCH, STATE_FILE
from ..core.model import format_time
from ..core.results import WriteResult
from ..history.reader import StateReader
from ..system.clock import reading_of
from ..system.config import Config, resolve_tz
from . import checks
from .planners import Base, Plan
from .requests import find

Planner = Callable[[Base], Plan]


@dataclass(frozen=True)
class Commit:
    """What a committer commits: ``files`` on ``base``, with its message and identity."""

    ref: str
    base: str | None
    files: dict[str, bytes | None]
    message: bytes
    identity: bytes
    when: int
    tz_offset: int


class Committer(Protocol):
    """Makes the commit and moves the ref; None when the ref (or the remote) moved."""

    def prepare(self) -> None:
        """Lock held, before the base is read (remote-first: fetch and fast-forward)."""

    def commit(self, commit: Commit) -> str | None: ...


class LocalCommitter:
    def __init__(self, reader: StateReader) -> None:
        self.store = reader.store

    def prepare(self) -> None:
        return None

    def commit(self, commit: Commit) -> str | None:
        return self.store.commit(commit.base, commit.files, commit.message, commit.identity,
                                 commit.when, commit.tz_offset, ref=commit.ref)


PostCommit = Callable[[str, Plan, Base], None]
"""A step after the ref moved: (new commit, the plan, its base)."""
Recovery = Callable[[bool], list[str]]
"""Lock held, before the base is read: repair leftovers; returns warnings. The flag says
the write adopts a hand edit (which must then be left in place)."""


@dataclass
class WriteEngine:
    reader: StateReader
    config: Config
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ref: str = BRANCH
    committer: Committer | None = None
    recover: Recovery | None = None
    hooks: list[PostCommit] = field(default_factory=list)
    after_unlock: list[Callable[[], object]] = field(default_factory=list)
    """Steps after a successful write, once the lock is released (pack consolidation):
    a failure there is never the write's."""
    writer: str | None = "runtime"
    mutex: threading.Lock = field(default_factory=threading.Lock)
    """The kernel lock serializes processes; this, the threads of one process."""

    def now(self) -> datetime:
        """The time by the clock model (gitstate/system/clock.py): a wall reading that stepped
        away from the repository's anchor is not believed."""
        return reading_of(self.clock).time

    def judged_now(self, commit: str | None = None) -> datetime:
        """The time a write on ``commit`` (the ref's head by default) would be judged at,
        which ``can_run`` and the approval listing use too: now, or the commit's own time
        when that is later (commit times never go back within a ref)."""
        now = self.now()
        commit = commit or self.reader.store.ref(self.ref)
        if commit is None:
            return now
        parent_time = self.reader.store.commit_times(commit)[1]
        return max(now, datetime.fromtimestamp(parent_time, UTC))

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The write lock (thread and process), for work beside writes (sync, rebuild)."""
        with self.mutex, self.reader.store.lock():
            yield

    def write(self, planner: Planner, request: dict[str, str] | None = None,
              adopting: bool = False, attempt: dict[str, Any] | None = None,
              committer: Committer | None = None) -> WriteResult:
        """``attempt`` describes the write for the refusal journal (op, key, attempted and
        expected value, actor, reason, request id): a refusal by a rule is recorded there
        once the lock is released (gitstate/history/refusals.py). ``committer``: this write's, over
        the engine's (a spend or a decision linearized through the remote whatever the
        sync mode)."""
        try:
            result = self._write(planner, request, adopting, committer)
        except (Refused, InvalidInput) as exc:
            self._journal(exc, attempt or {})
            raise
        except OSError as exc:  # before the commit point: nothing was written
            if exc.errno == errno.ENOSPC:
                raise disk_full("the write could not be made; nothing was committed") from exc
            rule = getattr(exc, "rule", None) or {  # safefile.NotRegular: store.not_regular
                errno.EROFS: "store.read_only",
                errno.EACCES: "store.permission"}.get(exc.errno or 0, "store.io")
            raise StoreError(f"the write could not be made ({exc.strerror or exc}); nothing "
                             "was committed", rule=rule) from exc
        if not result.replayed:
            for step in self.after_unlock:
                with contextlib.suppress(Exception):
                    step()
        return result

    def _journal(self, exc: Refused | InvalidInput, attempt: dict[str, Any]) -> None:
        from ..history import refusals

        store = self.reader.store
        key = attempt.get("key")
        head_value = None
        with contextlib.suppress(Exception):  # the refusal matters more than this detail
            entry = self.reader.state_at(self.reader.head()).keys.get(key) if key else None
            head_value = entry.value if entry is not None else None
        refusals.record(store, identity(self.config), rule=exc.rule, message=exc.message,
                        writer=self.writer, head_value=head_value, time=format_time(self.now()),
                        **{k: attempt.get(k) for k in ("op", "key", "attempted", "expected",
                                                        "actor", "reason", "request_id")})

    def _write(self, planner: Planner, request: dict[str, str] | None,
               adopting: bool, committer: Committer | None = None) -> WriteResult:
        store = self.reader.store
        committer = committer or self.committer or LocalCommitter(self.reader)
        with self.mutex, store.lock(), store.writing():
            warnings = self.recover(adopting) if self.recover else []
            committer.prepare()
            if request is not None:
                earlier = find(self.reader, request, self.now(), self.config.max_keys)
                if earlier is not None:
                    return earlier
            for _ in range(5):
                base = self.base()
                plan = planner(base)
                checks.whole_state(base.state, plan.state, base.now, self.config,
                                   plan.schema, self.writer)
                change = plan.change
                if request is not None:
                    change = dataclasses.replace(change, request=request)
                if base.clock is not None:
                    change = dataclasses.replace(change, clock=base.clock)
                plan.files = files = {STATE_FILE: plan.state.to_bytes(), **plan.files}
                commit = committer.commit(Commit(
                    self.ref, base.commit, files, change.message(), identity(self.config),
                    int(base.now.timestamp()), tz_offset(self.config, base.now)))
                if commit is None:
                    continue  # the ref moved under us (a writer outside gitstate): again
                self.reader.remember(commit, plan.state)
                for hook in self.hooks:
                    try:
                        hook(commit, plan, base)
                    except Exception as exc:
                        warnings.append(f"committed {commit[:12]}, but a step after the "
                                        f"commit failed ({exc}); the next operation repairs "
                                        "it")
                result = plan.result
                result.commit = commit
                result.live_keys = len(plan.state.live(base.now))
                result.max_keys = self.config.max_keys
                result.warnings = warnings
                return result
        raise StoreError(f"{self.ref} kept moving while writing; another tool is writing "
                         "this repository", rule="store.contention")

    def base(self) -> Base:
        """The ref's commit, its state and schema, and the time a commit on it carries:
        the clock model's time (gitstate/system/clock.py), or the parent's time when that is
        later, so that commit times never decrease and ``--at`` always names one state. The
        raw wall clock goes in the ``Gitstate-Clock`` trailer whenever the commit is dated
        otherwise (it was behind the parent, or it stepped away from the anchor)."""
        commit = self.reader.store.ref(self.ref)
        if commit is None:
            raise StoreError(f"{self.ref} does not exist", rule="store.no_ref")
        reading = reading_of(self.clock)
        now = reading.time
        parent_time = self.reader.store.commit_times(commit)[1]
        if now.timestamp() < parent_time:
            now = datetime.fromtimestamp(parent_time, UTC)
        clock = format_time(reading.wall) if reading.wall != now else None
        return Base(commit, self.reader.state_at(commit), now, self.reader.schema_at(commit),
                    clock)


def identity(config: Config) -> bytes:
    return f"{config.identity_name} <{config.identity_email}>".encode()


def tz_offset(config: Config, now: datetime) -> int:
    """Commits carry the configured zone's offset, so `git log` shows local times."""
    offset = resolve_tz(config.timezone).utcoffset(now)
    return int(offset.total_seconds()) if offset is not None else 0
