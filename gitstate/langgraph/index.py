"""The checkpoint index of a repository's LangGraph threads: which checkpoints each thread
ref holds, by id, with their commit, parent, run and metadata, and which commits carry the
pending writes of each checkpoint (gitstate/langgraph/saver.py).

It lets ``get_tuple`` find a checkpoint's commit and ``list`` answer across threads
without walking any history. It is a cache beside the refs, never the truth: each ref's
entry names the head it was read at, and a reader that finds the ref elsewhere (another
writer's put that crashed before appending here, a git command, a tombstone) reads that
ref's history again and records it. A missing or damaged file is rebuilt the same way.

``.git/gitstate-threads.idx`` holds JSON lines, each appended in one write (O_APPEND, so
writers of several processes never interleave within a line): ``{"ref", "base", "head",
"add": [...]}`` adds checkpoints (of commit ``head``) to a ref whose head began with
``base``;
``"reset"`` in place of ``base`` and ``add`` replaces the ref's entries (``"checked"``: the
newest head known to pass the rule of foreign commits, gitstate/langgraph/read.py); a null ``head``
drops the ref. Lines are never flushed: after a crash the check against the refs decides.
When it holds more than two lines a ref (and 64), it is rewritten whole, a line a ref.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..system import safefile

INDEX_MAX_BYTES = 1 << 30


@dataclass(frozen=True)
class Entry:
    """One checkpoint of a thread ref (or, with ``checkpoint`` None, a commit carrying only
    pending writes)."""

    checkpoint: str | None
    commit: str
    parent: str | None = None
    run_id: str | None = None
    metadata: Any = None  # the metadata as JSON when it is JSON, else None (unknown)
    writes_for: tuple[str, ...] = ()
    layout: int = 2

    def row(self) -> list[Any]:
        return [self.checkpoint, self.commit, self.parent, self.run_id, self.metadata,
                list(self.writes_for), self.layout]

    @classmethod
    def from_row(cls, row: list[Any]) -> Entry:
        return cls(row[0], row[1], row[2], row[3], row[4], tuple(row[5]), int(row[6]))


@dataclass
class RefEntries:
    thread: str
    ns: str
    head: str | None
    entries: list[Entry] = field(default_factory=list)
    by_id: dict[str, Entry] = field(default_factory=dict)
    writes: dict[str, list[str]] = field(default_factory=dict)
    # the newest head of the ref known to pass the rule of foreign commits (the saver's
    # own commits, and heads a reader checked); None: none known (gitstate/langgraph/read.py)
    checked: str | None = None

    @property
    def trusted(self) -> bool:
        """Whether every commit up to the head passed the rule (values may be decoded
        with the caller's serde)."""
        return self.checked is not None and self.checked == self.head

    def add(self, entries: list[Entry]) -> None:
        for e in entries:
            self.entries.append(e)
            if e.checkpoint is not None:
                self.by_id[e.checkpoint] = e
            for cid in e.writes_for:
                self.writes.setdefault(cid, []).append(e.commit)


class CheckpointIndex:
    """The index file, read incrementally (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.refs: dict[str, RefEntries] = {}
        self._offset = 0
        self._inode: tuple[int, int] | None = None
        self._lines = 0

    def refresh(self) -> None:
        """Apply what other writers appended since the last look."""
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            self.refs, self._offset, self._inode, self._lines = {}, 0, None, 0
            return
        inode = (info.st_dev, info.st_ino)
        if inode != self._inode or info.st_size < self._offset:
            self.refs, self._offset, self._inode, self._lines = {}, 0, inode, 0
        if info.st_size == self._offset:
            return
        try:
            with safefile.open_regular(self.path) as f:
                f.seek(self._offset)
                data = f.read(INDEX_MAX_BYTES)
        except OSError:
            self.refs = {}
            return
        end = data.rfind(b"\n") + 1  # a line still being written waits for the next look
        for line in data[:end].splitlines():
            self._apply(line)
        self._offset += end

    def _apply(self, line: bytes) -> None:
        self._lines += 1
        try:
            rec = json.loads(line)
            name = rec["ref"]
            if rec["head"] is None:
                self.refs.pop(name, None)
                return
            entries = [Entry.from_row(r) for r in rec["reset"]] if "reset" in rec else [
                Entry.from_row([r[0], rec["head"], *r[1:]]) for r in rec["add"]]
            if "reset" in rec:
                checked = rec.get("checked")  # a line without it: never checked
                fresh = RefEntries(rec["thread"], rec["ns"], rec["head"],
                                   checked=checked if isinstance(checked, str) else None)
                fresh.add(entries)
                self.refs[name] = fresh
                return
            known = self.refs.get(name)
            if known is None or (known.head or "")[:12] != (rec["base"] or ""):
                # not the head this line extends: unknown until read from git again
                stale = self.refs.setdefault(name, RefEntries("", "", None))
                stale.head = "?"
                return
            known.add(entries)
            if known.trusted:  # the saver's own commit on a checked head
                known.checked = rec["head"]
            known.head = rec["head"]
        except (ValueError, KeyError, TypeError, IndexError, RecursionError):
            self.refs.clear()  # a damaged index: everything is read from git again

    def added(self, name: str, thread: str, ns: str, base: str | None, head: str,
              entries: list[Entry]) -> None:
        """A writer's new commit on ``name`` (from ``base``)."""
        if base is None:  # a new ref: all its entries (an "add" names no thread, no ns),
            self.reset(name, thread, ns, head, entries, head)  # its one commit the saver's
            return
        # the entries' commit is the new head; the base is named by a prefix (a reader
        # compares it with the head it knows, and every head with the ref itself)
        self._write({"ref": name, "base": base[:12] if base else None, "head": head,
                     "add": [[e.row()[0], *e.row()[2:]] for e in entries]})

    def reset(self, name: str, thread: str, ns: str, head: str | None,
              entries: list[Entry], checked: str | None = None) -> None:
        if head is None:
            self._write({"ref": name, "head": None})
        else:
            self._write({"ref": name, "thread": thread, "ns": ns, "head": head,
                         "checked": checked, "reset": [e.row() for e in entries]})

    def _write(self, record: dict[str, Any]) -> None:
        self.refresh()
        line = json.dumps(record, separators=(",", ":"), default=str).encode() + b"\n"
        with contextlib.suppress(OSError):  # a cache: the refs are checked on every read
            safefile.append(self.path, line, repair=True)
        self.refresh()
        if self._lines > 2 * len(self.refs) + 64:
            self._compact()

    def _compact(self) -> None:
        out = bytearray()
        for name, r in self.refs.items():
            if r.head is None or r.head == "?":
                continue
            out += json.dumps({"ref": name, "thread": r.thread, "ns": r.ns, "head": r.head,
                               "checked": r.checked, "reset": [e.row() for e in r.entries]},
                              separators=(",", ":"), default=str).encode() + b"\n"
        with contextlib.suppress(OSError):
            safefile.write_atomic(self.path, bytes(out))
        self.refresh()

