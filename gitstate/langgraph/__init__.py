"""gitstate as LangGraph's checkpointer (``GitCheckpointSaver``) and Store
(``GitStateStore``): the saver, its reads and index, writer fencing, the Store over the key
table and its filters, and the thread view of the CLI. Needs the ``langgraph`` extra.

May import: every package below it (core ... report).
"""

from .saver import *  # noqa: F403  (the public names: GitCheckpointSaver, GitStateStore ...)
from .saver import __all__ as __all__


def __getattr__(name: str) -> object:
    """The names of the module this package replaced, with a DeprecationWarning."""
    from ..moved import forward

    return forward(__name__, name)
