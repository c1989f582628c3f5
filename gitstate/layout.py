"""The names a state repository's commits may hold, and how large each may be.

A commit gitstate did not make (pulled, cloned, pushed to a server, made with plain git) is
refused unless its tree holds exactly these names, each a regular file (mode 100644) within
its bound; checkout writes nothing else. Standard library only.
"""

from __future__ import annotations

STATE_FILE = "working_state.json"
SCHEMA_FILE = "schema.yaml"

STATE_MAX_BYTES = 8 << 20  # 256 stored keys of the largest entries, and a 1 MiB handoff
SCHEMA_MAX_BYTES = 64 << 10  # what schema.yaml itself accepts

# name -> largest blob accepted
TREE_FILES: dict[str, int] = {STATE_FILE: STATE_MAX_BYTES, SCHEMA_FILE: SCHEMA_MAX_BYTES}
REQUIRED = (STATE_FILE,)
FILE_MODE = 0o100644
