"""The one rule of foreign commits for run ledgers (docs/security.md): a run's ref is
re-derived from its first commit with the ledger's own transition, message and clock rule,
and a run's ``approval_recorded`` is checked against the main commit it cites.

Used by ``run verify`` (the local ledger), pull (sync.py) and the pre-receive hook
(sync.verify_pushed). Nothing here writes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..accept.trust import Trust, claim_problem
from ..core.errors import StoreError
from . import model as runs
from .format import RUN_FILE, RUN_MAX_BYTES, encode_run, events, message, trailer_problem
from .render import check_size
from .validate import RunRefused, validate_event

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..store import GitStore


class Links:
    """Main's history as a run's ``approval_recorded`` events may cite it: an event names
    main's commit that holds the decision (``main_commit``); that commit must be on main's
    history (``main`` or an ancestor of it) and dated no later than the event, and the
    decision it records must be the one the key table held there, judged at the event's
    time (an approval that had expired by then is ``expired``, one spent by then is
    ``consumed``: it released the run it was recorded in before it was spent, and releases
    no other)."""

    def __init__(self, store: GitStore, main: str | None) -> None:
        self.store, self.main = store, main
        self._times: dict[str, int] | None = None

    def _time_of(self, commit: str) -> int | None:
        if self._times is None:
            self._times = {} if self.main is None else \
                {info.id: info.time for info in self.store.walk(self.main)}
        return self._times.get(commit)

    def decisions(self, event: dict[str, Any], when: datetime) -> dict[str, str]:
        from ..approvals import steps as approvals
        from ..core.layout import STATE_FILE
        from ..core.model import EMPTY, State

        commit = event.get("main_commit")
        if not isinstance(commit, str):
            raise RunRefused("an approval_recorded names no main_commit: the decision "
                                  "it records cannot be checked", rule="run.approval_unlinked")
        at = self._time_of(commit) if commit != self.main or self._times is not None else \
            self.store.commit_times(commit)[1]
        if at is None:
            raise RunRefused(f"approval_recorded cites main's commit {commit[:12]}, which "
                                  "is not on main's history here (pull main first)",
                                  rule="run.approval_unlinked", main_commit=commit)
        if at > when.timestamp():
            raise RunRefused(f"approval_recorded cites main's commit {commit[:12]}, dated "
                                  "after the event", rule="run.approval_unlinked",
                                  main_commit=commit)
        data = self.store.read_file(commit, STATE_FILE)
        state = State.from_bytes(data) if data else EMPTY
        wanted = approvals.PREFIX + str(event.get("approval_id"))
        if wanted not in state.keys:  # retired by then: as its final step left it
            from ..history.approvals import last_record

            record = last_record(self.store, commit, wanted)
            if record is not None:
                state = state.with_key(wanted, record)
        out = approvals.decisions(state, when)
        for approval_id, decision in out.items():  # spent already: it released its run
            entry = state.keys.get(approvals.PREFIX + approval_id)
            if decision == "approved" and entry is not None and isinstance(
                    entry.value, dict) and entry.value.get("status") == "consumed":
                out[approval_id] = "consumed"
        return out


def replay_problems(store: GitStore, run_id: str, head: str,
                    writers: Mapping[str, tuple[str, ...]], *, main: str | None,
                    foreign: bool = False, now: float | None = None,
                    trust: Trust | None = None) -> list[str]:
    """The one rule for a run's ref (docs/security.md): each commit is re-derived from its
    first — the ledger's own ``apply_event`` at the parent's run, on the event, writer and
    time the commit records, must give exactly the committed run.json, and the commit
    exactly the message the ledger writes. Times never go back within the ref nor run ahead
    of ``now`` (gitstate/accept/main.py's clock rule); an ``approval_recorded`` must cite
    main's commit holding that decision (:class:`Links`, against ``main``). Writers are
    checked against the defaults and schema.yaml's ``runs: writers`` (``writers``).
    ``foreign``: commits from elsewhere, where the first commit is re-derived by
    ``runs.goal`` (what ``Ledger.start`` calls), each event is checked with exactly the
    writers the ledger uses, every commit keeps the block cap and its Writer and Process
    trailers are as the ledger writes them, an approval event without its link is refused
    and an event written as human or runtime counts only when ``trust`` says its signer
    may act as that role (gitstate/accept/trust.py); a local ledger recorded before links were
    kept replays without them. Returns the problems (empty: the ledger is sound)."""
    import time as _time

    from ..core.errors import InvalidInput
    from ..core.rules import check_reason, check_request_id, time_problem

    now = _time.time() if now is None else now
    links = Links(store, main)
    problems: list[str] = []
    run: dict[str, Any] | None = None
    previous: int | None = None
    try:
        for info, reason, fields in events(store, run_id, head):
            if len(info.parents) > 1:
                raise ValueError(f"{info.id[:12]} is a merge: a run is one line of events")
            entries = store.tree_entries(info.id)
            if [(n, m) for n, m, _ in entries] != [(RUN_FILE.encode(), 0o100644)]:
                raise ValueError(f"the tree must hold only {RUN_FILE}, a regular file, not "
                                 f"{[n.decode('utf-8', 'replace')[:40] for n, _, _ in entries]}")
            if store.object_size(entries[0][2]) > RUN_MAX_BYTES:  # before reading it whole
                raise ValueError(f"{RUN_FILE} is over {RUN_MAX_BYTES} bytes")
            author_time, commit_time = store.commit_times(info.id)
            clock = time_problem(author_time, commit_time, previous, now)
            if clock is not None:
                raise ValueError(f"{info.id[:12]}: [{clock[0]}] {clock[1]}")
            previous = commit_time
            check_reason(reason)
            if foreign:  # as the ledger writes them: a role, and session_id's shape
                shape = trailer_problem(fields["Writer"], fields.get("Process", ""))
                if shape is not None:
                    raise ValueError(f"{info.id[:12]}: {shape}")
            request = json.loads(fields["Request"]) if "Request" in fields else None
            if request is not None:
                check_request_id(request)
            event = json.loads(fields["Event"])
            when = datetime.fromtimestamp(commit_time, UTC)
            if run is None:
                if not isinstance(event, dict) or event.get("type") != "goal_created" or \
                        info.parents:
                    raise ValueError("the first commit must be goal_created, with no parent")
                run = _created(run_id, event, when)
            else:
                event = validate_event(event)
                decisions = links.decisions(event, when) if event["type"] == \
                    "approval_recorded" and (foreign or "main_commit" in event) else None
                run = _replay(run, event, fields["Writer"], when, writers, decisions,
                              exact=foreign)
            if foreign:  # the cap a local write keeps, on every commit
                check_size(run, when)
            data = store.read_file(info.id, RUN_FILE) or b"null"
            if len(data) > RUN_MAX_BYTES or json.loads(data) != run or (
                    foreign and data != encode_run(run)):
                problems.append(f"{info.id[:12]}: run.json differs from the replay of "
                                "its events")
                break
            wall = fields.get("Clock")
            if wall is not None:
                _check_clock(wall, commit_time)
            wanted = message(reason, run_id, event, fields["Writer"], request,
                             fields.get("Process", ""), wall)
            if foreign and fields["Writer"] in ("human", "runtime"):
                claim = claim_problem(store, info.id, (fields["Writer"],), trust or Trust())
                if claim is not None:
                    raise ValueError(f"{info.id[:12]}: [{claim[0]}] {claim[1]}")
            if foreign and (info.message != wanted or author_time != commit_time):
                problems.append(f"{info.id[:12]}: [run.rederive] the commit is not the one "
                                "the ledger writes for its event (message, trailers or "
                                "times differ)")
                break
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, InvalidInput,
            RunRefused, StoreError) as exc:
        rule = getattr(exc, "rule", None)
        problems.append(f"{run_id}: " + (f"[{rule}] " if rule else "")
                        + f"{getattr(exc, 'message', None) or exc}")
    return problems


def _check_clock(wall: str, commit_time: int) -> None:
    """Gitstate-Clock as main's (rederive's rule): the raw reading in gitstate's format,
    other than the commit's time and at most a year after it."""
    from ..core.model import format_time, parse_time

    try:
        moment = parse_time(wall)
    except ValueError:
        moment = None
    if moment is None or format_time(moment) != wall or moment.timestamp() == commit_time \
            or moment.timestamp() > commit_time + 366 * 24 * 3600:
        raise ValueError(f"[trailer.clock] Gitstate-Clock {wall[:40]!r} is not a time other "
                         "than the commit's, in gitstate's format, at most a year after it")


