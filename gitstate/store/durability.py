"""How a write reaches the disk: the durability mode and its flushes.

Two modes (docs/reliability.md, "Durability modes", gives the reasoning and sources):

* ``strict`` — every new file is fsynced before it is renamed into place, and every
  directory that gained a name is fsynced after, so that at any moment the ref names only
  objects that are durable. Safe on any POSIX file system that honours fsync.
* ``fast`` — a new file's data is pushed to the device with ``sync_file_range`` (wait,
  write, wait: the data is on the device, the inode is not) and only the ref's directory is
  fsynced, once, after the ref's rename: the commit point. On ext4 with a journal in
  ``data=ordered`` or ``data=journal`` mode, and on XFS, that one journal commit carries the
  earlier renames and size updates and is ordered after the data already written, so after
  a power loss the ref names a complete pack or the old commit. Nowhere else is this
  reasoning known to hold, so ``auto`` picks ``fast`` only there.

``auto`` decides per repository from ``statfs`` and ``/proc``: ext4 is taken as journaled
when the kernel lists a jbd2 journal for its device, and as ordered unless its mount options
say ``data=writeback``. Anything unknown, or any doubt, is ``strict``.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import queue
import threading
from pathlib import Path

EXT4_MAGIC = 0xEF53
XFS_MAGIC = 0x58465342
_SYNC_FILE_RANGE = 1 | 2 | 4  # WAIT_BEFORE | WRITE | WAIT_AFTER
_START = 2  # WRITE: start the writeback, do not wait

_libc: ctypes.CDLL | None = None


class Flush:
    """The flushes of one mode. ``data(fd)``: a new file's bytes, before its rename;
    ``directory(path)``: a directory that gained a name; ``commit(path)``: the ref's
    directory after the ref's rename (both modes fsync it: it is the commit point)."""

    mode = "strict"

    def start(self, fd: int) -> None:
        """Start pushing ``fd``'s data out without waiting, so that the writebacks of
        several files overlap; ``data`` waits. Strict: nothing (fsync does all of it)."""
        return None

    def data(self, fd: int) -> None:
        os.fsync(fd)

    def data_all(self, fds: list[int]) -> None:
        """``data`` for several new files between which no order is needed (a commit's
        pack, its index and the ref's lock file): flushed at once, so the device works on
        their writes together (three fsyncs at once took 0.52 ms on this project's disk,
        one after another 0.85 ms)."""
        fsync_all(fds)

    def directory(self, path: str | Path) -> None:
        fsync_dir(path)

    def commit(self, path: str | Path) -> None:
        fsync_dir(path)


class FastFlush(Flush):
    mode = "fast"

    def start(self, fd: int) -> None:
        sync_file_range(fd, _START)

    def data(self, fd: int) -> None:
        sync_file_range(fd)

    def data_all(self, fds: list[int]) -> None:
        for fd in fds:  # every writeback started before waiting for any
            self.start(fd)
        for fd in fds:
            self.data(fd)

    def directory(self, path: str | Path) -> None:
        return None  # carried by the journal commit of ``commit``


class Deferred(Flush):
    """No flush at all: for a write a write-ahead log already made durable (the
    checkpointer's, gitstate/threads/wal.py, flushes its record first and these files at its
    checkpoint, and puts them back from the record after a crash)."""

    mode = "deferred"

    def data(self, fd: int) -> None:
        return None

    def data_all(self, fds: list[int]) -> None:
        return None

    def directory(self, path: str | Path) -> None:
        return None

    def commit(self, path: str | Path) -> None:
        return None


def flush_for(mode: str, path: Path) -> Flush:
    """The flushes for ``mode`` (``auto``: decided from the file system at ``path``)."""
    if mode == "auto":
        mode = detect(path)
    return FastFlush() if mode == "fast" else Flush()


def detect(path: Path) -> str:
    """``fast`` on a journaled, ordered ext4 and on XFS; ``strict`` anywhere else."""
    try:
        magic = _fs_magic(path)
        if magic == XFS_MAGIC:
            return "fast"
        if magic == EXT4_MAGIC and _ext4_journaled(path):
            return "fast"
    except (OSError, ValueError):
        pass
    return "strict"


def describe(path: Path) -> str:
    """The file system at ``path`` as ``gitstate verify`` and the benchmarks print it."""
    try:
        magic = _fs_magic(path)
    except (OSError, ValueError):
        return "unknown"
    if magic == XFS_MAGIC:
        return "xfs"
    if magic == EXT4_MAGIC:
        return "ext4 (journal)" if _ext4_journaled(path) else "ext4 (no journal)"
    return f"other (0x{magic:x})"


