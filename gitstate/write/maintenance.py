"""Maintenance: packing the object store, by hand (`gitstate gc`) or automatically.

Every commit adds three loose objects (about 12 KiB on disk); packed, they take well under
1 KiB. Automatic maintenance starts a detached ``gitstate gc --auto`` process when a write
estimates more than ``[gitstate] gc_loose_objects`` loose objects, so no write waits for it and
the write lock is never held while packing (see ``GitStore.gc`` for why that is safe).
A pid file keeps to one maintenance process per repository.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import Refused, disk_full
from ..core.layout import GC_FAILED_FILE, GC_LOG_FILE, PID_FILE
from ..system import safefile

if TYPE_CHECKING:
    from ..history.reader import StateReader
    from ..store import GitStore
    from ..system.config import Config

STALE_SECONDS = 3600
PACKS_BEFORE_GC = 32  # the inline folding leaves big packs alone; past this, a full repack


def after_commit(store: GitStore, agent_dir: Path, config: Config, commit: str,
                 *_plan: object) -> None:
    """The engine's post-commit hook: :func:`maybe_start`, never failing the write."""
    with contextlib.suppress(OSError):
        maybe_start(store, agent_dir, config, commit)


def maybe_start(store: GitStore, agent_dir: Path, config: Config, commit: str) -> bool:
    """After a write: start background maintenance when loose objects pile up."""
    objects = store.last_objects or [commit]
    if not config.auto_gc or (store.pack_count() <= PACKS_BEFORE_GC and
                              store.loose_estimate(objects) < config.gc_loose_objects):
        return False
    return _spawn(store, agent_dir)


def maybe_repack(store: GitStore, agent_dir: Path, config: Config, threshold: int) -> bool:
    """For writers whose packs are folded inline (LangGraph threads: no loose objects,
    few packs): start background maintenance once the packs beside the largest one hold
    more than ``threshold`` bytes. Those are written whole, without deltas; git's repack
    stores each file's versions as deltas against each other (the checkpointer names a
    channel's file the same in every commit for that), so disk stays linear in the
    number of commits."""
    if not config.auto_gc:
        return False
    sizes = sorted(store.pack_sizes().values())
    if sum(sizes[:-1]) <= threshold:
        return False
    return _spawn(store, agent_dir)


def _spawn(store: GitStore, agent_dir: Path) -> bool:
    """Start one detached ``gitstate gc --auto`` (none when one runs already)."""
    pid_path = store.git_dir / PID_FILE
    if not _claim(pid_path, write_pid=False):  # empty until the child's pid is known
        return False
    try:
        # the run's output goes to a log beside the pid file: a run that fails (or a child
        # that cannot even start) leaves its reason there, and `verify` names it
        log_path = store.git_dir / GC_LOG_FILE
        with contextlib.suppress(FileNotFoundError):
            log_path.unlink()  # a fresh file: never write through a planted symlink or FIFO
        fd = safefile.create_new(log_path)
        with os.fdopen(fd, "wb") as log:
            child = subprocess.Popen(  # detached: the write returns at once
                [sys.executable, "-m", "gitstate", "--agent-dir", str(agent_dir), "gc",
                 "--auto"], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True, close_fds=True)
    except OSError:
        pid_path.unlink()
        raise
    _write_pid(pid_path, child.pid)
    return True


def wait_idle(git_dir: Path, timeout: float = 300.0) -> bool:
    """Wait until no maintenance run holds the repository; False on timeout. A pid file
    whose process is gone (killed, or failed on a full disk) is stale and ends the wait."""
    pid_path = git_dir / PID_FILE
    deadline = time.monotonic() + timeout
    while pid_path.exists():
        if _stale(pid_path):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _stale(pid_path: Path) -> bool:
    """Whether the maintenance run a pid file names is over: its process no longer exists,
    the file cannot be read as a pid, or it is older than any run takes."""
    try:
        data = safefile.read_regular(pid_path, 64)
        if time.time() - pid_path.stat().st_mtime > STALE_SECONDS:
            return True
    except FileNotFoundError:
        return True
    except OSError:
        return True
    text = data.decode("ascii", "replace").strip()
    if not text:  # being written by the claimant this very moment
        return time.time() - pid_path.stat().st_mtime > 5
    if not text.isdigit():
        return True
    try:
        os.kill(int(text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # alive, another user's
    except (OverflowError, ValueError):
        return True
    try:  # a killed child not yet reaped by its parent is a zombie: over all the same
        with open(f"/proc/{int(text)}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[:1] == [b"Z"]
    except OSError:
        return False


def _claim(pid_path: Path, write_pid: bool = True) -> bool:
    for _ in range(2):
        try:
            fd = safefile.create_new(pid_path)
        except FileExistsError:
            if not _stale(pid_path):
                return False
            with contextlib.suppress(FileNotFoundError):
                pid_path.unlink()  # a maintenance run that died: take its place
            continue
        try:
            if write_pid:
                os.write(fd, str(os.getpid()).encode())
        except OSError:  # a full disk: no empty pid file left to stall the next run
            with contextlib.suppress(OSError):
                pid_path.unlink()
            raise
        finally:
            os.close(fd)
        return True
    return False


def _write_pid(pid_path: Path, pid: int) -> None:
    """Name the process that does the work (atomically: a reader sees one pid or the other)."""
    _replace_text(pid_path, str(pid))


def _replace_text(path: Path, text: str) -> None:
    safefile.write_atomic(path, text.encode("utf-8"))


def last_failure(git_dir: Path) -> str | None:
    """Why the last maintenance run failed, or None (it succeeded, or none has run)."""
    try:
        text = safefile.read_regular(git_dir / GC_FAILED_FILE, 4096)
    except OSError:
        return None
    return text.decode("utf-8", "replace").strip() or None


def run_gc(reader: StateReader, auto: bool = False) -> dict[str, Any]:
    """Pack now; returns the figures. The pid file marks the run (``auto``: maybe_start
    claimed it already), so `verify` waits rather than read a half-moved object store."""
    pid_path = reader.store.git_dir / PID_FILE
    try:
        claimed = auto or _claim(pid_path)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise disk_full("maintenance could not start; nothing was changed",
                            "free some disk space and run `gitstate gc` again") from exc
        raise
    if not claimed:
        raise Refused("maintenance is already running on this repository", rule="gc.running")
    start = time.perf_counter()
    failed_path = reader.store.git_dir / GC_FAILED_FILE
    try:
        figures = reader.store.gc()
    except BaseException as exc:
        with contextlib.suppress(OSError):  # best effort: a full disk may refuse this too
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            _replace_text(failed_path, f"{stamp} {type(exc).__name__}: {exc}\n")
        raise
    else:
        with contextlib.suppress(FileNotFoundError):
            failed_path.unlink()
    finally:
        with contextlib.suppress(FileNotFoundError):
            pid_path.unlink()
    commits = len(reader.full_history())
    return {**figures, "commits": commits, "seconds": round(time.perf_counter() - start, 3),
            "bytes_per_commit": round(figures["bytes_after"] / max(commits, 1), 1)}
