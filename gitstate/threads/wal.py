"""The checkpointer's write-ahead log: what makes a LangGraph ``put`` or ``put_writes``
durable with one ``fdatasync`` (docs/langgraph.md, "Durability: the write-ahead log").

Threads are spread over ``SHARDS`` logs by their digest; a shard is two files,
``.git/gitstate-wal-<shard>-0.log`` and ``-1.log``, of which one is active. Its records are
written in place from offset 0: ``<tag><seq hex> <crc32> <header length> <body length>\\n``,
a JSON header, a body. Tags: ``S`` starts a sequence (the file's first record), ``W`` is a
pending write (``put_writes``), ``C`` a checkpoint commit (its ref, old and new id, the
pack's name, and as body the pack and its index exactly as written to git; ``fold``: the
namespace's pending writes are in it), ``F`` a fold mark. A reader takes the file whose
first record is an intact ``S`` of the higher sequence and stops at the first record of
another sequence or a damaged one (a torn write: its call never returned). The files keep
their blocks (``PREALLOC`` written once), so an append's flush is of data alone.

A writer appends its record and flushes it, and only then writes the pack, its index and
the ref into git without any flush of their own, all under the shard's lock (the lock is
``-0.log`` itself). A checkpoint of the shard (every ``CHECKPOINT_COMMITS`` commits or
``CHECKPOINT_BYTES``, on a non-logged write of a thread, at close) fsyncs what the active
file's commits wrote into git (packs, indexes, refs, their directories), then starts the
next sequence in the other file, carrying the writes still pending, and flushes that: from
then on the old file is spare. ``replay`` (on opening the saver, and for its own ref under
the locks before every put) puts back into git what the active file holds and git lacks:
a pack missing or differing from the logged bytes, a ref left at an earlier value of its
logged chain, missing or damaged.
"""

from __future__ import annotations

import contextlib
import os
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ..core import layout
from ..core.errors import StoreError
from ..store import packwrite
from ..store.durability import Flush, fsync_paths
from ..system import locking, safefile
from .walshard import (
    CHECKPOINT_BYTES,
    CHECKPOINT_COMMITS,
    LOG_FILE,
    PREALLOC,
    SHARDS,
    Logged,
    Shard,
    shard_of,
)

if TYPE_CHECKING:
    from ..store import GitStore

__all__ = ["CHECKPOINT_BYTES", "CHECKPOINT_COMMITS", "PREALLOC", "SHARDS", "Logged", "Shard",
           "WriteAheadLog", "shard_of"]


