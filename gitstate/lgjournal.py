"""Pending writes of LangGraph threads: records, the per-thread journal, and the blob that
folds them into a checkpoint commit (gitstate/langgraph.py, docs/langgraph.md "Layout").

A record is one pending write: ``<crc32> <header length> <body length>\\n``, the header
(JSON: checkpoint, namespace, task id, task path, channel, index) and the body (the value,
typed by LangGraph's serde). ``put_writes`` appends records to the thread's journal
(``.git/gitstate-thread-<hash>.pending``) in one write and flushes it (fdatasync): that is
its durability, with no commit. The next checkpoint commit of the namespace carries the
journal's records as its ``pending-writes`` file, and a fold mark is then appended (the
journal is emptied once it is all folded and past 64 KiB). A
journal's torn tail (a writer killed mid-append) fails its checksum and is ignored: that
put_writes never returned.
"""

from __future__ import annotations

import contextlib
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import safefile
from .errors import StoreError

JOURNAL_MAX_BYTES = 1 << 30
FOLD_BYTES = 64 << 10  # a journal past this, with nothing pending, is emptied
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


def decode(data: bytes, *, torn_ok: bool) -> list[Write]:
    """The records of ``data``. ``torn_ok`` (a journal): stop at the first damaged record;
    otherwise (a committed blob) a damaged one is a StoreError."""
    out: list[Write] = []
    at = 0
    while at < len(data):
        try:
            end = data.index(b"\n", at, at + 64)
            crc, hlen, blen = (int(x) for x in data[at:end].split(b" "))
            body = data[end + 1:end + 1 + hlen + blen]
            if len(body) != hlen + blen or zlib.crc32(body) != crc:
                raise ValueError("checksum")
            h = json.loads(body[:hlen])
            out.append(Write(str(h["checkpoint"]), str(h["ns"]), str(h["task_id"]),
                             str(h["task_path"]), str(h["channel"]), int(h["idx"]),
                             str(h["kind"]), bytes(body[hlen:])))
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            if torn_ok:
                break
            raise StoreError(f"a checkpoint's pending-writes file is damaged ({exc})",
                             rule="thread.damaged") from None
        at = end + 1 + hlen + blen
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
    lock held)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _records(self) -> bytes:
        try:
            return safefile.read_regular(self.path, JOURNAL_MAX_BYTES)
        except FileNotFoundError:
            return b""

    def read(self) -> list[Write]:
        """The pending writes: every record not followed by a fold mark of its namespace."""
        out: list[Write] = []
        for w in decode(self._records(), torn_ok=True):
            if w.kind == FOLDED:
                out = [p for p in out if p.ns != w.ns]
            else:
                out.append(w)
        return out

    def append(self, writes: list[Write], *, durable: bool = True) -> None:
        """Durable when it returns (the file's data and size flushed; its name, when new,
        by a flush of the directory)."""
        new = not os.path.lexists(self.path)
        fd = safefile.open_append(self.path)
        try:
            data = memoryview(encode(writes))
            if not new and os.fstat(fd).st_size:
                self._seal(fd)
            while data:
                data = data[os.write(fd, data):]
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

    def _seal(self, fd: int) -> None:
        """A torn tail (a killed append) would hide every record after it: cut it off
        before appending (the journal is short: emptied once all of it is folded)."""
        data = self._records()
        good = len(encode(decode(data, torn_ok=True)))
        if good != len(data):
            os.ftruncate(fd, good)

    def clear(self, ns: str) -> None:
        """After the namespace's commit carried its pending writes: a fold mark, appended
        and not flushed (a mark lost in a crash leaves records that are folded again, and
        the readers' merge makes them one). Once nothing in it is pending and it has
        grown past ``FOLD_BYTES``, the journal is emptied."""
        self.append([Write("", ns, "", "", "", 0, FOLDED, b"")], durable=False)
        with contextlib.suppress(FileNotFoundError):
            if os.stat(self.path).st_size > FOLD_BYTES and not self.read():
                fd = safefile.open_in_place(self.path)
                try:
                    os.ftruncate(fd, 0)
                finally:
                    os.close(fd)
