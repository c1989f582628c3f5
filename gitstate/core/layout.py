"""On-disk names and formats: the one place they are defined. Standard library only (the
wake-up path imports it).

An agent directory holds ``config.toml`` and ``state/``, a git repository on branch main whose
commits hold exactly :data:`TREE_FILES`. Next to the repository's own files, ``.git`` holds
gitstate's caches and markers (the stamp, the schema cache, the write lock, the write-in-progress
marker, the maintenance pid file, moved-aside hand edits, fetch quarantines), none of them
committed and all of them re-derivable or safe to lose.

Ref names: :data:`NAMESPACES` holds the pattern of every ref gitstate keeps or exchanges with
a remote; :func:`ref_name_problem` applies git's own rules (``git check-ref-format``) and then
the namespace's pattern. A name that comes from elsewhere (a remote's advertisement, a fetch
result, a pushed update) is checked with it before it is used at all, and is never joined into
a path before that check passed.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not `from typing import`: the wake-up path imports this module
if TYPE_CHECKING:
    from typing import TypeGuard

VERSION = "0.1.0"  # the package version, the same as pyproject.toml's (a test checks)

# -- the agent directory and the repository ------------------------------------------------
CONFIG_FILE = "config.toml"
STATE_DIR = "state"
BRANCH = "refs/heads/main"
REMOTE_REF = "refs/remotes/origin/main"  # the commit last seen on the remote: the lease
UNPUSHED_PREFIX = "refs/gitstate/unpushed/"  # local commits a push could not re-apply
RUNS_PREFIX = "refs/heads/runs/"  # + a run id: one run's ledger
RUNS_TRACKING_PREFIX = "refs/remotes/origin/runs/"  # a run's head last seen on the remote
JOURNAL_REF = "refs/gitstate/refusals"  # this clone's refusal journal
JOURNAL_PREVIOUS_REF = "refs/gitstate/refusals-previous"  # its previous generation
JOURNALS_PREFIX = "refs/gitstate/refusals/"  # + an origin id: a clone's journal on the remote
PULLED_JOURNALS_PREFIX = "refs/gitstate/pulled-refusals/"  # + an origin id: pulled here
JOURNAL_TRACKING_REF = "refs/remotes/origin/gitstate-refusals"
THREADS_PREFIX = "refs/gitstate/threads/"  # + thread/namespace/kind (LangGraph checkpoints)
THREADS_TRACKING_PREFIX = "refs/remotes/origin/threads/"  # a thread's head last seen there
THREADS_ARCHIVE_PREFIX = "refs/gitstate/archive/threads/"  # + thread/time/...: deleted ones

# -- ref namespaces: name -> pattern (a regular expression the whole name must match) -------
RUN_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"  # ".." and a ".lock" end: git's rules
ORIGIN_ID_PATTERN = r"[0-9a-f]{16}"  # a journal's origin: 8 random bytes, lowercase hex
_THREAD_PART = r"[A-Za-z0-9_%+-]{1,121}"  # threads.format.enc's output
NAMESPACES: dict[str, str] = {
    "main": BRANCH,
    "runs": RUNS_PREFIX + RUN_ID_PATTERN,
    "journals": JOURNALS_PREFIX + ORIGIN_ID_PATTERN,
    "threads": THREADS_PREFIX + _THREAD_PART + "/" + _THREAD_PART + "/[a-z]{1,16}",
    # kept here only, never taken from a remote
    "tracking": f"{REMOTE_REF}|{RUNS_TRACKING_PREFIX}{RUN_ID_PATTERN}|{JOURNAL_TRACKING_REF}|"
                f"{THREADS_TRACKING_PREFIX}{_THREAD_PART}/{_THREAD_PART}/checkpoints",
    "journal": f"{JOURNAL_REF}|{JOURNAL_PREVIOUS_REF}",
    "pulled_journals": PULLED_JOURNALS_PREFIX + ORIGIN_ID_PATTERN,
    "unpushed": UNPUSHED_PREFIX + r"[0-9]{8}T[0-9]{12}Z",
}


def ref_owner(name: str) -> str:
    """Whose kernel lock every writer of the ref ``name`` holds, and so who alone may remove
    the ``<ref>.lock`` a killed writer of it left: "run" (the run's :data:`RUN_LOCK_FILE`),
    "thread" (the thread's :data:`THREAD_LOCK_FILE`), "journal" (:data:`REFUSALS_LOCK_FILE`)
    or "main" (:data:`LOCK_FILE`: main, the tracking refs, pulled journals, unpushed commits;
    sync moves them all under the write lock). See docs/reliability.md, "Recovery"."""
    if name.startswith(RUNS_PREFIX):
        return "run"
    if name.startswith((THREADS_PREFIX, THREADS_ARCHIVE_PREFIX)):
        return "thread"
    if name in (JOURNAL_REF, JOURNAL_PREVIOUS_REF):
        return "journal"
    return "main"


# the namespaces a remote holds, by the prefix that puts a name in it: a remote's name that
# starts with one of these prefixes is that namespace's or refused
REMOTE_NAMESPACES: dict[str, str] = {BRANCH: "main", RUNS_PREFIX: "runs",
                                     JOURNALS_PREFIX: "journals", THREADS_PREFIX: "threads"}

# -- what a commit's tree may hold ---------------------------------------------------------
STATE_FILE = "working_state.json"
SCHEMA_FILE = "schema.yaml"
STATE_MAX_BYTES = 8 << 20  # 256 stored keys of the largest entries, and a 1 MiB handoff
SCHEMA_MAX_BYTES = 64 << 10  # what schema.yaml itself accepts
TREE_FILES: dict[str, int] = {STATE_FILE: STATE_MAX_BYTES, SCHEMA_FILE: SCHEMA_MAX_BYTES}
REQUIRED = (STATE_FILE,)
# the largest object any namespace holds (a commit whose trailers carry a whole state is the
# largest): an object from elsewhere declaring more is refused before it is inflated
OBJECT_MAX_BYTES = 2 * STATE_MAX_BYTES
FILE_MODE = 0o100644

# -- beside the tree, never committed (working tree) --------------------------------------
HISTORY_FILE = "working_state_history.jsonl"  # the projection of the log (.git/info/exclude)



def stray_files(state_dir: str | os.PathLike[str]) -> list[str]:
    """Names in the state directory that gitstate neither writes nor reads (verify lists
    them; init refuses a directory holding them)."""
    known = {".git", HISTORY_FILE, *TREE_FILES}
    return sorted(name for name in os.listdir(state_dir) if name not in known
                  and not (name.startswith(".") and name.endswith(".tmp")))


# -- inside .git ---------------------------------------------------------------------------
LOCK_FILE = "gitstate.lock"  # the kernel write lock (flock)
REPACK_LOCK_FILE = "gitstate-repack.flock"  # one pack consolidation at a time (a flock)
STAMP_FILE = "gitstate-stamp"  # what the render fast path checks (format below)
CLOCK_FILE = "gitstate-clock.json"  # the clock model's anchor (system/clock.py)
SCHEMA_CACHE_FILE = "gitstate-schema.json"  # the compiled schema, for the wake-up path
CONFIG_CACHE_FILE = "gitstate-config.json"  # config.toml parsed, keyed by its SHA-1 (config.py)
WRITING_FILE = "gitstate-writing"  # a write in progress; left behind only by a killed one
PID_FILE = "gitstate-gc.pid"  # the running maintenance process
GC_LOG_FILE = "gitstate-gc.log"  # what the last automatic maintenance run printed
GC_FAILED_FILE = "gitstate-gc.failed"  # why the last maintenance run failed (gone on success)
SPARE_PREFIX = "gitstate-spare-"  # + a file's name: its spare for swap_write (store/fs.py)
HAND_EDITS_DIR = "gitstate-hand-edits"  # hand edits moved aside, kept for the operator
INCOMING_PREFIX = "gitstate-incoming-"  # quarantines of fetches in flight
RECEIPTS_FILE = "gitstate-receipts.jsonl"  # the wake-up receipts (history/receipts.py)
REDACT_KEY_FILE = "gitstate-redact.key"  # the key of `sensitive: redact` (history/redact.py)
ORIGIN_FILE = "gitstate-origin"  # this clone's journal name on the remote (history/refusals.py)
REFUSALS_LOCK_FILE = "gitstate-refusals.flock"  # the refusal journal's own lock
REFUSALS_FAILED_FILE = "gitstate-refusals.failed"  # refusals that could not be journaled
RUN_LOCK_FILE = "gitstate-run-{run}.flock"  # one run ledger's lock (runs/ledger.py, runs/sync.py)
RUN_CACHE_DIR = "gitstate-run-cache"  # + <run>.json: a run's parsed head (runs/ledger.py)
THREAD_LOCK_FILE = "gitstate-thread-{digest}.flock"  # one LangGraph thread's lock
THREAD_JOURNAL_FILE = "gitstate-thread-{digest}.pending"  # its pending writes (threads/)
THREAD_INDEX_FILE = "gitstate-threads.idx"  # all threads' checkpoint index (langgraph/)
THREAD_LOG_FILE = "gitstate-wal-{shard}-{half}.log"  # the threads' write-ahead log (threads/wal)
PRE_COMMIT_HOOK = "hooks/pre-commit"  # installed by init (remote/githooks.py)
EXCLUDE_FILE = "info/exclude"  # names the projection and temporary files (store/base.py)

# Every file gitstate writes under an agent directory, relative to it, with how it is
# written (safefile): "replace" (a fresh temporary file renamed over the name: whatever
# stood there is replaced, never written through), "in_place" (a lock and its marker byte,
# an appended log, a kept spare: refused, or removed and made afresh, unless a regular file
# with one link) or "new" (O_EXCL). ``{run}`` and ``{digest}`` stand for a run id and a
# thread's hash. Git's own files (objects, refs, packed-refs) are written by the store the
# same way (a new file O_EXCL, then a rename). tests/system/test_planted_files.py plants a
# symlink, a FIFO and a hard link at each entry and runs the operation that writes it.
_GIT = STATE_DIR + "/.git/"
WRITTEN_FILES: dict[str, str] = {
    CONFIG_FILE: "replace",  # demo's only: init never writes config.toml
    STATE_DIR + "/" + STATE_FILE: "replace",
    STATE_DIR + "/" + SCHEMA_FILE: "replace",
    STATE_DIR + "/" + HISTORY_FILE: "in_place",
    _GIT + "index": "replace",
    _GIT + LOCK_FILE: "in_place",
    _GIT + REPACK_LOCK_FILE: "in_place",
    _GIT + STAMP_FILE: "replace",
    _GIT + CLOCK_FILE: "replace",
    _GIT + SCHEMA_CACHE_FILE: "replace",
    _GIT + CONFIG_CACHE_FILE: "replace",
    _GIT + PID_FILE: "new",
    _GIT + GC_LOG_FILE: "new",
    _GIT + GC_FAILED_FILE: "replace",
    _GIT + SPARE_PREFIX + STATE_FILE: "in_place",
    _GIT + SPARE_PREFIX + SCHEMA_FILE: "in_place",
    _GIT + SPARE_PREFIX + "index": "in_place",
    _GIT + SPARE_PREFIX + "stamp": "in_place",
    _GIT + RECEIPTS_FILE: "in_place",
    _GIT + REDACT_KEY_FILE: "new",
    _GIT + ORIGIN_FILE: "replace",
    _GIT + REFUSALS_LOCK_FILE: "in_place",
    _GIT + REFUSALS_FAILED_FILE: "in_place",
    _GIT + RUN_LOCK_FILE: "in_place",
    _GIT + RUN_CACHE_DIR + "/{run}.json": "replace",
    _GIT + THREAD_LOCK_FILE: "in_place",
    _GIT + THREAD_JOURNAL_FILE: "in_place",
    _GIT + THREAD_INDEX_FILE: "in_place",
    _GIT + THREAD_LOG_FILE: "in_place",
    _GIT + PRE_COMMIT_HOOK: "replace",
    _GIT + EXCLUDE_FILE: "replace",
}

# The directories those files are in, relative to the agent directory: none may be a
# symlink (a planted ``state/.git/objects`` -> elsewhere would carry every write there);
# StateRepo refuses to open a repository where one is (safefile.real_dirs), since the
# writes themselves open only a file's own directory without following a link.
WRITTEN_DIRS: tuple[str, ...] = (
    STATE_DIR, _GIT[:-1], _GIT + "objects", _GIT + "objects/pack", _GIT + "refs",
    _GIT + "refs/heads", _GIT + "refs/heads/runs", _GIT + "refs/remotes",
    _GIT + "refs/remotes/origin", _GIT + "refs/remotes/origin/runs", _GIT + "refs/gitstate",
    _GIT + "refs/gitstate/unpushed", _GIT + "refs/gitstate/pulled-refusals",
    _GIT + "refs/gitstate/threads", _GIT + "hooks", _GIT + "info")
# (the run cache checks its own folder: a link there is skipped; a ref's directories below
# these are checked by every ref write, store/commits.py)


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


def ref_format_problem(name: str) -> str | None:
    """Which of git's ref-name rules (``git check-ref-format``) ``name`` breaks, or None.

    A name is ``refs/`` and slash-separated components; no component is empty, starts with
    ``.`` or ends with ``.lock``; the name holds no ``..``, ``@{``, backslash, control
    character, space or any of ``~ ^ : ? * [``, does not end with ``/`` or ``.`` and is not
    ``@``. (git itself also takes one-level names such as ``HEAD``; gitstate keeps none.)"""
    if not name.startswith("refs/"):
        return "it is not under refs/"
    if len(name.encode("utf-8", "surrogatepass")) > 1024:
        return "it is over 1024 bytes"
    bad = set(" ~^:?*[\\\x7f")
    for char in name:
        if char < " " or char in bad:
            return f"it holds {char!r}, which git does not allow in a ref name"
    if ".." in name:
        return "it holds '..'"
    if "@{" in name:
        return "it holds '@{'"
    if name.endswith(("/", ".")):
        return "it ends with '/' or '.'"
    for part in name.split("/"):
        if not part:
            return "it holds an empty component ('//')"
        if part.startswith("."):
            return f"its component {part!r} starts with '.'"
        if part.endswith(".lock"):
            return f"its component {part!r} ends with '.lock'"
    return None


def is_commit_id(text: object) -> TypeGuard[str]:
    """A full commit id, as every trailer, record and command names a commit: 40 lowercase
    hex digits (checked without ``re``, which the wake-up path does not import)."""
    return isinstance(text, str) and len(text) == 40 and not text.strip("0123456789abcdef")


def ref_name_problem(name: str, namespace: str | None = None) -> str | None:
    """Why ``name`` is not a ref gitstate may use, or None: git's rules, then the pattern of
    ``namespace`` (by default the remote namespace its prefix puts it in; a name under no
    known prefix passes on git's rules alone)."""
    problem = ref_format_problem(name)
    if problem is not None:
        return problem
    if namespace is None:
        namespace = remote_namespace(name)
        if namespace is None:
            return None
    import re  # here, not at import: the wake-up path imports this module

    pattern = NAMESPACES[namespace]
    if re.fullmatch(f"(?:{pattern})", name, flags=re.ASCII) is None:
        return f"it does not match the {namespace} namespace's pattern {pattern}"
    return None


def remote_namespace(name: str) -> str | None:
    """The namespace a remote's ref belongs to by its prefix, or None (not gitstate's)."""
    for prefix, namespace in REMOTE_NAMESPACES.items():
        if name == prefix or (prefix.endswith("/") and name.startswith(prefix)):
            return namespace
    return None