class _StatFs(ctypes.Structure):
    _fields_ = [("f_type", ctypes.c_long), ("f_bsize", ctypes.c_long),
                ("f_blocks", ctypes.c_ulong), ("f_bfree", ctypes.c_ulong),
                ("f_bavail", ctypes.c_ulong), ("f_files", ctypes.c_ulong),
                ("f_ffree", ctypes.c_ulong), ("f_fsid", ctypes.c_int * 2),
                ("f_namelen", ctypes.c_long), ("f_frsize", ctypes.c_long),
                ("f_flags", ctypes.c_long), ("f_spare", ctypes.c_long * 4)]


def _load_libc() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return _libc


def _fs_magic(path: Path) -> int:
    """statfs(2)'s f_type (Python's os.statvfs does not report it)."""
    buf = _StatFs()
    if _load_libc().statfs(os.fsencode(path), ctypes.byref(buf)) != 0:
        raise OSError(ctypes.get_errno(), "statfs failed")
    return int(buf.f_type) & 0xFFFFFFFF


def _device_name(path: Path) -> str | None:
    """The block device (``vda1``, ``loop0``) of the mount that holds ``path``."""
    dev = os.stat(path).st_dev
    wanted = f"{os.major(dev)}:{os.minor(dev)}"
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 2 and fields[2] == wanted and " - " in line:
                source = line.split(" - ", 1)[1].split()[1]
                return os.path.basename(os.path.realpath(source))
    return None


def _ext4_journaled(path: Path) -> bool:
    name = _device_name(path)
    if not name:
        return False
    journals = os.listdir("/proc/fs/jbd2") if os.path.isdir("/proc/fs/jbd2") else []
    if not any(j.rsplit("-", 1)[0] == name for j in journals):
        return False
    options = Path("/proc/fs/ext4") / name / "options"
    with contextlib.suppress(OSError):
        if "data=writeback" in options.read_text(encoding="utf-8").split():
            return False
    return True


def sync_file_range(fd: int, flags: int = _SYNC_FILE_RANGE) -> None:
    """Push ``fd``'s dirty data to the device and wait for it (not its metadata); with
    ``_START``, only start pushing it."""
    libc = _load_libc()
    if libc.sync_file_range(fd, ctypes.c_int64(0), ctypes.c_int64(0),
                            ctypes.c_uint(flags)) != 0 and flags != _START:
        os.fdatasync(fd)  # not supported here: the portable, stronger call


def fsync_all(fds: list[int]) -> None:
    """fsync every descriptor, at the same time: the first in this thread, the others in
    helper threads (fsync releases the GIL), each durable when this returns. The first
    error is raised once all are done."""
    if len(fds) < 2:
        for fd in fds:
            os.fsync(fd)
        return
    done: queue.SimpleQueue[OSError | None] = queue.SimpleQueue()
    for helper, fd in zip(_helpers(len(fds) - 1), fds[1:], strict=True):
        helper.put((fd, done))
    errors: list[OSError] = []
    try:
        os.fsync(fds[0])
    except OSError as exc:
        errors.append(exc)
    for _ in fds[1:]:
        error = done.get()
        if error is not None:
            errors.append(error)
    if errors:
        raise errors[0]


_Job = tuple[int, "queue.SimpleQueue[OSError | None]"]
_HELPERS: dict[int, list[queue.SimpleQueue[_Job]]] = {}  # per process: a fork has none
_HELPERS_GUARD = threading.Lock()


def _helpers(n: int) -> list[queue.SimpleQueue[_Job]]:
    """``n`` helper threads' queues, started on first use (daemons: they hold nothing)."""
    with _HELPERS_GUARD:
        have = _HELPERS.setdefault(os.getpid(), [])
        while len(have) < n:
            jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
            threading.Thread(target=_fsync_forever, args=(jobs,), daemon=True,
                             name="gitstate-fsync").start()
            have.append(jobs)
        return have[:n]


def _fsync_forever(jobs: queue.SimpleQueue[_Job]) -> None:
    while True:
        fd, done = jobs.get()
        try:
            os.fsync(fd)
        except OSError as exc:
            done.put(exc)
        else:
            done.put(None)


def fsync_paths(paths: list[str], at_once: int = 16) -> None:
    """fsync each existing file or directory of ``paths`` (one vanished since, a pack
    folded into another, is skipped), ``at_once`` at the same time."""
    for start in range(0, len(paths), at_once):
        fds = []
        try:
            for path in paths[start:start + at_once]:
                try:
                    fds.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
                except FileNotFoundError:
                    continue
            fsync_all(fds)
        finally:
            for fd in fds:
                os.close(fd)


def fsync_dir(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
