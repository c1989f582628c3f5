"""The run ledger: one ref per run (``refs/heads/runs/<id>``), its event model, commit
format, replay check of foreign events, rendering, the ledger writer and its remote rule.
The facade's ``repo.runs`` namespace is in api.

May import: core, system, store, history, write, approvals, accept.
"""


def __getattr__(name: str) -> object:
    """The names of the module this package replaced, with a DeprecationWarning."""
    from ..moved import forward

    return forward(__name__, name)
