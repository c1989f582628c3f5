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

import bisect
import contextlib
import json
import os
import struct
import zlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core import layout
from ..core.errors import StoreError
from ..store import packwrite
from ..store.durability import Flush, fsync_paths
from ..system import locking, safefile
from .journal import FOLDED, Write

if TYPE_CHECKING:
    from ..store import GitStore

SHARDS = 8
PREALLOC = 128 << 10
CHECKPOINT_COMMITS = 64
CHECKPOINT_BYTES = 96 << 10
LOG_FILE = layout.THREAD_LOG_FILE
_READ = 8192
_FANOUT_END = 8 + 256 * 4  # a v2 index: magic and version, then the fan-out table


@dataclass(frozen=True)
class Logged:
    """A checkpoint commit the active file holds; its pack and index at ``at``."""

    thread: str
    ns: str
    ref: str
    old: str | None
    new: str
    pack: str
    at: int
    pack_len: int
    index_len: int


def shard_of(digest: str) -> int:
    return int(digest[:8], 16) % SHARDS


def _record(tag: bytes, seq: int, header: dict[str, Any], body: bytes = b"") -> bytes:
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    data = head + body
    return b"%s%x %d %d %d\n" % (tag, seq, zlib.crc32(data), len(head), len(body)) + data


def _write_header(thread: str, w: Write) -> dict[str, Any]:
    return {**w.header(), "thread": thread}


