"""The auditor's views: log, show, diff and blame of one agent (views), verify's integrity
checks (integrity), and the fleet view of many.

May import: every package below it (core ... wakeup).
"""


def __getattr__(name: str) -> object:
    """The names of the module this package replaced, with a DeprecationWarning."""
    from ..moved import forward

    return forward(__name__, name)
