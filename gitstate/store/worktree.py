"""The working tree: checkout, the stamp for the render fast path, and telling a killed
writer's leftovers from a hand edit."""

from __future__ import annotations

import contextlib
import hashlib
import os
import struct
from pathlib import Path

from ..core import layout
from ..core.errors import StoreError
from ..core.layout import FILE_MODE, SCHEMA_FILE, SPARE_PREFIX, STAMP_FILE, STATE_FILE, TREE_FILES
from ..core.model import State
from ..system import faults, safefile
from .base import RepoBase, WorktreeStatus
from .fs import file_blob_id, swap_write


class WorktreeOps(RepoBase):
    """The working tree of a state repository (see the module docstring)."""

    def checkout(self, commit: str, contents: dict[str, bytes] | None = None) -> None:
        """Make the working tree, the index and the stamp equal ``commit``. ``contents``
        may hold file bytes the caller already has (a write's new working_state.json):
        those are written without reading the old file back."""
        ids = self.file_ids(commit)
        unknown = sorted(set(ids) - TREE_FILES.keys())
        if unknown:  # never reached through the checks of foreign commits; kept as a wall
            raise StoreError(f"commit {commit[:12]} holds files gitstate does not know "
                             f"({', '.join(repr(n) for n in unknown[:5])}); nothing was "
                             "checked out", rule="tree.unknown_name")
        work, git = str(self.path), self.git_path  # plain strings: this runs on every write
        given = contents or {}
        entries = {}
        for name, blob_id in ids.items():
            target = f"{work}/{name}"
            data = given.get(name)
            if data is not None or file_blob_id(Path(target)) != blob_id:
                data = data if data is not None else self.read_file(commit, name)
                assert data is not None
                # re-derivable from HEAD, so never flushed: a crash that loses it is
                # repaired by the next open (an empty or unreadable file is damage)
                swap_write(target, data, f"{git}/{SPARE_PREFIX}{name}")
                faults.hit("checkout.file")
            entries[name.encode()] = (os.stat(target), bytes.fromhex(blob_id))
        parents = self.parents(commit)
        for name in (self.file_ids(parents[0]) if parents else {}).keys() - ids.keys():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{work}/{name}")  # a file this commit deleted
        # The index only makes `git status` agree; it is a cache of HEAD, so it is written
        # without fsync (dulwich's Index.write always fsyncs).
        swap_write(f"{git}/index", index_file(entries), f"{git}/{SPARE_PREFIX}index")
        faults.hit("checkout.index")
        stamp = layout.format_stamp(commit, ids.get(STATE_FILE, ""), ids.get(SCHEMA_FILE))
        swap_write(f"{git}/{STAMP_FILE}", stamp, f"{git}/{SPARE_PREFIX}stamp")

    def worktree_matches_stamp(self, commit: str) -> bool:
        """The cheap check (the render fast path's): the stamp names ``commit`` and the
        working tree file hashes to the stamped blob."""
        stamp = self.stamp()
        if stamp is None:
            return False
        stamp_commit, blob, schema_blob = stamp
        ids = self.file_ids(commit)
        if stamp_commit != commit or ids.get(STATE_FILE) != blob or \
                ids.get(SCHEMA_FILE, "-") != schema_blob or \
                not set(ids) <= {STATE_FILE, SCHEMA_FILE}:
            return False
        return all(file_blob_id(self.path / name) == blob_id for name, blob_id in ids.items())

    def worktree_status(self, commit: str) -> WorktreeStatus:
        """Compare the working tree with ``commit``; tell leftovers from hand edits."""
        ids = self.file_ids(commit)
        parent_ids: dict[str, str] = {}
        parents = self.parents(commit)
        if parents:
            parent_ids = self.file_ids(parents[0])
        checked_out = self._stamped_blobs()
        differing, damaged, invalid = [], [], []
        leftover = False
        for name, blob_id in ids.items():
            actual = file_blob_id(self.path / name)
            if actual == blob_id:
                continue
            if actual is None or actual in (parent_ids.get(name), checked_out.get(name)):
                # missing, or still the previous commit's file, or still the file the last
                # checkout wrote (a pull or a rebase killed after main moved, before its
                # checkout: main may be many commits further)
                leftover = True
            elif _damaged(self.path / name, [self.read_file(c, name) for c in
                                             (commit, *parents[:1])]):
                leftover = True  # what a crash leaves of a file we wrote, never an edit
                damaged.append(name)
            else:
                differing.append(name)
                problem = _invalid(self.path / name)
                if problem:
                    invalid.append((name, problem))
        for name in parent_ids.keys() - ids.keys():
            if (self.path / name).exists():
                leftover = True
        stray = [p for p in self.path.glob(".*.tmp")]
        leftover = leftover or bool(stray)
        return WorktreeStatus(not differing and not leftover, leftover, tuple(differing),
                              tuple(damaged), tuple(invalid))

    def stamp(self) -> tuple[str, str, str] | None:
        """What the last completed checkout wrote: (commit, state blob, schema blob or
        "-"), or None when the stamp is missing or unreadable."""
        try:
            return layout.parse_stamp(safefile.read_regular(self.git_dir / STAMP_FILE, 256))
        except OSError:
            return None

    def _stamped_blobs(self) -> dict[str, str]:
        stamp = self.stamp()
        if stamp is None:
            return {}
        _, blob, schema_blob = stamp
        return {STATE_FILE: blob, **({SCHEMA_FILE: schema_blob} if schema_blob != "-" else {})}

    def remove_temp_files(self) -> None:
        for p in self.path.glob(".*.tmp"):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()