class Shard:
    """One shard's two files (see the module docstring); its state as last read."""

    def __init__(self, git_dir: Path, shard: int) -> None:
        self.paths = [git_dir / LOG_FILE.format(shard=shard, half=h) for h in (0, 1)]
        self.fds: list[int | None] = [None, None]
        self.active = 0
        self.seq = 0  # 0: no sequence started
        self.tail = 0
        self.pending: list[tuple[str, Write]] = []
        self.commits: list[Logged] = []

    def close(self) -> None:
        for i, fd in enumerate(self.fds):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
                self.fds[i] = None

    def _fd(self, half: int, create: bool) -> int | None:
        fd = self.fds[half]
        if fd is None:
            path = self.paths[half]
            if not create and not os.path.lexists(path):
                return None
            new = not os.path.lexists(path)
            fd = safefile.open_lock(path)
            if os.fstat(fd).st_size < PREALLOC:  # its blocks, once: later flushes are of data
                os.pwrite(fd, bytes(PREALLOC - os.fstat(fd).st_size), os.fstat(fd).st_size)
                os.fsync(fd)
                if new:
                    dir_fd = safefile.open_dir(path.parent)
                    try:
                        os.fsync(dir_fd)
                    finally:
                        os.close(dir_fd)
            self.fds[half] = fd
        return fd

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The shard's lock, its state read again."""
        with locking.exclusive(self.paths[0]):
            self._fd(0, True)
            self.refresh()
            yield

    # -- reading --------------------------------------------------------------------------

    def _first(self, half: int) -> int:
        """The sequence of the intact start record at ``half``'s offset 0, or 0."""
        fd = self._fd(half, False)
        if fd is None:
            return 0
        got = self._parse(fd, 0, None)
        return got[1] if got is not None and got[0] == b"S" else 0

    @staticmethod
    def _parse(fd: int, at: int, seq: int | None
               ) -> tuple[bytes, int, dict[str, Any], bytes, int, int] | None:
        """(tag, seq, header, body, body offset, next offset) of the intact record at
        ``at`` of sequence ``seq`` (any, when None), or None."""
        head = os.pread(fd, _READ, at)
        end = head.find(b"\n", 0, 96)
        if end < 2:
            return None
        try:
            first, crc_s, hlen_s, blen_s = head[1:end].split(b" ")
            this, crc, hlen, blen = int(first, 16), int(crc_s), int(hlen_s), int(blen_s)
        except ValueError:
            return None
        if (seq is not None and this != seq) or head[:1] not in b"SWCF" or hlen < 0 or blen < 0:
            return None
        size = hlen + blen
        data = head[end + 1:end + 1 + size]
        if len(data) < size:
            data += os.pread(fd, size - len(data), at + len(head))
        if len(data) != size or zlib.crc32(data) != crc:
            return None
        try:
            header = json.loads(data[:hlen])
        except ValueError:
            return None
        if not isinstance(header, dict):
            return None
        return (head[:1], this, header, data[hlen:], at + end + 1 + hlen,
                at + end + 1 + size)

    def refresh(self) -> None:
        """Read what was appended since the last look (the other file, if it took over)."""
        firsts = [self._first(0), self._first(1)]
        active = 0 if firsts[0] >= firsts[1] else 1
        if firsts[active] != self.seq or active != self.active:
            self.active, self.seq, self.tail = active, firsts[active], 0
            self.pending, self.commits = [], []
        fd = self.fds[self.active]
        if self.seq == 0 or fd is None:
            return
        while True:
            got = self._parse(fd, self.tail, self.seq)
            if got is None:
                return
            tag, _seq, h, body, body_at, nxt = got
            try:
                self._apply(tag, h, body, body_at)
            except (KeyError, TypeError, ValueError):
                return  # a record of no known shape ends the log, as a damaged one does
            self.tail = nxt

    def _apply(self, tag: bytes, h: dict[str, Any], body: bytes, at: int) -> None:
        if tag == b"W":
            self.pending.append((str(h["thread"]), Write(
                str(h["checkpoint"]), str(h["ns"]), str(h["task_id"]), str(h["task_path"]),
                str(h["channel"]), int(h["idx"]), str(h["kind"]), body)))
        elif tag in (b"C", b"F"):
            thread, ns = str(h["thread"]), str(h["ns"])
            if tag == b"C":
                self.commits.append(Logged(thread, ns, str(h["ref"]),
                                           None if h["old"] is None else str(h["old"]),
                                           str(h["new"]), str(h["pack"]), at,
                                           int(h["pack_len"]),
                                           len(body) - int(h["pack_len"])))
            if tag == b"F" or h.get("fold"):
                self.pending = [(t, w) for t, w in self.pending
                                if t != thread or w.ns != ns]

    def pending_of(self, thread: str) -> list[Write]:
        self.refresh()
        return [w for t, w in self.pending if t == thread]

    def body(self, logged: Logged) -> tuple[bytes, bytes]:
        """A logged commit's pack and index (its fan-out table made again)."""
        fd = self.fds[self.active]
        assert fd is not None
        data = os.pread(fd, logged.pack_len + logged.index_len, logged.at)
        pack, rest = data[:logged.pack_len], data[logged.pack_len:]
        oid = len(logged.new) // 2
        count = (len(rest) - 8 - 2 * oid) // (oid + 8)  # names, crcs, offsets; 2 checksums
        names = [rest[8 + i * oid] for i in range(count)]
        fanout = b"".join(struct.pack(">I", bisect.bisect_right(names, b)) for b in range(256))
        return pack, rest[:8] + fanout + rest[8:]

    def due(self) -> bool:
        return len(self.commits) >= CHECKPOINT_COMMITS or self.tail >= CHECKPOINT_BYTES

    # -- writing (the lock held) ----------------------------------------------------------

    def _append(self, records: list[bytes]) -> None:
        """Write records after the last one and flush them (data only)."""
        if self.seq == 0:  # the shard's first sequence
            self.seq, self.active, self.tail = 1, 0, 0
            records = [_record(b"S", 1, {}), *records]
        fd = self._fd(self.active, True)
        assert fd is not None
        data = b"".join(records)
        view, at = memoryview(data), self.tail
        while view:
            done = os.pwrite(fd, view, at)
            view, at = view[done:], at + done
        os.fdatasync(fd)
        self.refresh()

    def log_writes(self, thread: str, writes: list[Write]) -> None:
        seq = self.seq or 1
        self._append([_record(b"W", seq, _write_header(thread, w), w.value) for w in writes])

    def log_commit(self, thread: str, ns: str, ref: str, old: str | None, pack_name: str,
                   pack: bytes, index: bytes, new: str, *, fold: bool) -> None:
        """A commit about to be written into git (``CommitOps.commit``'s ``log``)."""
        self._append([_record(b"C", self.seq or 1, {
            "thread": thread, "ns": ns, "ref": ref, "old": old, "new": new,
            "pack": pack_name, "pack_len": len(pack), "fold": fold},
            pack + index[:8] + index[_FANOUT_END:])])  # the fan-out follows from the names

    def log_fold(self, thread: str, ns: str) -> None:
        """The namespace's pending writes went into a commit made outside the log."""
        if any(t == thread and w.ns == ns for t, w in self.pending):
            self._append([_record(b"F", self.seq or 1, {"thread": thread, "ns": ns,
                                                        "kind": FOLDED})])

    def restart(self) -> None:
        """After everything the active file's commits wrote is durable in git: the next
        sequence in the other file, with the writes still pending, flushed."""
        other, seq = 1 - self.active, self.seq + 1
        records = [_record(b"S", seq, {}), *(_record(b"W", seq, _write_header(t, w), w.value)
                                             for t, w in self.pending)]
        fd = self._fd(other, True)
        assert fd is not None
        data = b"".join(records)
        view, at = memoryview(data), 0
        while view:
            done = os.pwrite(fd, view, at)
            view, at = view[done:], at + done
        os.fdatasync(fd)
        self.refresh()


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
