"""gitstate: one authoritative, versioned table of an AI agent's rules and commitments.

The package root stays import-light (the render hook imports ``gitstate.fastpath`` on every
wake-up); ``StateRepo`` and the errors are loaded on first use.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `from typing import`: typing costs ~3 ms per wake-up

__version__ = "0.1.0"
__all__ = ["UNSET", "GitStateError", "StateRepo", "__version__"]

if TYPE_CHECKING:
    from .errors import GitStateError
    from .repo import UNSET, StateRepo


def __getattr__(name: str) -> object:
    if name in ("StateRepo", "UNSET"):
        from . import repo

        return getattr(repo, name)
    if name == "GitStateError":
        from .errors import GitStateError

        return GitStateError
    raise AttributeError(name)
