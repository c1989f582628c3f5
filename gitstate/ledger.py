"""Run ledgers on their own refs: one commit per event on ``refs/heads/runs/<run_id>``.

Each commit's tree holds ``run.json`` (the goal record and the run state, as runs.py makes
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

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from . import locking, runs
from .errors import StoreError
from .results import RunView
from .trailers import encode_json

if TYPE_CHECKING:
    from collections.abc import Callable

    from .config import Config
    from .store import GitStore

PREFIX = "refs/heads/runs/"
RUN_FILE = "run.json"
RUN_MAX_BYTES = 1 << 20
_TRAILERS = ("Run", "Event", "Writer", "Request")


def message(reason: str, run_id: str, event: dict[str, Any], writer: str,
            request: str | None) -> bytes:
    lines = [f"Gitstate-Run: {run_id}", f"Gitstate-Event: {encode_json(event)}",
             f"Gitstate-Writer: {writer}"]
    if request is not None:
        lines.append(f"Gitstate-Request: {encode_json(request)}")
    return (reason.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n").encode("utf-8")


def parse(raw: bytes) -> tuple[str, dict[str, str]]:
    """(reason, trailers) of a run commit; ValueError when it is not one."""
    text = raw.decode("utf-8")
    reason, sep, block = text.rstrip("\n").rpartition("\n\n")
    if not sep:
        raise ValueError("no trailer block")
    fields: dict[str, str] = {}
    for line in block.split("\n"):
        name, colon, value = line.partition(": ")
        if not colon or not name.startswith("Gitstate-") or name[9:] not in _TRAILERS:
            raise ValueError(f"not a run trailer: {line[:60]!r}")
        fields[name[9:]] = value
    if not {"Run", "Event", "Writer"} <= set(fields):
        raise ValueError("a run commit names its run, event and writer")
    return reason, fields


class Ledger:
    """The runs of one state repository (the runtime's Python API)."""

    def __init__(self, store: GitStore, config: Config, clock: Callable[[], datetime], *,
                 writer: str, actor: str) -> None:
        self.store, self.config, self.clock = store, config, clock
        self.writer, self.actor = writer, actor

    def _ref(self, run_id: str) -> str:
        return PREFIX + runs.check_run_id(run_id)

    def _lock(self, run_id: str) -> Any:
        return locking.exclusive(self.store.git_dir / f"gitstate-run-{run_id}.flock")

    def _now(self) -> datetime:
        return self.clock().astimezone(UTC).replace(microsecond=0)

    def read(self, run_id: str, commit: str | None = None) -> RunView:
        ref = self._ref(run_id)
        head = commit or self.store.ref(ref)
        if head is None:
            raise runs.RunRefused(f"no run {run_id!r}", rule="run.unknown", run_id=run_id)
        data = self.store.read_file(head, RUN_FILE)
        if data is None or len(data) > RUN_MAX_BYTES:
            raise StoreError(f"{head[:12]} on {ref} holds no readable {RUN_FILE}",
                             rule="run.damaged")
        run = json.loads(data)
        return RunView(run_id, head, run["goal"], run["state"],
                       runs.next_action(run, self._now()))

    def start(self, run_id: str, *, description: str, criteria: list[str],
              constraints: list[str] | None = None, risk: str = "low",
              owner: str | None = None, budget: dict[str, Any] | None = None,
              reason: str, request_id: str | None = None) -> RunView:
        """goal_created: the run's first commit (refused when the run exists)."""
        from .rules import check_reason

        reason = check_reason(reason)
        now = self._now()
        run = runs.new_run(run_id, description=description, criteria=list(criteria),
                           constraints=list(constraints or []), risk=risk,
                           owner=owner or self.actor, now=now, budget=budget or {})
        event = {"type": "goal_created", "description": description,
                 "criteria": list(criteria), "constraints": list(constraints or []),
                 "risk": risk, "owner": run["goal"]["owner"], "budget": budget or {}}
        with self._lock(run_id):
            if self.store.ref(self._ref(run_id)) is not None:
                earlier = self._replayed(run_id, request_id)
                if earlier is not None:
                    return earlier
                raise runs.RunRefused(f"run {run_id!r} exists already", rule="run.exists")
            return self._commit(run_id, None, run, event, reason, self.writer,
                                request_id, now)

    def event(self, run_id: str, event: dict[str, Any], reason: str, *,
              writer: str | None = None, request_id: str | None = None) -> RunView:
        """Apply one event (one commit), as ``writer`` (the repository's by default)."""
        from .rules import check_reason

        reason = check_reason(reason)
        who = writer or self.writer
        with self._lock(run_id):
            earlier = self._replayed(run_id, request_id)
            if earlier is not None:
                return earlier
            view = self.read(run_id)
            now = self._now()
            run = runs.apply_event({"format": runs.FORMAT, "goal": view.goal,
                                    "state": view.state}, event, who, now)
            return self._commit(run_id, view.head, run, runs.validate_event(event), reason,
                                who, request_id, now)

    def _commit(self, run_id: str, base: str | None, run: dict[str, Any],
                event: dict[str, Any], reason: str, writer: str, request_id: str | None,
                now: datetime) -> RunView:
        data = (json.dumps(run, ensure_ascii=False, indent=2, sort_keys=True) + "\n").encode()
        from .engine import identity

        commit = self.store.commit(base, {RUN_FILE: data},
                                   message(reason, run_id, event, writer, request_id),
                                   identity(self.config), int(now.timestamp()),
                                   ref=self._ref(run_id))
        if commit is None:  # the ref moved outside our lock: another tool writes it
            raise StoreError(f"{self._ref(run_id)} moved while writing", rule="store.contention")
        return RunView(run_id, commit, run["goal"], run["state"], runs.next_action(run, now))

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

    def listing(self) -> list[dict[str, Any]]:
        """Every run: id, status, stop reason, head (reads one run.json each)."""
        out = []
        for name, head in sorted(self.store.refs_under(PREFIX).items()):
            try:
                view = self.read(name, head)
            except (StoreError, ValueError, KeyError) as exc:
                out.append({"run_id": name, "head": head, "error": str(exc)})
                continue
            out.append({"run_id": name, "head": head, "status": view.goal["status"],
                        "stop_reason": view.state["stop_reason"],
                        "updated_at": view.goal["updated_at"]})
        return out

    def verify(self, run_id: str) -> list[str]:
        """Replay the ref from its first commit: each run.json must be exactly the fold of
        the events so far. Returns the problems (empty: the ledger is sound)."""
        head = self.store.ref(self._ref(run_id))
        if head is None:
            return [f"no run {run_id!r}"]
        commits = list(self.store.walk(head))[::-1]
        problems: list[str] = []
        run: dict[str, Any] | None = None
        for info in commits:
            try:
                _, fields = parse(info.message)
                event = json.loads(fields["Event"])
                when = datetime.fromtimestamp(info.time, UTC)
                if run is None:
                    if event.get("type") != "goal_created" or info.parents:
                        raise ValueError("the first commit must be goal_created, with no parent")
                    run = runs.new_run(run_id, description=event["description"],
                                       criteria=event["criteria"],
                                       constraints=event["constraints"], risk=event["risk"],
                                       owner=event["owner"], now=when, budget=event["budget"])
                else:
                    run = runs.apply_event(run, event, fields["Writer"], when)
                stored = json.loads(self.store.read_file(info.id, RUN_FILE) or b"null")
                if stored != run:
                    problems.append(f"{info.id[:12]}: run.json differs from the replay of "
                                    "its events")
                    run = stored
            except (ValueError, KeyError, TypeError, runs.RunRefused) as exc:
                problems.append(f"{info.id[:12]}: {exc}")
                break
        return problems
