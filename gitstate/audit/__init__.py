"""The auditor's views: log, show, diff, blame and verify of one agent, and the fleet
view of many.

May import: every package below it (core ... wakeup).
"""


def __getattr__(name: str) -> object:
    """The names of the module this package replaced, with a DeprecationWarning."""
    from ..moved import forward

    return forward(__name__, name)
