"""gitstate: one authoritative, versioned table of an AI agent's rules and commitments.

The public API is what ``__all__`` names (pinned by tests/project/test_public_api.py): the
``StateRepo`` facade, the result types every surface shares, the model's records, the
error tree, the wake-up renderer ``section`` and the auditor's functions. Everything else
(``gitstate.write.engine``, ``gitstate.store`` ...) is implementation and may change.

The package root stays import-light (the render hook imports ``gitstate.wakeup.fastpath`` on every
wake-up): each name is loaded on first use.
"""

from __future__ import annotations

import sys

from .core.layout import VERSION


class _OldPaths:
    """Old module paths (gitstate.repo ...) keep working, with a warning: asked last, only
    for a gitstate name no file answered, it hands over to gitstate/moved.py, which the
    wake-up path therefore never imports."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> object:
        if not name.startswith("gitstate."):
            return None
        from .moved import FINDER

        return FINDER.find_spec(name, path, target)


if not any(getattr(f, "__name__", "") == "_OldPaths" for f in sys.meta_path):
    sys.meta_path.append(_OldPaths)  # type: ignore[arg-type]  # a duck-typed finder

TYPE_CHECKING = False  # not `from typing import`: typing costs ~3 ms per wake-up

__version__ = VERSION

_EXPORTS = {name: module for module, names in {
    # the facade and its inputs
    "api.repo": ("StateRepo",),
    "write.planners": ("UNSET", "Unset", "Expected", "Observation",),
    # results (one style for the Python API, the CLI's JSON and the MCP schemas)
    "core.results": ("WriteResult", "DiscardResult", "StateView", "KeyState", "Overridden",
                     "SyncResult", "Refusal", "refusal", "to_json", "SyncStatus",
                     "SchemaReport",),
    "core.records": ("ChangeRecord", "HistoryEntry", "RunSummary", "RunGoal", "NextAction",
                     "ApprovalRequest",),
    # the model, the configuration and the approvals' verdicts
    "core.model": ("Entry", "Handoff", "State", "Scalar", "Value",),
    "approvals.steps": ("Verdict", "Spend",),
    "system.config": ("Config", "load_config",),
    # the wake-up path and the auditor's views
    "wakeup.fastpath": ("section",),
    "audit.views": ("log", "blame", "show", "diff_states", "StateDiff",),
    "audit.integrity": ("verify", "Check",),
    # the error tree
    "core.errors": ("GitStateError", "UsageError", "NotInitialized", "Refused", "InvalidInput",
                    "CasMismatch", "KeyCapReached", "SectionTooLarge", "InjectionTooLarge",
                    "HandoffTooLarge", "ConfigError", "StoreError", "HistoryRewritten",
                    "LockTimeout",),
}.items() for name in names}

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
    from .api.repo import StateRepo
    from .approvals.steps import Spend, Verdict
    from .audit.integrity import Check, verify
    from .audit.views import StateDiff, blame, diff_states, log, show
    from .core.errors import (
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
    from .core.model import Entry, Handoff, Scalar, State, Value
    from .core.records import (
        ApprovalRequest,
        ChangeRecord,
        HistoryEntry,
        NextAction,
        RunGoal,
        RunSummary,
    )
    from .core.results import (
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
    from .system.config import Config, load_config
    from .wakeup.fastpath import section
    from .write.planners import UNSET, Expected, Observation, Unset


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gitstate' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return __all__