def _created(run_id: str, event: dict[str, Any], when: datetime) -> dict[str, Any]:
    """The first commit again, as ``Ledger.start`` makes it (``runs.goal``): exactly the
    goal's fields, each valid, and the event the ledger would record for them."""
    extra = sorted(set(event) - {"type", *runs.GOAL_FIELDS})
    missing = sorted(set(runs.GOAL_FIELDS) - set(event))
    if extra or missing:
        raise RunRefused(f"goal_created: {'unknown' if extra else 'missing'} field "
                              f"{(extra or missing)[0][:40]!r}", rule="run.invalid")
    run, wanted = runs.goal(run_id, now=when, **{name: event[name]
                                                  for name in runs.GOAL_FIELDS})
    if wanted != event:
        raise RunRefused("goal_created is not the event the ledger records for its "
                              "goal", rule="run.invalid")
    return run


def _replay(run: dict[str, Any], event: dict[str, Any], writer: str, when: datetime,
            writers: Mapping[str, tuple[str, ...]],
            decisions: Mapping[str, str] | None, *, exact: bool) -> dict[str, Any]:
    """One recorded event again. ``exact`` (commits from elsewhere): with exactly the
    writers the ledger uses (schema.yaml's ``runs: writers`` where it names the event, else
    the defaults); otherwise (this clone's own ledger, recorded under the schema of its
    time) its writer may rest on the defaults or on the schema."""
    if exact:
        return runs.apply_event(run, event, writer, when, writers=writers,
                                approvals=decisions)
    try:
        return runs.apply_event(run, event, writer, when, approvals=decisions)
    except RunRefused as exc:
        if exc.rule != "run.writer" or not writers:
            raise
        return runs.apply_event(run, event, writer, when, writers=writers,
                                approvals=decisions)
