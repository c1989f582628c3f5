"""The repository itself: opening and creating it, the durability mode, the quarantine of
foreign objects, the write lock and the sweep of what a killed writer left (see the package
docstring for the write protocol). Reading objects and history is ``objects.py``'s, reading
refs ``refs.py``'s; :class:`RepoBase` joins them."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Self, TypeVar

from dulwich.errors import NotGitRepository
from dulwich.file import FileLocked
from dulwich.object_store import BaseObjectStore
from dulwich.objects import ObjectID
from dulwich.refs import Ref
from dulwich.repo import Repo

from ..core import layout
from ..core.errors import NotInitialized, StoreError
from ..core.layout import INCOMING_PREFIX, LOCK_FILE, WRITING_FILE
from ..system import locking
from . import packwrite, recovery
from .durability import Flush, flush_for
from .fs import exclude_projection, holds_data
from .objects import ObjectReads
from .refs import RefReads

BRANCH = Ref(layout.BRANCH.encode())
ZERO = ObjectID(b"0" * 40)
T = TypeVar("T")


def release_at_exit(owner: object, close: Callable[..., object],
                    *args: object) -> Callable[[], object]:
    """The one way an object holding dulwich handles (a repository, packs) makes sure
    they are released exactly once: call the returned function to release them now; if
    the owner is collected or the interpreter exits first, they are released then,
    silently, before modules are torn down."""
    finalizer = weakref.finalize(owner, close, *args)

    def release() -> object:
        return finalizer()

    return release


def _close_repo(repo: Repo, stores: list[BaseObjectStore]) -> None:
    for store in stores:
        with contextlib.suppress(Exception):
            store.close()
    with contextlib.suppress(Exception):
        repo.close()


@dataclass(frozen=True)
class WorktreeStatus:
    """How the working tree relates to HEAD."""

    clean: bool
    leftover: bool  # a killed write's remains: repair silently
    hand_edited: tuple[str, ...]  # files edited by hand: report, never inject
    damaged: tuple[str, ...] = ()  # what a crash leaves: kept aside, repaired
    invalid: tuple[tuple[str, str], ...] = ()  # hand edits that are no valid state, and why


class RepoBase(ObjectReads, RefReads):
    """One state repository: opening and creating it, the lock, objects and refs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # a working repository keeps .git; a bare one (a server) is the git dir itself
        self.git_dir = path / ".git" if (path / ".git").exists() else path
        # as strings, for the paths every write joins (pathlib's joins cost more than the
        # system calls they name)
        self.git_path = str(self.git_dir)
        self.pack_dir = f"{self.git_path}/objects/pack"
        try:
            self.repo = Repo(str(path))
        except NotGitRepository as exc:
            raise NotInitialized(
                f"{path} is not a gitstate repository; run `gitstate init` first",
            ) from exc
        # dulwich leaves loose objects un-fsynced by default (invariant 4); its own writes
        # (fetched objects) keep that, gitstate's commits go through packwrite and `flush`
        self.repo.object_store.fsync_object_files = True
        # dulwich's packs and indexes warn from __del__ when left open, and at interpreter
        # exit that warning itself fails ("sys.meta_path is None"): the handles are
        # released by close(), or by this finalizer when the owner forgets (it runs at
        # garbage collection or in atexit, while modules still exist)
        self._stores: list[BaseObjectStore] = [self.repo.object_store]
        self._release = release_at_exit(self, _close_repo, self.repo, self._stores)
        self.flush: Flush = Flush()  # strict until the owner picks a mode (set_durability)
        # commit id -> (parent ids, file name -> blob id): commits are immutable, so the few
        # most recent ones are kept to spare re-reading objects on every write.
        self._known = {}
        self.last_commit = None
        self._last_commit_time = 0
        self.last_objects: list[str] = []
        self._lock_fd: int | None = None  # the write lock's descriptor, while held
        self._fold_calls = 0  # writes of this process, for PackOps.consolidate
        # foreign objects (a fetch's quarantine, a pushed update in the hook): every read
        # checks the object's size from its header first and parses trees and commits by
        # git fsck's rules (``rawobj``); set by ``use_quarantine`` and the fetch quarantine
        self.strict = False
        self._object_dirs = [f"{self.git_path}/objects"]
        self._headers = None

    def set_durability(self, mode: str) -> str:
        """Pick the flushes for ``mode`` (auto: from this repository's file system);
        returns the mode in force."""
        self.flush = flush_for(mode, self.git_dir)
        return self.flush.mode

    def use_quarantine(self, object_dir: str) -> None:
        """In a pre-receive hook, the pushed objects wait in git's quarantine directory
        (GIT_OBJECT_DIRECTORY): read from it first, then from the repository."""
        from dulwich.object_store import DiskObjectStore, OverlayObjectStore

        quarantine = DiskObjectStore(object_dir)
        self._stores.append(quarantine)
        overlay = OverlayObjectStore([quarantine, self.repo.object_store])
        self.repo.object_store = overlay  # type: ignore[assignment]
        self._object_dirs.insert(0, object_dir)
        self.strict = True
        self.close_headers()

    # -- creation -------------------------------------------------------------------------

    @classmethod
    def create(cls, path: Path) -> Self:
        """Open the repository at ``path``, creating it (on branch main, no commit yet) when
        it is absent, or when an earlier create was interrupted before it wrote anything
        worth keeping (no object, no ref). Call it with the directory locked."""
        path.mkdir(parents=True, exist_ok=True)
        git_dir = path / ".git"
        if git_dir.exists():
            try:
                if not (git_dir / "HEAD").is_file() or not (git_dir / "config").is_file():
                    raise NotInitialized(f"{git_dir} is incomplete")  # git init writes them last
                store = cls(path)
            except NotInitialized:
                if holds_data(git_dir):
                    raise NotInitialized(
                        f"{git_dir} is not a usable git repository but holds objects or "
                        "refs; move it aside or repair it with git, then run `gitstate "
                        "init` again") from None
                shutil.rmtree(git_dir)  # an interrupted create: nothing in it to lose
            else:
                exclude_projection(store.git_dir)
                return store
        Repo.init(str(path), default_branch=b"main").close()
        store = cls(path)
        exclude_projection(store.git_dir)
        return store

    def close(self) -> None:
        """Release every file dulwich holds open (idempotent)."""
        self.close_headers()
        self._release()

    # -- locking --------------------------------------------------------------------------

    @contextlib.contextmanager
    def try_lock(self) -> Iterator[bool]:
        """The write lock if it is free right now; yields whether it was taken."""
        with locking.attempt(self.git_dir / LOCK_FILE) as taken:
            yield taken

    @contextlib.contextmanager
    def lock(self, timeout: float = 60.0) -> Iterator[None]:
        """The kernel write lock: released by the kernel when its holder dies."""
        with locking.exclusive(self.git_dir / LOCK_FILE, timeout) as fd:
            self._lock_fd = fd
            try:
                yield
            finally:
                self._lock_fd = None

    @contextlib.contextmanager
    def writing(self) -> Iterator[bool]:
        """Mark a write in progress (call with the lock held). Yields True when the marker
        was already there, i.e. the previous main writer died mid-write: its lock and
        temporary files are then swept (main's only: store/recovery.py), since with the
        kernel lock held none of them is live.

        The marker is the first byte of the lock file (``1`` while a write runs): the file
        is open anyway, and a byte written in place costs a fraction of creating and
        removing a file on every write. Only a process's death must survive, not a power
        loss, so it is never flushed. A ``gitstate-writing`` file is the marker of older
        versions, honoured the same way."""
        fd = self._lock_fd
        if fd is None:
            raise StoreError("a write was started without the write lock", rule="store.lock")
        legacy = self.git_dir / WRITING_FILE
        crashed = os.pread(fd, 1, 0) == b"1" or legacy.exists()
        if crashed:
            self.sweep_stale_locks()
            with contextlib.suppress(FileNotFoundError):
                legacy.unlink()
        os.pwrite(fd, b"1", 0)  # an OSError here (a full disk) is mapped by the engine
        try:
            yield crashed
        finally:  # a refusal or an error is a clean end; only a dead process skips this
            os.pwrite(fd, b"0", 0)

    def sweep_stale_locks(self) -> list[Path]:
        """Remove what a killed main writer left (main's lock held): main's own lock and
        temporary files, shared files' abandoned ones (``recovery``), dead processes' pack
        files, free quarantines."""
        removed = self.sweep_quarantines() + recovery.sweep_shared(self.git_dir)
        removed += recovery.sweep_main(self.git_dir, self.path)
        return removed + packwrite.sweep(self.git_dir / "objects" / "pack")

    def sweep_quarantines(self) -> list[Path]:
        """Remove the fetch quarantines no live fetch holds: a fetch runs without the write
        lock and flocks its quarantine directory itself; one still being made (``*.tmp``)
        is swept only once it is a minute old."""
        removed = []
        for stale in self.git_dir.glob(INCOMING_PREFIX + "*"):
            if stale.name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    if time.time() - stale.stat().st_mtime > 60:
                        shutil.rmtree(stale, ignore_errors=True)
                        removed.append(stale)
                continue
            with locking.attempt_directory(stale) as free:
                if free:
                    shutil.rmtree(stale, ignore_errors=True)
                    removed.append(stale)
        return removed

    def _stale_lock_safe(self, action: Callable[[], T], own_lock: str) -> T:
        """Run a dulwich write of one ref, holding that ref's owner's kernel lock: the ref's
        own ``<ref>.lock`` it trips over is then a killed writer's, removed and the write
        tried again. Any other lock (``packed-refs.lock``, shared by every namespace) may be
        a live writer's: waited for (4 s), never removed."""
        lock = own_lock
        for attempt in range(40):
            try:
                return action()
            except FileLocked as exc:
                lock = os.fsdecode(exc.lockfilename)
                if os.path.abspath(lock) == os.path.abspath(own_lock):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(lock)
                else:
                    time.sleep(0.005 * attempt)
        raise StoreError(f"{lock} stays taken: another program is writing; once none runs, "
                         "remove it and try again", rule="store.contention")

    @staticmethod
    def _fsync_dirs(dirs: set[str]) -> None:
        """A new directory entry (object file, renamed ref) is durable only once its
        directory is fsynced. (A fan-out directory that vanished was emptied by a concurrent
        prune-packed: its objects are in a pack, which the packer made durable.)"""
        for d in dirs:
            try:
                fd = os.open(d, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

