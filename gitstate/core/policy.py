"""schema.yaml's ``approvals`` section: which tools need an approval, and each one's policy
(gitstate/approvals/steps.py applies it)::

    approvals:
      refund: {writers: [human], ttl_hours: 24, offline_spend: false,
             void_if_changed: [facts, limit.*]}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import InvalidInput, SchemaError


@dataclass(frozen=True)
class ApprovalPolicy:
    """A tool that runs only with a human's approval of its exact arguments
    (gitstate/approvals/steps.py): who may decide, how long an approval lasts, whether it may be
    spent without the remote (``offline_spend``: a local-first agent with a remote), and the
    keys (or ``*`` patterns) whose change between the decision and the spend voids it."""

    tool: str
    writers: tuple[str, ...] = ("human",)
    ttl_hours: float | None = None
    offline_spend: bool = False
    void_if_changed: tuple[str, ...] = ()


FIELDS_ORDER = ("writers", "ttl_hours", "offline_spend", "void_if_changed")
FIELDS = frozenset(FIELDS_ORDER)


def parse_policies(raw: Any) -> dict[str, ApprovalPolicy]:
    """``approvals: {tool: {writers: [human], ttl_hours: 24, offline_spend: false,
    void_if_changed: []}}`` (writers default to human; the agent never decides)."""
    from .rules import check_key

    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SchemaError("`approvals` must map tool names to {writers, ttl_hours}")
    out = {}
    for tool, decl in raw.items():
        try:
            check_key(str(tool))
        except InvalidInput as exc:
            raise SchemaError(f"approvals: tool {tool!r}: {exc.message}") from None
        decl = decl or {}
        if not isinstance(decl, dict) or set(decl) - FIELDS:
            raise SchemaError(f"approvals: {tool}: only {', '.join(FIELDS_ORDER)} may be "
                              "given")
        writers = tuple(str(w) for w in decl.get("writers") or ("human",))
        if not set(writers) <= {"runtime", "human"}:
            raise SchemaError(f"approvals: {tool}: writers must be among runtime, human (the "
                              "agent never decides its own approvals)")
        ttl = decl.get("ttl_hours")
        if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float)
                                or not 0 < ttl <= 24 * 366):
            raise SchemaError(f"approvals: {tool}: ttl_hours must be a number in (0, 8784]")
        offline = decl.get("offline_spend", False)
        if not isinstance(offline, bool):
            raise SchemaError(f"approvals: {tool}: offline_spend must be true or false")
        void = decl.get("void_if_changed") or []
        if not isinstance(void, list) or not all(isinstance(k, str) for k in void):
            raise SchemaError(f"approvals: {tool}: void_if_changed must list keys or patterns")
        for name in void:
            try:
                check_key(name.replace("*", "x"))
            except InvalidInput as exc:
                raise SchemaError(f"approvals: {tool}: void_if_changed: {exc.message}") from None
        out[str(tool)] = ApprovalPolicy(str(tool), writers,
                                        float(ttl) if ttl is not None else None, offline,
                                        tuple(void))
    return out
