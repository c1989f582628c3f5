"""Packing and inspection: loose objects, gc, disk usage, patches, object problems."""

from __future__ import annotations

import contextlib
import errno
import io
import os
from collections.abc import Iterator

from ..core.errors import LockTimeout, StoreError, disk_full
from ..core.layout import REPACK_LOCK_FILE
from ..system import gitcli, locking, safefile
from . import packwrite, recovery
from .base import RepoBase

FOLD_CHECK_EVERY = 4  # writes per look at the pack directory (see PackOps.consolidate)
# how git says ENOSPC (strerror, and "Out of diskspace" from its pack and object writers)
_GIT_DISK_FULL = ("No space left on device", "Out of diskspace")


class PackOps(RepoBase):
    """Packing and inspection: loose objects, gc, disk usage, patches, object problems."""

    def consolidate(self) -> int:
        """Fold small packs, size-tiered (``packwrite.consolidate``); never call it with
        the write lock held. Returns the number of packs merged.

        The pack directory is looked at on this process's first write and then on every
        ``FOLD_CHECK_EVERY``-th: listing it after each write cost a tenth of the write
        (a directory that has just gained two names), and a few more small packs waiting
        change no read. A process that writes once still checks."""
        calls, self._fold_calls = self._fold_calls, self._fold_calls + 1
        if calls % FOLD_CHECK_EVERY:
            return 0
        return packwrite.consolidate(self.git_dir, self.repo.object_store.object_format)

    @contextlib.contextmanager
    def folding_paused(self, timeout: float = 60.0) -> Iterator[None]:
        """No pack folding while this holds (gc and verify's object walk: both must not see
        packs vanish). Writers do not wait for it: they skip folding. In a read-only
        repository, or past the timeout, it goes on without the lock."""
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(locking.exclusive(self.git_dir / REPACK_LOCK_FILE,
                                                      timeout))
            except safefile.NotRegular:
                raise  # a link or FIFO planted as the lock: named, never worked around
            except (OSError, LockTimeout):
                pass
            yield

    def pack_sizes(self) -> dict[str, int]:
        """Complete packs and their sizes in bytes."""
        return packwrite.pack_sizes(self.git_dir / "objects" / "pack")

    def pack_count(self) -> int:
        return len(packwrite.pack_names(self.git_dir / "objects" / "pack"))

    def loose_estimate(self, objects: list[str]) -> int:
        """Estimated loose objects from the fan-out directories a write just touched (already
        in the page cache): 256 x their mean size. Three directories keep the estimate within
        about a sixth of the truth around the threshold, without listing all 256."""
        dirs = {sha[:2] for sha in objects}
        total = 0
        for d in dirs:
            with contextlib.suppress(FileNotFoundError):
                total += len(os.listdir(self.git_dir / "objects" / d))
        return 256 * total // max(len(dirs), 1)

    def gc(self, prune_hours: float = 1.0) -> dict[str, int]:
        """Fold every pack and loose object into one pack, without taking the write lock.

        Packing is safe beside a running writer: only packs and objects already listed are
        repacked and then removed, a pack a writer adds meanwhile stays, and an object that
        no ref reached when the repack began is kept loose (``-A``).
        Refs are never packed or touched here (``git pack-refs`` locks the branch ref, which
        a writer would take for a stale lock). Unreachable loose objects (left by killed writes)
        are pruned once older than ``prune_hours``. Abandoned temporaries of files any
        process replaces (``recovery.sweep_shared``) are removed first.
        """
        with self.folding_paused(timeout=600):
            recovery.sweep_shared(self.git_dir)  # a killed index compaction's temporaries
            return self._gc(prune_hours)

    def _gc(self, prune_hours: float) -> dict[str, int]:
        before = self.disk_usage()
        if gitcli.git_binary():  # git's repack stores deltas: 2-3x smaller packs than dulwich's
            # -A, not -a: an object no ref reached when the repack began (a writer's pack
            # whose ref was about to move) becomes loose instead of vanishing with its pack
            for args in (["repack", "-A", "-d", "-q", "--no-write-bitmap-index"],
                         ["prune-packed", "-q"],
                         ["prune", f"--expire={int(prune_hours * 3600)}.seconds.ago"]):
                listed = set(_listing(self.pack_dir))
                out = gitcli.run(self.path, args)
                if out.returncode != 0:
                    # git leaves its temporary packs when it fails (a full disk): the run
                    # that made them removes them (the repack lock is held: no other does)
                    for name in set(_listing(self.pack_dir)) - listed:
                        if name.startswith(("tmp_", ".tmp-")):
                            with contextlib.suppress(OSError):
                                os.unlink(os.path.join(self.pack_dir, name))
                    said = out.stderr.strip()[:300]
                    if any(text in out.stderr for text in _GIT_DISK_FULL):
                        raise disk_full(f"git {args[0]} failed ({said}); nothing was lost",
                                        "free some disk space and run `gitstate gc` again")
                    raise StoreError(f"git {args[0]} failed: {said}", rule="gc.failed")
        else:
            try:
                self.repo.object_store.repack()
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    raise disk_full("packing failed; nothing was lost", "free some disk "
                                    "space and run `gitstate gc` again") from exc
                raise StoreError(f"packing failed ({exc.strerror or exc})",
                                 rule="gc.failed") from exc
        after = self.disk_usage()
        return {"bytes_before": before, "bytes_after": after}

    def disk_usage(self) -> int:
        """Bytes used by the object store (loose objects and packs)."""
        total = 0
        for root, _dirs, files in os.walk(self.git_dir / "objects"):
            for name in files:
                with contextlib.suppress(FileNotFoundError):
                    total += os.stat(os.path.join(root, name)).st_blocks * 512
        return total

    def patch(self, commit: str) -> str:
        """The raw git diff of ``commit`` against its first parent."""
        from dulwich.patch import write_tree_diff

        obj = self._commit(commit)
        old_tree = self._commit(obj.parents[0].decode()).tree if obj.parents else None
        out = io.BytesIO()
        write_tree_diff(out, self.repo.object_store, old_tree, obj.tree)
        return out.getvalue().decode("utf-8", "replace")

    def object_problems(self) -> list[str]:
        """Objects whose content does not hash to their name (a corrupted store)."""
        with self.folding_paused():
            return self._object_problems()

    def _object_problems(self) -> list[str]:
        problems = []
        store = self.repo.object_store
        store.packs  # noqa: B018  # rescans the pack directory: drops packs folded away
        for sha in store:
            try:
                obj = store[sha]
                obj.check()
                if obj.id != sha:
                    problems.append(f"{sha.decode()}: content hashes to {obj.id.decode()}")
            except Exception as exc:  # any decoding failure is a corruption to report
                problems.append(f"{sha.decode()}: {type(exc).__name__}: {exc}")
        return problems


def _listing(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except FileNotFoundError:
        return []
