"""Writing commits and moving refs: steps 1 and 2 of the write protocol (the package
docstring).

``commit`` is the hot path: the commit's objects are serialized here (packfmt, not dulwich's
object classes, checked byte for byte against dulwich in tests/store/test_packfmt.py), the ref's
``<ref>.lock`` is taken and compared first, then the pack, its index and the lock file's new
id are flushed together (nothing orders them against each other: what must be durable
before the ref names the commit is all three), the pack is named and its directory flushed,
and last the lock is renamed over the ref (the commit point) and the ref's directory
flushed. Flushing the three files at once rather than one after another spares about a
third of a strict write on this project's disk.

``make_commit`` (objects only) and ``move_ref`` (compare-and-swap of any ref) are the two
steps apart, for sync and for refs other than a commit's own.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass

from dulwich.objects import ObjectID
from dulwich.refs import Ref

from ..core import layout
from ..core.errors import StoreError
from ..core.layout import FILE_MODE
from ..system import faults, safefile, sshsig
from . import packfmt, packwrite
from .base import ZERO, RepoBase
from .durability import Flush
from .fs import created_dirs, exchange
from .objects import CommitInfo

Objects = list[tuple[bytes, int, bytes]]  # (binary name, type number, body)


@dataclass
class _RefLock:
    """A held ``<ref>.lock``: its descriptor, the paths, the directories it created."""

    fd: int
    path: str
    lock: str
    created: set[str]


class CommitOps(RepoBase):
    """Commits and refs (see the module docstring)."""

    # signs each commit this store writes (``sshsig.sign`` with the configured key, as
    # ``sshsig.signer`` makes it); None: commits are unsigned
    signer: Callable[[bytes], bytes] | None = None

    def raw_commit(self, commit: str) -> bytes:
        """The commit object's bytes as stored (its signature included)."""
        return self._commit(commit).as_raw_string()

    def commit(self, base: str | None, files: dict[str, bytes | None], message: bytes,
               identity: bytes, when: int, tz_offset: int = 0,
               ref: str = layout.BRANCH, *, flush: Flush | None = None,
               log: Callable[[str, bytes, bytes, str], None] | None = None) -> str | None:
        """Write a commit of ``files`` (None deletes) on top of ``base`` and move ``ref`` to
        it if the ref still equals ``base``. Returns the new id, or None when it moved.
        ``log(pack name, pack, index, new id)``, once the ref is locked and compared and
        before any file is written, is a write-ahead log's record of it (``flush``: the
        flushes in place of the mode's, ``Deferred`` then)."""
        objects, new_id, ids = self._serialize(base, files, message, identity, when,
                                               tz_offset, None)
        name, pack, index = packwrite.build_raw(objects, self.repo.object_store.object_format)
        lock = self._lock_and_compare(ref, base, new_id)
        if lock is None:
            return None
        flush = flush or self.flush
        try:
            if log is not None:
                log(name, pack, index, new_id)
            staged = packwrite.stage(self.pack_dir, pack, index)
            try:
                flush.data_all([*staged.fds, lock.fd])
                faults.hit("pack.tmp_pack")
                faults.hit("pack.tmp_idx")
                faults.hit("ref.written")
            except BaseException:
                staged.discard()
                raise
            packwrite.publish(staged, name, flush)
            faults.hit("objects")  # objects durable, ref not moved yet
        except BaseException:
            self._drop_lock(lock)
            raise
        self._rename_ref(lock, flush)
        faults.hit("ref")  # committed; working tree and projection not refreshed yet
        self._remember_commit(new_id, base, ids, message, identity, when, when, objects)
        return new_id

    def make_commit(self, base: str | None, files: dict[str, bytes | None], message: bytes,
                    identity: bytes, when: int, tz_offset: int = 0,
                    author_time: int | None = None) -> str:
        """Write (durably) the objects of a commit on ``base``; no ref moves."""
        objects, new_id, ids = self._serialize(base, files, message, identity, when,
                                               tz_offset, author_time)
        name, pack, index = packwrite.build_raw(objects, self.repo.object_store.object_format)
        packwrite.write(self.pack_dir, name, pack, index, self.flush)
        self._remember_commit(new_id, base, ids, message, identity,
                              author_time if author_time is not None else when, when, objects)
        return new_id

    def _serialize(self, base: str | None, files: dict[str, bytes | None], message: bytes,
                   identity: bytes, when: int, tz_offset: int,
                   author_time: int | None) -> tuple[Objects, str, dict[str, str]]:
        """The commit's new objects, its id, and its tree's file name -> blob id."""
        hash_func = self.repo.object_store.object_format.hash_func
        tree_files = {name.encode(): bytes.fromhex(blob_id)
                      for name, blob_id in (self.file_ids(base) if base else {}).items()}
        objects: Objects = []
        for name, data in files.items():
            if data is None:
                tree_files.pop(name.encode(), None)
                continue
            blob = packfmt.object_name(b"blob", data, hash_func)
            objects.append((blob, packfmt.BLOB, data))
            tree_files[name.encode()] = blob
        tree = packfmt.tree_body(tree_files, b"%o" % FILE_MODE)
        tree_name = packfmt.object_name(b"tree", tree, hash_func)
        authored = author_time if author_time is not None else when
        body = packfmt.commit_body(tree_name.hex(), (base,) if base else (), identity,
                                   authored, identity, when, tz_offset, message)
        if self.signer is not None:  # git's gpgsig header, over the body without it
            body = sshsig.with_signature(body, self.signer(body))
        commit_name = packfmt.object_name(b"commit", body, hash_func)
        objects += [(tree_name, packfmt.TREE, tree), (commit_name, packfmt.COMMIT, body)]
        ids = {name.decode(): sha.hex() for name, sha in tree_files.items()}
        return objects, commit_name.hex(), ids

    def _remember_commit(self, new_id: str, base: str | None, ids: dict[str, str],
                         message: bytes, identity: bytes, authored: int, when: int,
                         objects: Objects) -> None:
        parents = (base,) if base else ()
        self._remember(new_id, parents, ids)
        self.last_commit = CommitInfo(new_id, parents, authored, message,
                                      identity.decode("utf-8", "replace"))
        self._last_commit_time = when
        self.last_objects = [sha.hex() for sha, _type, _body in objects]

    def move_ref(self, name: str, old: str | None, new: str | None) -> bool:
        """Compare-and-swap any ref (None: absent / delete); durable when it returns.
        Call it with the kernel lock of the ref's owner held (``layout.ref_owner``): the
        ``<ref>.lock`` found then is a killed writer's (store/recovery.py). The
        name becomes a path under .git, so one git's rules refuse is refused here first
        (``store.bad_ref_name``), wherever it came from."""
        if name != layout.BRANCH and (problem := layout.ref_format_problem(name)):
            raise StoreError(f"{name[:200]!r} is not a ref name git accepts ({problem}); "
                             "nothing was written", rule="store.bad_ref_name")
        if new is None:
            ref = Ref(name.encode())
            old_id = ObjectID(old.encode()) if old else ZERO
            return bool(self._stale_lock_safe(
                lambda: self.repo.refs.remove_if_equals(ref, old_id),
                f"{self.git_path}/{name}.lock"))
        lock = self._lock_and_compare(name, old, new)
        if lock is None:
            return False
        try:
            self.flush.data(lock.fd)
            faults.hit("ref.written")
        except BaseException:
            self._drop_lock(lock)
            raise
        self._rename_ref(lock)
        return True

    def _lock_and_compare(self, name: str, old: str | None, new: str) -> _RefLock | None:
        """The ref's lock with the new id written in it (not flushed), or None (the lock
        dropped) when the ref no longer equals ``old``: the compare of compare-and-swap."""
        lock = self._lock_ref(name)
        try:
            faults.hit("ref.locked")
            if self.ref(name) != old:
                self._drop_lock(lock)
                return None
            os.write(lock.fd, new.encode() + b"\n")
        except BaseException:
            self._drop_lock(lock)
            raise
        return lock

    def _lock_ref(self, name: str) -> _RefLock:
        """git's ``<ref>.lock``, made with O_EXCL so that plain git and gitstate exclude each
        other. Written here rather than by dulwich so that the mode decides the flushes
        (dulwich always fsyncs the lock file)."""
        path = f"{self.git_path}/{name}"
        created: set[str] = set()
        lock = path + ".lock"
        # no directory between .git and the ref is a link (a planted refs/remotes -> away
        # would carry the write there): the lock below is opened without following only
        # its own last component
        parts = name.split("/")[:-1]
        safefile.real_dirs(self.git_path, tuple("/".join(parts[:i + 1])
                                                for i in range(len(parts))))
        for _ in range(8):
            try:
                fd = safefile.create_new(lock)
                return _RefLock(fd, path, lock, created)
            except FileExistsError:  # we hold its owner's kernel lock: a killed writer's
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(lock)
            except FileNotFoundError:  # a new ref's directory (rare: checked only then)
                created |= created_dirs({os.path.dirname(path)})
                os.makedirs(os.path.dirname(path), exist_ok=True)
        raise StoreError(f"{lock} keeps reappearing; another program is writing {name}",
                         rule="store.contention")

    @staticmethod
    def _drop_lock(lock: _RefLock) -> None:
        with contextlib.suppress(OSError):
            os.close(lock.fd)
        with contextlib.suppress(OSError):
            os.unlink(lock.lock)

    def _rename_ref(self, lock: _RefLock, flush: Flush | None = None) -> None:
        """The commit point: the flushed lock file renamed over the ref, then the ref's
        directory (and any directory made for it) flushed."""
        flush = flush or self.flush
        os.close(lock.fd)
        if flush.mode == "deferred" and not lock.created and exchange(lock.lock, lock.path):
            # a rename over an existing ref makes ext4 write the new file out then and
            # there (auto_da_alloc, store/fs.py swap_write): unflushed, the ref trades
            # places with its lock instead, and the lock, now the old value, goes
            os.unlink(lock.lock)
        else:
            os.replace(lock.lock, lock.path)
        faults.hit("ref.renamed")
        flush.commit(os.path.dirname(lock.path))
        for directory in sorted(lock.created, key=len, reverse=True):
            flush.directory(directory)