class WriteAheadLog:
    """The shards of one repository, and what moves between them and git: checkpoints
    and replay (see the module docstring). Call with the saver's mutex held."""

    def __init__(self, store: GitStore) -> None:
        self.store = store
        self.shards: dict[int, Shard] = {}

    def shard(self, digest: str) -> Shard:
        n = shard_of(digest)
        if n not in self.shards:
            self.shards[n] = Shard(self.store.git_dir, n)
        return self.shards[n]

    def close(self) -> None:
        for shard in self.shards.values():
            shard.close()
        self.shards.clear()

    def existing(self) -> list[Shard]:
        """Every shard with a file on disk (the saver's own and other processes')."""
        return [self.shard(f"{n:08x}") for n in range(SHARDS)
                if os.path.lexists(self.store.git_dir / LOG_FILE.format(shard=n, half=0))]

    def checkpoint(self, shard: Shard, lock: AbstractContextManager[Any] | None = None
                   ) -> None:
        """Make durable in git what the active file's commits wrote, then restart the log
        in the other file (the writes still pending carried over). ``lock`` (the saver's
        mutex) is held only to read the log and to restart it: what was logged before is
        flushed without it, so writers go on meanwhile; only what they logged in between
        is flushed with the shard's lock held."""
        guard = lock or contextlib.nullcontext()
        with guard, shard.locked():
            seq = shard.seq
            done = [(c, *shard.body(c)) for c in shard.commits]
        if not done:
            return
        self._flush(done)
        with guard, shard.locked():
            if shard.seq != seq:
                return  # restarted by another process meanwhile
            self._flush([(c, *shard.body(c)) for c in shard.commits[len(done):]])
            shard.restart()

    def _flush(self, commits: list[tuple[Logged, bytes, bytes]]) -> None:
        """Make the commits' git files durable: their objects as one pack, written and
        fsynced, and the small packs they were written in removed (or, when a repack holds
        the packs still, fsynced too); every ref and directory they wrote fsynced."""
        if not commits:
            return
        git, packs = self.store.git_path, self.store.pack_dir
        entries: dict[bytes, bytes] = {}
        files = {f"{git}/{c.ref}" for c, _p, _i in commits}
        small = set()
        for c, pack, index in commits:
            got = packwrite.entries_of(pack, index, len(c.new) // 2)
            if got is None:  # (not one this saver wrote): flushed as it is
                files |= {f"{packs}/{c.pack}.pack", f"{packs}/{c.pack}.idx"}
                continue
            entries |= got
            small.add(c.pack)
        fmt = self.store.repo.object_store.object_format
        merged, data, index = packwrite.build_entries(entries, fmt)
        packwrite.write(packs, merged, data, index, Flush(), phase="wal")
        dirs: set[str] = {packs}
        with locking.attempt(self.store.git_dir / layout.REPACK_LOCK_FILE) as free:
            for name in sorted(small - {merged}):
                if free:  # the objects are in the merged pack: the small ones can go
                    for suffix in (".idx", ".pack"):  # the index first: readers skip it
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(f"{packs}/{name}{suffix}")
                else:
                    files |= {f"{packs}/{name}.pack", f"{packs}/{name}.idx"}
        for c, _p, _i in commits:
            parts = c.ref.split("/")[:-1]
            dirs |= {"/".join([git, *parts[:i]]) for i in range(1, len(parts) + 1)}
        fsync_paths(sorted(files))
        fsync_paths(sorted(dirs))
        self.store.refresh_objects()

    def replay(self, shard: Shard, ref: str | None = None) -> list[str]:
        """Put back into git what the active file holds and git lacks (every ref's, or
        ``ref``'s); returns the refs moved. Call with the shard's lock held."""
        commits = [c for c in shard.commits if ref is None or c.ref == ref]
        for c in commits:
            self._pack(shard, c)
        moved = []
        for name in sorted({c.ref for c in commits}):
            chain = [c for c in commits if c.ref == name]
            final = chain[-1].new
            values = {v for c in chain for v in (c.old, c.new) if v is not None}
            current = self._ref(name)
            if current == final or (current is not None and current not in values):
                continue  # in place, or moved on by something else (a pull, a tombstone)
            if self.store.move_ref(name, current, final):
                moved.append(name)
        return moved

    def _pack(self, shard: Shard, c: Logged) -> None:
        pack, index = shard.body(c)
        base = f"{self.store.pack_dir}/{c.pack}"
        have = [_read(base + ".pack", len(pack)), _read(base + ".idx", len(index))]
        if have == [pack, index]:
            return
        if have == [None, None]:  # folded into another pack, or lost
            with contextlib.suppress(StoreError):
                self.store.object_size(c.new)
                return
        packwrite.write(self.store.pack_dir, c.pack, pack, index, Flush(), phase="replay")
        self.store.refresh_objects()

    def _ref(self, name: str) -> str | None:
        """The ref's value; a loose ref file that holds no id (torn) is removed first."""
        path = f"{self.store.git_path}/{name}"
        data = _read(path, 100)
        if data is not None:
            value = data.strip()
            if len(value) in (40, 64) and value.strip(b"0123456789abcdef") == b"":
                return value.decode()
            os.unlink(path)
        return self.store.ref(name)

    def recover(self, shard: Shard, ref: str, head: str | None) -> bool:
        """Before a put (both locks held): a commit of ``ref`` the log holds and the ref
        does not name is a dead writer's (a live one holds the shard's lock until its ref
        moved): put it back. Whether the ref moved."""
        last = next((c for c in reversed(shard.commits) if c.ref == ref), None)
        if last is None or last.new == head:
            return False
        return bool(self.replay(shard, ref))

    def replay_all(self) -> None:
        """On opening: every shard's logged commits back in git, then checkpointed."""
        for shard in self.existing():
            with shard.locked():
                self.replay(shard)
            self.checkpoint(shard)


def _read(path: str, limit: int) -> bytes | None:
    try:
        return safefile.read_regular(path, limit + 1)
    except (FileNotFoundError, safefile.TooLarge):
        return None
