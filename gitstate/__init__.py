"""gitstate: one authoritative, versioned table of an AI agent's rules and commitments.

The public API is what ``__all__`` names (pinned by tests/test_public_api.py): the
``StateRepo`` facade, the result types every surface shares, the model's records, the
error tree, the wake-up renderer ``section`` and the auditor's functions. Everything else
(``gitstate.engine``, ``gitstate.store`` ...) is implementation and may change.

The package root stays import-light (the render hook imports ``gitstate.fastpath`` on every
wake-up): each name is loaded on first use.
"""

from __future__ import annotations

from .layout import VERSION

TYPE_CHECKING = False  # not `from typing import`: typing costs ~3 ms per wake-up

__version__ = VERSION

_EXPORTS = {
    # the facade and its inputs
    "StateRepo": "repo", "UNSET": "planners", "Unset": "planners", "Expected": "planners",
    "Observation": "planners",
    # results (one style for the Python API, the CLI's JSON and the MCP schemas)
    "WriteResult": "results", "DiscardResult": "results", "StateView": "results",
    "KeyState": "results", "Overridden": "results", "SyncResult": "results",
    "Refusal": "results", "refusal": "results", "to_json": "results",
    "SyncStatus": "results", "SchemaReport": "results", "ChangeRecord": "records",
    "HistoryEntry": "records", "RunSummary": "records", "RunGoal": "records",
    "NextAction": "records", "ApprovalRequest": "records",
    # the model and the configuration
    "Entry": "model", "Handoff": "model", "State": "model", "Scalar": "model",
    "Value": "model", "Verdict": "approvals", "Spend": "approvals",
    "Config": "config", "load_config": "config",
    # the wake-up path and the auditor's views
    "section": "fastpath", "verify": "audit", "log": "audit", "blame": "audit",
    "show": "audit", "diff_states": "audit", "Check": "audit", "StateDiff": "audit",
    # the error tree
    "GitStateError": "errors", "UsageError": "errors", "NotInitialized": "errors",
    "Refused": "errors", "InvalidInput": "errors", "CasMismatch": "errors",
    "KeyCapReached": "errors", "SectionTooLarge": "errors", "InjectionTooLarge": "errors",
    "HandoffTooLarge": "errors", "ConfigError": "errors", "StoreError": "errors",
    "HistoryRewritten": "errors", "LockTimeout": "errors",
}

__all__ = [  # the keys of _EXPORTS and the version (a test keeps the two in step)
    "UNSET",
    "ApprovalRequest",
    "CasMismatch",
    "ChangeRecord",
    "Check",
    "Config",
    "ConfigError",
    "DiscardResult",
    "Entry",
    "Expected",
    "GitStateError",
    "Handoff",
    "HandoffTooLarge",
    "HistoryEntry",
    "HistoryRewritten",
    "InjectionTooLarge",
    "InvalidInput",
    "KeyCapReached",
    "KeyState",
    "LockTimeout",
    "NextAction",
    "NotInitialized",
    "Observation",
    "Overridden",
    "Refusal",
    "Refused",
    "RunGoal",
    "RunSummary",
    "Scalar",
    "SchemaReport",
    "SectionTooLarge",
    "Spend",
    "State",
    "StateDiff",
    "StateRepo",
    "StateView",
    "StoreError",
    "SyncResult",
    "SyncStatus",
    "Unset",
    "UsageError",
    "Value",
    "Verdict",
    "WriteResult",
    "__version__",
    "blame",
    "diff_states",
    "load_config",
    "log",
    "refusal",
    "section",
    "show",
    "to_json",
    "verify",
]

if TYPE_CHECKING:
    from .approvals import Spend, Verdict
    from .audit import Check, StateDiff, blame, diff_states, log, show, verify
    from .config import Config, load_config
    from .errors import (
        CasMismatch,
        ConfigError,
        GitStateError,
        HandoffTooLarge,
        HistoryRewritten,
        InjectionTooLarge,
        InvalidInput,
        KeyCapReached,
        LockTimeout,
        NotInitialized,
        Refused,
        SectionTooLarge,
        StoreError,
        UsageError,
    )
    from .fastpath import section
    from .model import Entry, Handoff, Scalar, State, Value
    from .planners import UNSET, Expected, Observation, Unset
    from .records import (
        ApprovalRequest,
        ChangeRecord,
        HistoryEntry,
        NextAction,
        RunGoal,
        RunSummary,
    )
    from .repo import StateRepo
    from .results import (
        DiscardResult,
        KeyState,
        Overridden,
        Refusal,
        SchemaReport,
        StateView,
        SyncResult,
        SyncStatus,
        WriteResult,
        refusal,
        to_json,
    )


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gitstate' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return __all__