def index_file(entries: dict[bytes, tuple[os.stat_result, bytes]]) -> bytes:
    """A version-2 git index of regular files (name -> (its stat, binary blob name)), as
    git's Documentation/gitformat-index.txt lays it out: ``DIRC``, the version and count,
    one entry per file in name order (ctime and mtime as seconds and nanoseconds, dev, ino,
    mode, uid, gid, size, the object name, the flags holding the name's length, the name,
    NUL padding to a multiple of 8 bytes), then the SHA-1 of all that. Written here, not by
    dulwich, because it is written on every commit."""
    out = bytearray(b"DIRC" + struct.pack(">II", 2, len(entries)))
    for name in sorted(entries):
        info, sha = entries[name]
        entry = struct.pack(
            ">10I", info.st_ctime_ns // 10**9 & _U32, info.st_ctime_ns % 10**9,
            info.st_mtime_ns // 10**9 & _U32, info.st_mtime_ns % 10**9, info.st_dev & _U32,
            info.st_ino & _U32, FILE_MODE, info.st_uid & _U32, info.st_gid & _U32,
            info.st_size & _U32) + sha + struct.pack(">H", min(len(name), 0xFFF)) + name
        out += entry + b"\0" * (8 - len(entry) % 8)
    return bytes(out) + hashlib.sha1(out).digest()


_U32 = 0xFFFFFFFF


def _damaged(path: Path, committed: list[bytes | None]) -> bool:
    """What a crash can leave of a working file gitstate wrote (the working tree is never
    flushed): an empty file, one holding NUL bytes (blocks never written), or a prefix of
    the file as committed (its tail lost). Any other readable file is a hand edit, even one
    that is no valid state: that is reported, never silently replaced."""
    try:
        data = safefile.read_regular(path, TREE_FILES.get(path.name, 1 << 20))
    except OSError:
        return False  # a symlink, FIFO or oversized file: a hand edit, reported
    if not data.strip(b"\0 \t\r\n") or b"\0" in data:
        return True
    return any(c is not None and c.startswith(data) for c in committed)


def _invalid(path: Path) -> str:
    """Why a hand-edited working_state.json is no valid state ("" when it is one, or for
    another file)."""
    if path.name != STATE_FILE:
        return ""
    try:
        State.from_bytes(safefile.read_regular(path, TREE_FILES[STATE_FILE]))
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        return str(exc) or type(exc).__name__
    return ""
