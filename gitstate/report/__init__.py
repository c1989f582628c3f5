"""The static HTML report: data gathered from the audit views, the charts, the pages.

May import: every package below it (core ... audit).
"""


def __getattr__(name: str) -> object:
    """The names of the module this package replaced, with a DeprecationWarning."""
    from ..moved import forward

    return forward(__name__, name)
