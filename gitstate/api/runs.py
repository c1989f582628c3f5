"""The run methods of the Python API (``StateRepo`` inherits them): the run ledgers
(``repo.runs``, gitstate/runs/ledger.py) and promotion of a run's finding to the key table
(gitstate/write/promote.py).

A thin layer: the ledger gets the policy in force at main's HEAD (schema.yaml's per-event
writers, the key table's approval decisions), and a promotion is one more pure planner
handed to the write engine.
"""

from __future__ import annotations

from datetime import datetime
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


class RunMethods:
    """Mixed into StateRepo, whose store, engine, reader, writer and actor these use."""

    store: GitStore
    config: Config
    engine: WriteEngine
    reader: StateReader
    writer: str
    actor: str
    _session: str

    def now(self) -> datetime:
        raise NotImplementedError

    @property
    def runs(self) -> Ledger:
        """The run ledgers of this repository (refs/heads/runs/*, never main)."""

        def policy() -> tuple[dict[str, tuple[str, ...]], str]:
            head = self.reader.head()
            schema = self.reader.schema_at(head)
            return dict(schema.run_writers) if schema else {}, head

        return Ledger(self.store, self.config, self.engine.clock, writer=self.writer,
                      actor=self.actor,
                      policy=policy, session=self._session)

    def promote(self, run_id: str, key: str, value: Value, reason: str, *, evidence: str,
                expected: Expected = UNSET, request_id: str | None = None) -> WriteResult:
        """Make a run's finding durable: one set on main citing the run (gitstate/write/promote.py);
        only for keys schema.yaml's ``runs: promotable`` lists, by the writers it names."""
        from ..write.promote import check_evidence, plan_promote

        key, value = rules.check_key(key), rules.check_value(value, key)
        reason = rules.check_reason(reason)
        rules.check_value(evidence, "evidence")
        view = self.runs.read(run_id)
        check_evidence(view.state, evidence, run_id)
        who = rules.check_actor(self.actor)
        request = requests.fingerprint(request_id, "promote", run_id, key, value, evidence)

        def plan(base: Base) -> Plan:
            return plan_promote(base, self.writer, key=key, value=value, reason=reason,
                                actor=who, run_id=run_id, run_commit=view.head,
                                evidence=evidence, expected=expected)

        return self.engine.write(plan, request)
