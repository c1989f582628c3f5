"""``repo.runs``: the run ledgers (gitstate/runs/ledger.py) and promotion of a run's finding
to the key table (gitstate/write/promote.py).

A thin layer: the ledger gets the policy in force at main's HEAD (schema.yaml's per-event
writers, the key table's approval decisions), and a promotion is one more pure planner
handed to the write engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core import rules
from ..runs.ledger import Ledger
from ..write import requests
from ..write.planners import UNSET, Expected

if TYPE_CHECKING:
    from ..core.model import Value
    from ..core.results import WriteResult
    from ..history.reader import StateReader
    from ..store import GitStore
    from ..system.config import Config
    from ..write.engine import WriteEngine
    from ..write.planners import Base, Plan


class Runs(Ledger):
    """The run ledgers of one opened repository (refs/heads/runs/*, never main), and the
    one way a run's finding reaches main (:meth:`promote`)."""

    def __init__(self, store: GitStore, config: Config, reader: StateReader,
                 engine: WriteEngine, *, writer: str, actor: str) -> None:
        def policy() -> tuple[dict[str, tuple[str, ...]], str]:
            head = reader.head()
            schema = reader.schema_at(head)
            return dict(schema.run_writers) if schema else {}, head

        super().__init__(store, config, engine.clock, writer=writer, actor=actor,
                         policy=policy)
        self.engine = engine

    def promote(self, run_id: str, key: str, value: Value, reason: str, *, evidence: str,
                expected: Expected = UNSET, request_id: str | None = None) -> WriteResult:
        """Make a run's finding durable: one set on main citing the run
        (gitstate/write/promote.py); only for keys schema.yaml's ``runs: promotable`` lists,
        by the writers it names."""
        from ..write.promote import check_evidence, plan_promote

        key, value = rules.check_key(key), rules.check_value(value, key)
        reason = rules.check_reason(reason)
        rules.check_value(evidence, "evidence")
        view = self.read(run_id)
        check_evidence(view.state, evidence, run_id)
        who = rules.check_actor(self.actor)
        request = requests.fingerprint(request_id, "promote", run_id, key, value, evidence)
        writer = self.writer

        def plan(base: Base) -> Plan:
            return plan_promote(base, writer, key=key, value=value, reason=reason,
                                actor=who, run_id=run_id, run_commit=view.head,
                                evidence=evidence, expected=expected)

        return self.engine.write(plan, request)
