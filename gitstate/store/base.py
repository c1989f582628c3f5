"""The repository itself: opening and creating it, the write lock, objects, refs and
history walks (see the package docstring for the write protocol)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Self, TypeVar

from dulwich.errors import NotGitRepository, PackedRefsException
from dulwich.file import FileLocked
from dulwich.object_store import BaseObjectStore
from dulwich.objects import Blob, Commit, ObjectID, ShaFile, Tree
from dulwich.refs import Ref
from dulwich.repo import Repo

from ..core import layout
from ..core.errors import NotInitialized, StoreError
from ..core.layout import INCOMING_PREFIX, LOCK_FILE, WRITING_FILE
from ..system import locking
from . import packwrite, rawobj, recovery
from .durability import Flush, flush_for
from .fs import exclude_projection, holds_data
from .objheader import HeaderError, Headers, read_strict

BRANCH = Ref(layout.BRANCH.encode())
ZERO = ObjectID(b"0" * 40)
T = TypeVar("T")
ObjT = TypeVar("ObjT", bound=ShaFile)
# the ref names gitstate itself writes (main, runs/<id>, refs/gitstate/..., thread refs in
# percent-encoding): only these are read by the fast path; the rest goes through dulwich
_OWN_REF = re.compile(r"refs/[A-Za-z0-9_%+-][A-Za-z0-9._%+-]*(/[A-Za-z0-9_%+-][A-Za-z0-9._%+-]*)*")
_REF_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _refuse_special(name: str, mode: int) -> None:
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        raise StoreError(f"{name} is not a regular file (a FIFO, device or socket was put "
                         "in its place); remove it, then run `gitstate verify`",
                         rule="store.bad_ref")


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
class CommitInfo:
    """What a history walk yields per commit."""

    id: str
    parents: tuple[str, ...]
    time: int
    message: bytes
    author: str


@dataclass(frozen=True)
class WorktreeStatus:
    """How the working tree relates to HEAD."""

    clean: bool
    leftover: bool  # a killed write's remains: repair silently
    hand_edited: tuple[str, ...]  # files edited by hand: report, never inject
    damaged: tuple[str, ...] = ()  # what a crash leaves: kept aside, repaired
    invalid: tuple[tuple[str, str], ...] = ()  # hand edits that are no valid state, and why


class RepoBase:
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
        self._known: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {}
        self.last_commit: CommitInfo | None = None
        self._last_commit_time = 0
        self.last_objects: list[str] = []
        self._lock_fd: int | None = None  # the write lock's descriptor, while held
        self._fold_calls = 0  # writes of this process, for PackOps.consolidate
        # foreign objects (a fetch's quarantine, a pushed update in the hook): every read
        # checks the object's size from its header first and parses trees and commits by
        # git fsck's rules (``rawobj``); set by ``use_quarantine`` and the fetch quarantine
        self.strict = False
        self._object_dirs = [f"{self.git_path}/objects"]
        self._headers: Headers | None = None

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

    def headers(self) -> Headers:
        """Header reads (sizes, bounded loose reads) over this store's object directories."""
        if self._headers is None:
            oid = self.repo.object_store.object_format.oid_length
            self._headers = Headers(self._object_dirs, oid)
        return self._headers

    def close_headers(self) -> None:
        if self._headers is not None:
            self._headers.close()
            self._headers = None

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

    # -- reading --------------------------------------------------------------------------

    def head(self) -> str | None:
        return self.ref(layout.BRANCH)

    def read_file(self, commit: str, name: str) -> bytes | None:
        """A file's bytes at ``commit``, or None when it is not in that tree."""
        tree = self._tree(commit)
        try:
            _, sha = tree[name.encode()]
        except KeyError:
            return None
        return self._read_as(sha, Blob, f"blob of {name} at {commit}").as_raw_string()

    def file_ids(self, commit: str) -> dict[str, str]:
        """File name -> blob id at ``commit``."""
        known = self._known.get(commit)
        if known is not None:
            return dict(known[1])
        # a name that is not UTF-8 cannot be one of ours; ``tree_entries`` reports it
        ids = {e.path.decode("utf-8", "replace"): e.sha.decode()
               for e in self._tree(commit).iteritems()}
        self._remember(commit, tuple(p.decode() for p in self._commit(commit).parents), ids)
        return dict(ids)

    def tree_entries(self, commit: str) -> list[tuple[bytes, int, str]]:
        """The (name, mode, object id) entries of ``commit``'s tree as its raw bytes hold
        them, in order, for checking a commit gitstate did not make: parsed by git fsck's
        rules (``rawobj.tree_entries``: duplicates, order, modes, names), a StoreError
        naming the rule for a tree git would refuse."""
        tree = self._tree(commit)  # dulwich keeps the raw bytes it parsed
        return rawobj.tree_entries(tree.as_raw_string(), len(tree.id) // 2)

    def object_size(self, sha: str) -> int:
        """The size of an object's content (a blob's byte count), read from its loose or
        pack header (a delta's from the delta's header): nothing of it is inflated."""
        for attempt in range(2):
            try:
                return self.headers().size(sha)[1]
            except KeyError as exc:
                self.refresh_objects()  # a pack written since: list them again
                if attempt:
                    raise StoreError(f"object {sha} is missing from the object store",
                                     rule="store.missing_object") from exc
            except HeaderError as exc:
                raise StoreError(f"object {sha} is damaged: {exc}",
                                 rule="store.corrupt_object") from exc
        raise AssertionError("unreachable")

    def commit_times(self, commit: str) -> tuple[int, int]:
        """(author time, committer time) of ``commit``."""
        last = self.last_commit
        if last is not None and last.id == commit:
            return last.time, self._last_commit_time
        obj = self._commit(commit)
        return obj.author_time, obj.commit_time

    def parents(self, commit: str) -> tuple[str, ...]:
        known = self._known.get(commit)
        if known is not None:
            return known[0]
        return tuple(p.decode() for p in self._commit(commit).parents)

    def _remember(self, commit: str, parents: tuple[str, ...], ids: dict[str, str]) -> None:
        if len(self._known) >= 512:  # a checkpointer writes many threads in turn
            self._known.pop(next(iter(self._known)))
        self._known[commit] = (parents, ids)

    def commit_info(self, commit: str) -> CommitInfo:
        obj = self._commit(commit)
        return CommitInfo(
            id=commit,
            parents=tuple(p.decode() for p in obj.parents),
            time=obj.commit_time,
            message=obj.message,
            author=obj.author.decode("utf-8", "replace"),
        )

    def walk(self, head: str, stop: str | None = None) -> Iterator[CommitInfo]:
        """First-parent history from ``head`` back to (excluding) ``stop``, newest first."""
        current: str | None = head
        while current and current != stop:
            info = self.commit_info(current)
            yield info
            current = info.parents[0] if info.parents else None

    def refresh_objects(self) -> None:
        """List the pack directory again: a long-lived process outlives packs, misses new ones."""
        self.close_headers()
        self.repo.object_store.packs  # noqa: B018  # lists the directory: adds, drops

    def _get(self, sha: ObjectID) -> ShaFile:
        """Read an object. dulwich looks in packs, then loose: a concurrent repack can move
        a loose object into a new pack between the two looks, and another process may have
        added a pack since, so a miss lists the pack directory again and retries, as git does."""
        if self.strict:
            return self._get_strict(sha)
        for attempt in range(3):
            try:
                return self.repo.object_store[sha]
            except KeyError:
                self.refresh_objects()
                time.sleep(0.005 * attempt)
        return self.repo.object_store[sha]

    def _get_strict(self, sha: ObjectID) -> ShaFile:
        """A foreign object, read by ``objheader.read_strict``: its size from its header
        against ``layout.OBJECT_MAX_BYTES`` before anything is inflated, trees and
        commits parsed by git fsck's rules (``rawobj``) before dulwich parses them."""
        try:
            type_num, raw = read_strict(self.headers(), self.repo.object_store.get_raw,
                                        sha.decode(), layout.OBJECT_MAX_BYTES)
        except HeaderError as exc:
            raise StoreError(f"object {sha.decode()} is damaged: {exc}",
                             rule="store.corrupt_object") from exc
        if type_num == 2:
            rawobj.tree_entries(raw, len(sha) // 2)
        elif type_num == 1:
            rawobj.check_commit(raw)
        return ShaFile.from_raw_string(type_num, raw, sha)

    def _commit(self, commit: str) -> Commit:
        return self._read_as(ObjectID(commit.encode()), Commit, f"commit {commit}")

    def _tree(self, commit: str) -> Tree:
        return self._read_as(self._commit(commit).tree, Tree, f"tree of {commit}")

    def _read_as(self, sha: ObjectID, kind: type[ObjT], what: str) -> ObjT:
        """An object of the expected type, or a StoreError naming the damaged object."""
        try:
            obj = self._get(sha)
        except KeyError as exc:
            raise StoreError(f"{what} ({sha.decode()}) is missing from the object store",
                             rule="store.missing_object") from exc
        except StoreError:
            raise
        except Exception as exc:  # zlib / header / format errors: a damaged object file
            raise StoreError(f"{what} ({sha.decode()}) is corrupt ({exc}); run "
                             "`gitstate verify`", rule="store.corrupt_object") from exc
        if not isinstance(obj, kind):
            raise StoreError(f"{what} ({sha.decode()}) is not a {kind.__name__.lower()}",
                             rule="store.corrupt_object")
        return obj

    # -- refs -------------------------------------------------------------------------

    def ref(self, name: str) -> str | None:
        """The commit a ref names, or None. A write reads a ref three times (recovery, the
        base, the compare-and-swap), so a loose ref file holding a plain object id is read
        directly (one open and read, no symlink followed); anything else (a packed ref, a
        symbolic ref, a symlink, an odd name) goes through dulwich. A FIFO, device or
        socket in a ref's place (itself or behind a symlink) is refused before dulwich
        opens it: its read would block or never end."""
        path = f"{self.git_path}/{name}"
        if ".." not in name:
            try:
                fd = os.open(path, _REF_FLAGS)
            except FileNotFoundError:
                fd = -1  # no loose ref: perhaps a packed one
            except OSError:
                fd = -2  # a symlink (O_NOFOLLOW), or a FIFO with no writer (ENXIO)
            if fd >= 0:
                try:
                    mode = os.fstat(fd).st_mode
                    data = os.read(fd, 72) if stat.S_ISREG(mode) else b""
                finally:
                    os.close(fd)
                _refuse_special(name, mode)
                value = data[:-1]
                if _OWN_REF.fullmatch(name) and not name.endswith(".lock") and \
                        data[-1:] == b"\n" and len(value) in (40, 64) and \
                        value.strip(b"0123456789abcdef") == b"":
                    return value.decode()
            elif fd == -2:
                with contextlib.suppress(OSError):
                    _refuse_special(name, os.stat(path).st_mode)  # what a symlink names
        try:
            return self.repo.refs[Ref(name.encode())].decode()
        except KeyError:
            return None
        except PackedRefsException as exc:
            raise StoreError(f"packed-refs is damaged ({exc}); repair it with git",
                             rule="store.bad_ref") from exc

    def is_ancestor(self, ancestor: str, commit: str) -> bool:
        """Whether ``ancestor`` is on ``commit``'s first-parent chain (gitstate histories
        are linear)."""
        return any(info.id == ancestor for info in self.walk(commit))

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

