"""Pending writes of LangGraph threads: records, the per-thread journal, and the blob that
folds them into a checkpoint commit (gitstate/langgraph/saver.py, docs/langgraph.md "Layout").

A record is one pending write: ``<crc32> <header length> <body length>\\n``, the header
(JSON: checkpoint, namespace, task id, task path, channel, index) and the body (the value,
typed by LangGraph's serde). ``put_writes`` writes records to the thread's journal
(``.git/gitstate-thread-<hash>.pending``, see :class:`Journal`) in one write and flushes
it (fdatasync): that is its durability, with no commit. The next checkpoint commit of the
namespace carries the journal's pending records as its ``pending-writes`` file, and a fold
mark is then written after them. A torn record (a writer killed mid-write) fails its
checksum and ends the journal: that put_writes never returned.
"""

from __future__ import annotations

import json
import os
import secrets
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import StoreError
from ..system import safefile

JOURNAL_MAX_BYTES = 1 << 30
FOLDED = "\0folded"  # the kind of a fold mark: the namespace's earlier records are committed


@dataclass(frozen=True)
class Write:
    """One pending write: what LangGraph gave ``put_writes``, the value still serialized."""

    checkpoint: str
    ns: str
    task_id: str
    task_path: str
    channel: str
    idx: int
    kind: str
    value: bytes

    def header(self) -> dict[str, Any]:
        return {"checkpoint": self.checkpoint, "ns": self.ns, "task_id": self.task_id,
                "task_path": self.task_path, "channel": self.channel, "idx": self.idx,
                "kind": self.kind}


def encode(writes: list[Write]) -> bytes:
    out = bytearray()
    for w in writes:
        header = json.dumps(w.header(), sort_keys=True, separators=(",", ":")).encode()
        body = header + w.value
        out += b"%d %d %d\n" % (zlib.crc32(body), len(header), len(w.value)) + body
    return bytes(out)


def _one(data: bytes, at: int) -> tuple[Write, int]:
    """The record at ``at`` and where the next one starts (ValueError and the like when
    there is no whole, intact record there)."""
    end = data.index(b"\n", at, at + 64)
    crc, hlen, blen = (int(x) for x in data[at:end].split(b" "))
    body = data[end + 1:end + 1 + hlen + blen]
    if len(body) != hlen + blen or zlib.crc32(body) != crc:
        raise ValueError("checksum")
    h = json.loads(body[:hlen])
    return Write(str(h["checkpoint"]), str(h["ns"]), str(h["task_id"]), str(h["task_path"]),
                 str(h["channel"]), int(h["idx"]), str(h["kind"]),
                 bytes(body[hlen:])), end + 1 + hlen + blen


_BAD = (ValueError, KeyError, TypeError, RecursionError)


def decode(data: bytes) -> list[Write]:
    """The records of a committed ``pending-writes`` file (a damaged one: StoreError)."""
    out: list[Write] = []
    at = 0
    while at < len(data):
        try:
            w, at = _one(data, at)
        except _BAD as exc:
            raise StoreError(f"a checkpoint's pending-writes file is damaged ({exc})",
                             rule="thread.damaged") from None
        out.append(w)
    return out


def merge(writes: list[Write]) -> list[Write]:
    """One write per (checkpoint, task, index), LangGraph's rule: a task's regular writes
    are kept as first written (a retried task does not replace them), its special ones
    (errors, interrupts: negative indexes) as last written."""
    kept: dict[tuple[str, str, int], Write] = {}
    for w in writes:
        key = (w.checkpoint, w.task_id, w.idx)
        if w.idx >= 0 and key in kept:
            continue
        kept[key] = w
    return list(kept.values())


class Journal:
    """One thread's journal of pending writes not yet in a commit (call with the thread's
    lock held).

    Its records are written in place from the start of the file, each as ``J<generation>
    <record>``: a ``put_writes`` that finds nothing pending starts a new generation at
    offset 0, otherwise it writes after the last record. Readers take the generation of
    the first record and stop at the first record of another one, or a damaged one. So the
    file is rewritten rather than grown, and its flush is of data alone (the blocks are
    already allocated, the size unchanged), as a database's write-ahead log is reused."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _scan(self) -> tuple[int | None, list[Write], int]:
        """(generation, records and fold marks, offset after the last one)."""
        try:
            # (sole: a journal is gitstate's own; a hard link to a file elsewhere is refused
            # before its bytes could be taken for pending writes or written over)
            data = safefile.read_regular(self.path, JOURNAL_MAX_BYTES, sole=True)
        except FileNotFoundError:
            return None, [], 0
        gen: int | None = None
        out: list[Write] = []
        at = 0
        while at < len(data):
            try:
                space = data.index(b" ", at, at + 24)
                if data[at:at + 1] != b"J":
                    break
                this = int(data[at + 1:space], 16)
                if gen is not None and this != gen:
                    break
                w, nxt = _one(data, space + 1)
            except _BAD:
                break
            gen = this
            out.append(w)
            at = nxt
        return gen, out, at

    @staticmethod
    def _pending(records: list[Write]) -> list[Write]:
        out: list[Write] = []
        for w in records:
            if w.kind == FOLDED:
                out = [p for p in out if p.ns != w.ns]
            else:
                out.append(w)
        return out

    def read(self) -> list[Write]:
        """The pending writes: every record not followed by a fold mark of its namespace."""
        return self._pending(self._scan()[1])

    def append(self, writes: list[Write], *, durable: bool = True) -> None:
        """Durable when it returns: the data flushed (and, for a new journal, its name)."""
        gen, records, tail = self._scan()
        if durable and not self._pending(records):
            gen, tail = secrets.randbits(48), 0  # a new generation from the start
        if gen is None:
            return  # a fold mark for an empty journal: nothing to mark
        new = not os.path.lexists(self.path)
        fd = safefile.open_lock(self.path)
        try:
            data = b"".join(b"J%x " % gen + encode([w]) for w in writes)
            view, at = memoryview(data), tail
            while view:
                done = os.pwrite(fd, view, at)
                view, at = view[done:], at + done
            if durable:
                os.fdatasync(fd)
        finally:
            os.close(fd)
        if new and durable:
            dir_fd = safefile.open_dir(self.path.parent)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def clear(self, ns: str) -> None:
        """After the namespace's commit carried its pending writes: a fold mark, written
        and not flushed (a mark lost in a crash leaves records that are folded again, and
        the readers' merge makes them one)."""
        self.append([Write("", ns, "", "", "", 0, FOLDED, b"")], durable=False)
