"""``repo.observations``: runtime functions that turn an observation (a tool's result, a
sensor reading) into state updates, applied as one audited commit each (seed 004's typed
state: the model reports what it saw; the runtime's function decides what changes, and the
model never sets the phase itself)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core import rules
from ..core.errors import InvalidInput
from ..write import planners, requests

if TYPE_CHECKING:
    from ..core.results import WriteResult
    from ..write.engine import WriteEngine
    from ..write.planners import Observation


class Observations:
    """The observation kinds registered on one opened repository."""

    def __init__(self, engine: WriteEngine, *, writer: str, actor: str) -> None:
        self.engine, self.writer, self.actor = engine, writer, actor
        self.registered: dict[str, Observation] = {}

    def register(self, kind: str, fn: Observation) -> None:
        """Register a runtime function that turns an observation into state updates."""
        self.registered[rules.check_key(kind)] = fn

    def apply(self, kind: str, payload: dict[str, Any], *, reason: str | None = None,
              request_id: str | None = None) -> WriteResult:
        """Apply a registered observation as one commit (the model never sets the phase)."""
        fn = self.registered.get(kind)
        if fn is None:
            raise InvalidInput(f"unknown observation {kind!r}; registered: "
                               f"{', '.join(sorted(self.registered)) or '(none)'}",
                               rule="observation.unknown")
        text = rules.check_reason(reason or planners.observation_reason(kind, payload))
        who = rules.check_actor(self.actor)
        writer = self.writer
        return self.engine.write(lambda base: planners.plan_observe(
            base, writer, kind=kind, updates=fn(base.state, payload), reason=text,
            actor=who), requests.fingerprint(request_id, "observe", kind, payload))
