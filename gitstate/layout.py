"""On-disk names and formats: the one place they are defined. Standard library only (the
wake-up path imports it).

An agent directory holds ``config.toml`` and ``state/``, a git repository on branch main whose
commits hold exactly :data:`TREE_FILES`. Next to the repository's own files, ``.git`` holds
gitstate's caches and markers (the stamp, the schema cache, the write lock, the write-in-progress
marker, the maintenance pid file, moved-aside hand edits, fetch quarantines), none of them
committed and all of them re-derivable or safe to lose.
"""

from __future__ import annotations

VERSION = "0.1.0"  # the package version, the same as pyproject.toml's (a test checks)

# -- the agent directory and the repository ------------------------------------------------
CONFIG_FILE = "config.toml"
STATE_DIR = "state"
BRANCH = "refs/heads/main"
REMOTE_REF = "refs/remotes/origin/main"  # the commit last seen on the remote: the lease
UNPUSHED_PREFIX = "refs/gitstate/unpushed/"  # local commits a push could not re-apply
FETCHED_REF = "refs/gitstate/fetched"  # scratch ref of a fetch through the git CLI

# -- what a commit's tree may hold ---------------------------------------------------------
STATE_FILE = "working_state.json"
SCHEMA_FILE = "schema.yaml"
STATE_MAX_BYTES = 8 << 20  # 256 stored keys of the largest entries, and a 1 MiB handoff
SCHEMA_MAX_BYTES = 64 << 10  # what schema.yaml itself accepts
TREE_FILES: dict[str, int] = {STATE_FILE: STATE_MAX_BYTES, SCHEMA_FILE: SCHEMA_MAX_BYTES}
REQUIRED = (STATE_FILE,)
FILE_MODE = 0o100644

# -- beside the tree, never committed (working tree) --------------------------------------
HISTORY_FILE = "working_state_history.jsonl"  # the projection of the log (.git/info/exclude)

# -- inside .git ---------------------------------------------------------------------------
LOCK_FILE = "gitstate.lock"  # the kernel write lock (flock)
REPACK_LOCK_FILE = "gitstate-repack.flock"  # one pack consolidation at a time (a flock)
STAMP_FILE = "gitstate-stamp"  # what the render fast path checks (format below)
SCHEMA_CACHE_FILE = "gitstate-schema.json"  # the compiled schema, for the wake-up path
CONFIG_CACHE_FILE = "gitstate-config.json"  # config.toml parsed, keyed by its SHA-1 (config.py)
WRITING_FILE = "gitstate-writing"  # a write in progress; left behind only by a killed one
PID_FILE = "gitstate-gc.pid"  # the running maintenance process
GC_LOG_FILE = "gitstate-gc.log"  # what the last automatic maintenance run printed
GC_FAILED_FILE = "gitstate-gc.failed"  # why the last maintenance run failed (gone on success)
SPARE_PREFIX = "gitstate-spare-"  # + a file's name: its spare for swap_write (store/fs.py)
HAND_EDITS_DIR = "gitstate-hand-edits"  # hand edits moved aside, kept for the operator
INCOMING_PREFIX = "gitstate-incoming-"  # quarantines of fetches in flight


def format_stamp(commit: str, state_blob: str, schema_blob: str | None) -> bytes:
    """``<commit> <state blob> <schema blob or ->``: written after each checkout."""
    return f"{commit} {state_blob} {schema_blob or '-'}\n".encode()


def parse_stamp(data: bytes) -> tuple[str, str, str] | None:
    """(commit, state blob, schema blob or "-"), or None for anything else."""
    try:
        fields = data.decode("ascii").split()
    except UnicodeDecodeError:
        return None
    if len(fields) != 3 or not all(fields):
        return None
    return fields[0], fields[1], fields[2]
