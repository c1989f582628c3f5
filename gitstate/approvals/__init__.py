"""Frozen-argument approvals: the planners and checks of every approval step (request,
approve, deny, consume, outcome) and the spend rule. The policy they enforce is declared in
the schema (core.policy); finished records are read back from history (history.approvals);
the facade's ``repo.approvals`` namespace is in api.

May import: core, system, store, history, write.
"""


def __getattr__(name: str) -> object:
    """The names of the module this package replaced, with a DeprecationWarning."""
    from ..moved import forward

    return forward(__name__, name)
