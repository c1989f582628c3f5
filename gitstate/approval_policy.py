"""schema.yaml's ``approvals`` section: which tools need an approval, and each one's policy
(gitstate/approvals.py applies it)::

    approvals:
      refund: {writers: [human], ttl_hours: 24, offline_spend: false}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import InvalidInput, SchemaError


@dataclass(frozen=True)
class ApprovalPolicy:
    """A tool that runs only with a human's approval of its exact arguments
    (gitstate/approvals.py): who may decide, how long an approval lasts, and whether it may
    be spent without the remote (``offline_spend``: a local-first agent with a remote)."""

    tool: str
    writers: tuple[str, ...] = ("human",)
    ttl_hours: float | None = None
    offline_spend: bool = False


def parse_policies(raw: Any) -> dict[str, ApprovalPolicy]:
    """``approvals: {tool: {writers: [human], ttl_hours: 24, offline_spend: false}}``
    (writers default to human; the agent never decides)."""
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
        if not isinstance(decl, dict) or set(decl) - {"writers", "ttl_hours", "offline_spend"}:
            raise SchemaError(f"approvals: {tool}: only writers, ttl_hours and offline_spend "
                              "may be given")
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
        out[str(tool)] = ApprovalPolicy(str(tool), writers,
                                        float(ttl) if ttl is not None else None, offline)
    return out
