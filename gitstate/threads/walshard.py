"""One shard of the checkpointer's write-ahead log: its two pre-allocated files, the
record format, appending and flushing a record, reading the active file back
(gitstate/threads/wal.py has the format and what moves between the log and git).
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import json
import os
import struct
import threading
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import layout
from ..system import locking, safefile
from .journal import FOLDED, Write

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
        self._turn = threading.Lock()
        self._pid = os.getpid()

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
        """The shard's lock, its state read again. The lock is a flock of ``-0.log``: once
        the shard keeps that file open, an uncontended lock is taken on the kept
        descriptor (no open and close a put); a contended one, and the first, on a
        descriptor of its own, waited for as every lock is (locking.exclusive). The kept
        descriptor's flock is one per open file, so threads of this process take turns on
        ``_turn`` first, and a forked child leaves what it inherited alone (that flock
        is the parent's) and opens its own."""
        if self._pid != os.getpid():  # forked: the parent's turn and open files stay its
            self._turn, self.fds = threading.Lock(), [None, None]
            self._pid = os.getpid()
        with self._turn:
            fd = self.fds[0]
            if fd is not None and locking.take_now(fd):
                try:
                    self.refresh()
                    yield
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                return
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
