"""Run ledgers on their own refs: one commit per event on ``refs/heads/runs/<run_id>``.

Each commit's tree holds ``run.json`` (the goal record and the run state, as model.py makes
them); its message is the event's reason, then trailers: ``Gitstate-Run``, ``Gitstate-Event``
(the event as one-line JSON), ``Gitstate-Writer``, ``Gitstate-Request`` when given. The
first commit has no parent and records ``goal_created`` with the goal's inputs. So
``git log runs/<id>`` is the run's trajectory, and folding ``apply_event`` over the commits
from the first reproduces every run.json exactly (``verify``).

Runs never touch main and never take main's write lock: each run has its own kernel lock
(``.git/gitstate-run-<id>.flock``) and its ref moves by compare-and-swap, so runs contend
neither with main nor with each other. A retried request id returns the first result.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import DiskFullAs, InvalidInput, StoreError, did_you_mean
from ..core.layout import RUN_CACHE_DIR, RUN_LOCK_FILE
from ..core.model import format_time
from ..core.records import NextAction, RunGoal, RunSummary
from ..core.results import RunView
from ..core.runevents import EVENTS
from ..core.trailers import encode_json
from ..system import locking
from ..system.clock import reading_of
from . import model as runs
from .format import PREFIX, RUN_FILE, RUN_MAX_BYTES, encode_run, events, message, parse, session_id
from .validate import RunRefused, check_run_id, validate_event

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ..store import GitStore
    from ..system.config import Config


Policy = tuple["Mapping[str, tuple[str, ...]]", "str | None"]


class Ledger:
    """The runs of one state repository (the runtime's Python API)."""

    def __init__(self, store: GitStore, config: Config, clock: Callable[[], datetime], *,
                 writer: str, actor: str,
                 policy: Callable[[], Policy] | None = None,
                 session: str | None = None) -> None:
        self.store, self.config, self.clock = store, config, clock
        self.writer, self.actor = writer, actor
        # (schema.yaml's per-event writers at main's HEAD, that HEAD), read when an event is
        # applied: an approval_recorded links to the HEAD whose decision it records
        self.policy = policy or (lambda: ({}, None))
        self.session = session or session_id()

    def _ref(self, run_id: str) -> str:
        return PREFIX + check_run_id(run_id)

    @contextlib.contextmanager
    def _lock(self, run_id: str) -> Iterator[None]:
        """The run's kernel lock; a full disk met under it is ``store.disk_full`` (the
        run's ref moves last: nothing was written)."""
        with DiskFullAs(f"the event of run {run_id} could not be written; the run is as it "
                        "was"), locking.exclusive(self.store.git_dir /
                                                  RUN_LOCK_FILE.format(run=run_id)):
            yield

    def _now(self) -> datetime:
        return reading_of(self.clock).time

    def _dated(self, *commits: str | None) -> tuple[datetime, datetime]:
        """The clock model's time, no earlier than these commits', and the raw wall reading
        (gitstate/system/clock.py)."""
        reading = reading_of(self.clock)
        now = reading.time
        for commit in commits:
            if commit is not None:
                with contextlib.suppress(KeyError, StoreError):
                    now = max(now, datetime.fromtimestamp(self.store.commit_times(commit)[1],
                                                          UTC))
        return now, reading.wall

    def _unknown(self, run_id: str) -> RunRefused:
        """A run id with no ref: refused, naming the nearest run there is."""
        names = self.store.refs_under(PREFIX)
        return RunRefused(f"no run {run_id!r}." + did_you_mean(run_id, names),
                               rule="run.unknown", run_id=run_id)

    def read(self, run_id: str, commit: str | None = None) -> RunView:
        ref = self._ref(run_id)
        head = commit or self.store.ref(ref)
        if head is None:
            raise self._unknown(run_id)
        run = cached(self.store.git_dir, run_id, head)  # the commit's run.json, kept beside it
        if run is None:
            data = self.store.read_file(head, RUN_FILE)
            if data is None or len(data) > RUN_MAX_BYTES:
                raise StoreError(f"{head[:12]} on {ref} holds no readable {RUN_FILE}",
                                 rule="run.damaged")
            run = json.loads(data)
        return RunView(run_id, head, RunGoal.of(run["goal"]), run["state"],
                       NextAction.of(runs.next_action(run, self._now())))

    def _fold(self) -> None:
        """After the run's lock is released: fold small packs, as main's writes do (each
        event adds a pack; unfolded, every read would search hundreds of them)."""
        with contextlib.suppress(OSError, StoreError):
            self.store.consolidate()

    def start(self, run_id: str, *, description: str, criteria: list[str],
              constraints: list[str] | None = None, risk: str = "low",
              owner: str | None = None, budget: dict[str, Any] | None = None,
              reason: str, request_id: str | None = None) -> RunView:
        """goal_created: the run's first commit (refused when the run exists)."""
        from ..core.rules import check_reason, check_request_id

        reason = check_reason(reason)
        if request_id is not None:
            check_request_id(request_id)
        now, wall = self._dated()
        run, event = runs.goal(run_id, description=description, criteria=list(criteria),
                               constraints=list(constraints or []), risk=risk,
                               owner=owner or self.actor, now=now, budget=budget or {})
        with self._lock(run_id):
            if self.store.ref(self._ref(run_id)) is not None:
                earlier = self._replayed(run_id, request_id)
                if earlier is not None:
                    return earlier
                raise RunRefused(f"run {run_id!r} exists already", rule="run.exists")
            view = self._commit(run_id, None, run, event, reason, self.writer,
                                request_id, now, wall)
        self._fold()
        return view

    def event(self, run_id: str, event: dict[str, Any], reason: str, *,
              writer: str | None = None, request_id: str | None = None) -> RunView:
        """Apply one event (one commit), as ``writer`` (the repository's by default)."""
        from ..core.rules import check_reason, check_request_id

        reason = check_reason(reason)
        if request_id is not None:
            check_request_id(request_id)
        who = writer or self.writer
        with self._lock(run_id):
            earlier = self._replayed(run_id, request_id)
            if earlier is not None:
                return earlier
            from .check import Links

            view = self.read(run_id)
            writers, main = self.policy()
            linked = isinstance(event, dict) and event.get("type") == "approval_recorded"
            if linked:
                event = {**event, "main_commit": event.get("main_commit", main)}
            # an event is dated no earlier than its parent nor than the main commit it cites
            # (a clock that stepped back), as main's own commits are
            now, wall = self._dated(view.head, main if linked else None)
            try:
                decisions = Links(self.store, main).decisions(event, now) if linked else None
                run = runs.apply_event({"format": runs.FORMAT, "goal": view.goal.to_dict(),
                                        "state": view.state}, event, who, now,
                                       writers=writers, approvals=decisions)
            except RunRefused as exc:
                self._journal(run_id, event, who, reason, request_id, exc)
                raise
            view = self._commit(run_id, view.head, run, validate_event(event), reason,
                                who, request_id, now, wall)
        self._fold()
        return view

    def _journal(self, run_id: str, event: Any, writer: str, reason: str,
                 request_id: str | None, exc: RunRefused) -> None:
        from ..history import refusals
        from ..write.engine import identity

        try:  # the record keeps only what passed the input rules (a secret never does)
            attempted: Any = validate_event(event)
        except (RunRefused, InvalidInput):
            attempted = {"withheld": "the event did not pass the input rules"}
        kind = event.get("type") if isinstance(event, dict) and isinstance(
            event.get("type"), str) and event["type"] in EVENTS else None
        refusals.record(self.store, identity(self.config), rule=exc.rule, op="run_event",
                        key=f"runs/{run_id}", attempted=attempted, actor=self.actor,
                        writer=writer, reason=reason, request_id=request_id, run_id=run_id,
                        message=exc.message, expected=kind,
                        time=format_time(self._now()))

    def _commit(self, run_id: str, base: str | None, run: dict[str, Any],
                event: dict[str, Any], reason: str, writer: str, request_id: str | None,
                now: datetime, wall: datetime | None = None) -> RunView:
        """``wall``: the raw reading, kept in ``Gitstate-Clock`` when it is not ``now``."""
        from ..write.engine import identity
        from . import render as runrender

        try:
            runrender.check_size(run, now)
        except RunRefused as exc:
            self._journal(run_id, event, writer, reason, request_id, exc)
            raise
        data = encode_run(run)
        commit = self.store.commit(base, {RUN_FILE: data},
                                   message(reason, run_id, event, writer, request_id, self.session,
                                           format_time(wall) if wall not in (None, now)
                                           else None),
                                   identity(self.config), int(now.timestamp()),
                                   ref=self._ref(run_id))
        if commit is None:  # the ref moved outside our lock: another tool writes it
            raise StoreError(f"{self._ref(run_id)} moved while writing", rule="store.contention")
        _cache(self.store.git_dir, run_id, commit, data)
        return RunView(run_id, commit, RunGoal.of(run["goal"]), run["state"],
                       NextAction.of(runs.next_action(run, now)))

    def _replayed(self, run_id: str, request_id: str | None) -> RunView | None:
        if request_id is None or self.store.ref(self._ref(run_id)) is None:
            return None
        wanted = encode_json(request_id)
        head = self.store.ref(self._ref(run_id))
        assert head is not None
        for info in self.store.walk(head):
            _, fields = parse(info.message)
            if fields.get("Request") == wanted:
                view = self.read(run_id, info.id)
                view.replayed = True
                return view
        return None

    def listing(self) -> list[RunSummary]:
        """Every run: id, status, stop reason, head. Each run.json comes from the cache
        beside the ref while it names the ref's commit, else from the store."""
        out = []
        for name, head in sorted(self.store.refs_under(PREFIX).items()):
            run = cached(self.store.git_dir, name, head)
            try:
                if run is None:
                    view = self.read(name, head)
                    run = {"goal": view.goal.to_dict(), "state": view.state}
                goal, state = run["goal"], run["state"]
                out.append(RunSummary(name, head, goal["status"], state["stop_reason"],
                                      goal["updated_at"]))
            except (StoreError, ValueError, KeyError, TypeError) as exc:
                out.append(RunSummary(name, head, error=str(exc)))
        return out

    def read_at(self, run_id: str, at: str) -> RunView:
        """The run as it stood at ``at``: a commit of its ref (a prefix of 4 or more hex
        digits), or an ISO 8601 time (the last event at or before it)."""
        from ..core.model import parse_time

        head = self.store.ref(self._ref(run_id))
        if head is None:
            raise self._unknown(run_id)
        moment = None
        if not (4 <= len(at) <= 40 and all(c in "0123456789abcdef" for c in at)):
            try:
                moment = int(parse_time(at).timestamp())
            except ValueError:
                raise RunRefused(f"--at {at!r} is neither a commit of the run nor an "
                                      "ISO 8601 time", rule="run.invalid") from None
        for info in self.store.walk(head):
            if (moment is None and info.id.startswith(at)) or \
                    (moment is not None and info.time <= moment):
                return self.read(run_id, info.id)
        raise RunRefused(f"run {run_id} has no event at {at}", rule="run.invalid")

    def verify(self, run_id: str, head: str | None = None) -> list[str]:
        """Replay the run's ref from its first commit (:func:`replay_problems`); the
        writers are checked against the defaults and schema.yaml's ``runs: writers`` in
        force now."""
        head = head or self.store.ref(self._ref(run_id))
        if head is None:
            return [f"no run {run_id!r}"]
        from .check import replay_problems

        writers, main = self.policy()
        return replay_problems(self.store, run_id, head, writers, main=main)

    def verify_all(self) -> dict[str, list[str]]:
        """verify() for every run ref: run id -> its problems (only runs that have some)."""
        out = {}
        for name, head in sorted(self.store.refs_under(PREFIX).items()):
            try:
                check_run_id(name)
                problems = self.verify(name, head)
            except RunRefused as exc:
                problems = [f"{name!r}: {exc.message}"]
            if problems:
                out[name] = problems
        return out

    def stats(self) -> dict[str, Any]:
        """The seed's metrics, from history across every run and the refusal journal."""
        from ..history import refusals

        out: dict[str, Any] = {"runs": 0, "events": 0, "events_by_type": {},
                               "replay_ok": 0, "replay_failed": [], "resumes": 0,
                               "approvals_waiting": 0, "lost_approvals": 0,
                               "stop_reasons": {}, "refused_by_rule": {},
                               "stale_results_refused": 0, "refusals_damaged": []}
        for name, head in sorted(self.store.refs_under(PREFIX).items()):
            out["runs"] += 1
            problems = self.verify(name, head)
            if problems:
                out["replay_failed"].append(name)
                continue
            out["replay_ok"] += 1
            process, waiting, state = None, None, None
            for info, _, fields in events(self.store, name, head):
                kind = json.loads(fields["Event"])["type"]
                out["events"] += 1
                out["events_by_type"][kind] = out["events_by_type"].get(kind, 0) + 1
                if process is not None and fields.get("Process") not in (None, process):
                    out["resumes"] += 1
                process = fields.get("Process", process)
                state = json.loads(self.store.read_file(info.id, RUN_FILE) or b"{}")["state"]
                if waiting is not None and state["awaiting_approval"] is None and kind not in (
                        "approval_recorded", "cancelled", "failed", "budget_spent"):
                    out["lost_approvals"] += 1
                waiting = state["awaiting_approval"]
            if state is not None:
                stop = state["stop_reason"] or "running"
                out["stop_reasons"][stop] = out["stop_reasons"].get(stop, 0) + 1
                out["approvals_waiting"] += state["awaiting_approval"] is not None
        for entry in refusals.entries(self.store):
            if entry.get("damaged"):  # counted nowhere else: its fields are not trusted
                out["refusals_damaged"].append(f"{entry['commit'][:12]}: "
                                               f"{entry.get('problem', 'not a record')}")
            elif entry.get("op") == "run_event":
                rule = entry["rule"]
                out["refused_by_rule"][rule] = out["refused_by_rule"].get(rule, 0) + 1
                out["stale_results_refused"] += rule == "run.stale"
        return out


CACHE_DIR = RUN_CACHE_DIR


def _cache(git_dir: Path, run_id: str, commit: str, data: bytes) -> None:
    """run.json beside its commit id, for the wake-up hook (which reads it without dulwich
    and uses it only while the run's ref still names that commit). Best effort, no fsync:
    a stale or missing cache sends the hook to the exact path. A planted symlink in place
    of the folder or a file is never followed."""
    import stat

    with contextlib.suppress(OSError):
        folder = git_dir / CACHE_DIR
        folder.mkdir(exist_ok=True)
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return
        from ..system.safefile import write_atomic  # replaces a planted link, never follows it

        write_atomic(folder / f"{run_id}.json", commit.encode() + b"\n" + data)


def cached(git_dir: Path, run_id: str, head: str | None = None) -> dict[str, Any] | None:
    """The cached run.json when it is the run's current commit (``head``, else read from
    the loose ref), else None."""
    from ..system.safefile import read_regular

    try:
        ref = head.encode() if head else \
            read_regular(str(git_dir / PREFIX / run_id), 256).strip()
        raw = read_regular(str(git_dir / CACHE_DIR / f"{run_id}.json"), RUN_MAX_BYTES + 64)
    except OSError:
        return None
    commit, _, data = raw.partition(b"\n")
    if commit != ref or len(data) > RUN_MAX_BYTES:
        return None
    try:
        run = json.loads(data)
    except ValueError:
        return None
    return run if isinstance(run, dict) else None
