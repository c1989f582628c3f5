"""Promotion: a run's finding made durable in the key table, by an explicit decision.

Nothing a run learns reaches main by itself. ``gitstate run promote RUN --key K --value V
--evidence REF --reason TEXT`` is one set on main, allowed only for keys schema.yaml lists
under ``runs: promotable`` and only by the writers named there (and the key's own
declaration still applies: type, bounds, writers). The evidence must be recorded in the
run; the commit cites the run's commit and the evidence in trailers
(``Gitstate-Promoted-From: runs/<id>@<commit>``, ``Gitstate-Evidence: "<ref>"``), so the
key's history leads back to the run that justified it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.errors import Refused
from ..core.trailers import encode_json
from .planners import UNSET, Base, Expected, Plan, plan_set


def check_evidence(run_state: dict[str, Any], evidence: str, run_id: str) -> None:
    if evidence not in run_state["evidence_refs"]:
        raise Refused(f"{evidence!r} is not evidence recorded in run {run_id} (recorded: "
                      f"{', '.join(run_state['evidence_refs']) or 'none'})",
                      rule="run.no_evidence", run_id=run_id)


def plan_promote(base: Base, writer: str, *, key: str, value: Any, reason: str, actor: str,
                 run_id: str, run_commit: str, evidence: str,
                 expected: Expected = UNSET) -> Plan:
    who = base.schema.promoters(key) if base.schema else ()
    if writer not in who:
        raise Refused(f"{key} is not promotable by {writer}: schema.yaml's `runs: promotable` "
                      + (f"names {', '.join(who)} for it" if who else "does not list it"),
                      rule="run.not_promotable", key=key)
    plan = plan_set(base, writer, key=key, value=value, reason=reason, ttl=None,
                    expected=expected, actor=actor)
    extra = (("Promoted-From", f"runs/{run_id}@{run_commit}"),
             ("Evidence", encode_json(evidence)))
    plan.change = dataclasses.replace(plan.change, extra=plan.change.extra + extra)
    return plan
