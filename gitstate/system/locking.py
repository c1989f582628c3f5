"""The write lock of a state repository: an exclusive ``flock`` on one file.

The kernel releases a flock when its holder dies, so a killed writer never leaves a lock
that someone must clean up by hand. This module owns how a writer waits for it.

Waiting is a *blocking* flock, not a loop of non-blocking tries with sleeps in between. Under
steady load the lock is free only for the instant between one writer's release and the next
writer taking it again; a poller asleep at that instant misses it, and can miss it for its
whole timeout while other writers go round (seen: a writer starved for 60 s beside three
others). A blocked waiter is woken by the kernel at the release instead. The kernel call has
no timeout, so it runs in a helper thread on its own descriptor; on timeout the thread is
abandoned and closes its descriptor (releasing the lock) whenever it gets the lock later.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from ..core.errors import LockTimeout
from . import safefile


def _open(path: Path) -> int:
    # never through a symlink, a FIFO or a hard link: the holder writes a marker byte in it
    return safefile.open_lock(path)


def take_now(fd: int) -> bool:
    """An exclusive flock on ``fd`` if it is free right now; whether it was taken."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class _Waiter:
    """A blocking flock in a daemon thread, abandoned cleanly on timeout."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None
        self.error: OSError | None = None
        self.abandoned = False
        self.done = threading.Event()
        self.guard = threading.Lock()

    def run(self) -> None:
        try:
            fd = _open(self.path)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            self.error = exc
            self.done.set()
            return
        with self.guard:
            if self.abandoned:  # the caller gave up: let the next writer have it
                os.close(fd)
                return
            self.fd = fd
        self.done.set()

    def wait(self, timeout: float) -> int | None:
        """The locked descriptor, or None when ``timeout`` passed first."""
        threading.Thread(target=self.run, name="gitstate-lock-wait", daemon=True).start()
        interrupted = True
        try:
            self.done.wait(timeout)
            interrupted = False
        finally:  # on timeout, or interrupted (Ctrl-C): never keep a lock nobody will free
            with self.guard:
                if self.fd is None:
                    self.abandoned = True
                elif interrupted:
                    os.close(self.fd)
                    self.fd = None
        if self.error is not None:
            raise self.error
        return self.fd


@contextlib.contextmanager
def exclusive(path: Path, timeout: float = 60.0) -> Iterator[int]:
    """Hold the lock at ``path``; LockTimeout when another holder keeps it ``timeout`` s.
    Yields the locked descriptor (the holder may keep a marker in the file's bytes)."""
    fd = _open(path)
    if not take_now(fd):  # contended: wait in the kernel, not in a sleep loop
        os.close(fd)
        waited = _Waiter(path).wait(timeout)
        if waited is None:
            raise LockTimeout(f"another writer held {path} for {timeout:.0f}s")
        fd = waited
    try:
        yield fd
    finally:
        os.close(fd)  # closing the descriptor releases the flock


@contextlib.contextmanager
def attempt(path: Path) -> Iterator[bool]:
    """The lock if it is free right now; yields whether it was taken. A lock file that
    cannot be opened (a read-only repository) counts as not taken."""
    try:
        fd = _open(path)
    except OSError:
        yield False
        return
    try:
        yield take_now(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def directory(path: Path) -> Iterator[None]:
    """An exclusive flock on a directory itself (``init``: before the repository and its
    lock file exist, parallel inits of one directory take turns on the directory)."""
    fd = safefile.open_dir(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def attempt_directory(path: Path) -> Iterator[bool]:
    """A directory's own flock if it is free right now (a fetch quarantine no live fetch
    holds); yields whether it was taken. A directory that cannot be opened: not taken."""
    try:
        fd = safefile.open_dir(path)
    except OSError:
        yield False
        return
    try:
        yield take_now(fd)
    finally:
        os.close(fd)
