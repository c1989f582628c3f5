"""What a killed writer leaves behind, and who removes it.

Every writer holds one kernel lock (a flock, released by the kernel when its holder dies)
for the refs it moves: main's writers ``.git/gitstate.lock``, a run's ``gitstate-run-<id>
.flock``, a LangGraph thread's ``gitstate-thread-<hash>.flock``, the refusal journal's
``gitstate-refusals.flock`` (``layout.ref_owner`` maps a ref to its owner). A ``<ref>.lock``
(git's own, O_EXCL) is made only with the owner's kernel lock held, so only a holder of that
lock can tell it is stale, and only that holder removes it: each namespace's writer replaces
its own ref's leftover lock when it next takes it (``CommitOps._lock_ref``), and main's crash
sweep below removes main's files only, never the live lock of a run, a thread or the
journal written at that very moment beside it.

Beside its ref locks main owns ``index.lock`` and ``HEAD.lock``, the temporary files of the
files only main's writes replace (in the state directory, and ``index`` and the schema cache
under .git), and loose-object locks (gitstate writes objects as packs only: a ``<sha>.lock``
in the object store is a dead dulwich's). Temporary pack files carry their writer's pid and
are removed once that process is gone (``packwrite.sweep``), whoever finds them.

Files that any process replaces without holding one lock (the checkpoint index of LangGraph
threads, which every saver compacts) leave temporary files that no lock can vouch dead:
those (``SHARED_TEMPS``) are removed once a minute old (a replacement takes milliseconds),
by main's crash sweep and by every gc, which a checkpointer starts by itself as its packs
grow (``sweep_shared``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from ..core import layout

# the files under .git that only main's writes replace (their ``.<name>.*.tmp``)
_MAIN_TEMPS = ("index", layout.SCHEMA_CACHE_FILE, layout.STAMP_FILE)
# the files under .git that any process replaces, with no lock held (their temporaries)
SHARED_TEMPS = (layout.THREAD_INDEX_FILE,)
SHARED_TEMP_SECONDS = 60  # older than this, a shared file's temporary was abandoned


def main_leftovers(git_dir: Path, state_dir: Path) -> list[Path]:
    """The lock and temporary files a killed main writer may have left (call it holding
    main's kernel lock: none of them can then be live)."""
    found = [git_dir / "index.lock", git_dir / "HEAD.lock"]
    refs = git_dir / "refs"
    for path in refs.rglob("*.lock"):
        name = path.relative_to(git_dir).as_posix()[:-len(".lock")]
        if layout.ref_owner(name) == "main":
            found.append(path)
    objects = git_dir / "objects"
    with contextlib.suppress(FileNotFoundError):
        for fan in os.listdir(objects):
            if len(fan) == 2:
                found += (objects / fan).glob("*.lock")
    found += [p for p in git_dir.glob(".*.tmp") if p.name[1:].startswith(
        tuple(name + "." for name in _MAIN_TEMPS))]
    if state_dir != git_dir:  # a bare repository (a server) has no state directory
        found += state_dir.glob(".*.tmp")
    return found


def sweep_main(git_dir: Path, state_dir: Path) -> list[Path]:
    """Remove :func:`main_leftovers` (main's kernel lock held); the paths removed."""
    removed = []
    for path in main_leftovers(git_dir, state_dir):
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            path.unlink()
            removed.append(path)
    return removed


def shared_leftovers(git_dir: Path) -> list[Path]:
    """The temporary files of :data:`SHARED_TEMPS` (``.<name>.<random>.tmp``) untouched for
    ``SHARED_TEMP_SECONDS``: a killed replacement's (no lock needed to call this)."""
    import time

    found = []
    prefixes = tuple(f".{name}." for name in SHARED_TEMPS)
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(git_dir):
            if name.startswith(prefixes) and name.endswith(".tmp"):
                with contextlib.suppress(FileNotFoundError):
                    if time.time() - os.lstat(git_dir / name).st_mtime > SHARED_TEMP_SECONDS:
                        found.append(git_dir / name)
    return found


def sweep_shared(git_dir: Path) -> list[Path]:
    """Remove :func:`shared_leftovers`; the paths removed."""
    removed = []
    for path in shared_leftovers(git_dir):
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            path.unlink()
            removed.append(path)
    return removed
