"""Packing and inspection: loose objects, gc, disk usage, patches, object problems."""

from __future__ import annotations

import contextlib
import errno
import io
import os

from .. import gitcli
from ..errors import StoreError
from . import packwrite
from .base import RepoBase


class PackOps(RepoBase):
    """Packing and inspection: loose objects, gc, disk usage, patches, object problems."""

    def consolidate(self) -> int:
        """Fold small packs geometrically (``packwrite.consolidate``); never call it with
        the write lock held. Returns the number of packs merged."""
        return packwrite.consolidate(self.git_dir, self.repo.object_store.object_format)

    def pack_count(self) -> int:
        return len(packwrite.pack_sizes(self.git_dir / "objects" / "pack"))

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
        """Pack loose objects without taking the write lock.

        Packing is safe beside a running writer: only objects already listed are packed and
        then removed as loose copies, and a writer's new objects stay loose until the next run.
        Refs are never packed or touched here (``git pack-refs`` locks the branch ref, which
        a writer would take for a stale lock). Unreachable loose objects (left by killed writes)
        are pruned once older than ``prune_hours``.
        """
        before = self.disk_usage()
        if gitcli.git_binary():  # git's repack stores deltas: 2-3x smaller packs than dulwich's
            for args in (["repack", "-d", "-q", "--no-write-bitmap-index"],
                         ["prune-packed", "-q"],
                         ["prune", f"--expire={int(prune_hours * 3600)}.seconds.ago"]):
                out = gitcli.run(self.path, args)
                if out.returncode != 0:
                    full = "No space left" in out.stderr
                    raise StoreError(
                        f"git {args[0]} failed: {out.stderr.strip()[:300]}"
                        + ("; free some disk space and run `gitstate gc` again" if full
                           else ""),
                        rule="store.disk_full" if full else "gc.failed")
        else:
            try:
                self.repo.object_store.pack_loose_objects()
            except OSError as exc:
                raise StoreError(f"packing failed ({exc.strerror or exc})",
                                 rule="store.disk_full" if exc.errno == errno.ENOSPC
                                 else "gc.failed") from exc
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
        problems = []
        store = self.repo.object_store
        for sha in store:
            try:
                obj = store[sha]
                obj.check()
                if obj.id != sha:
                    problems.append(f"{sha.decode()}: content hashes to {obj.id.decode()}")
            except Exception as exc:  # any decoding failure is a corruption to report
                problems.append(f"{sha.decode()}: {type(exc).__name__}: {exc}")
        return problems
