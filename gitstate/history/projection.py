"""The supersession chain: git history projected into working_state_history.jsonl.

One JSON line per commit, oldest first, built from commit messages and trailers only. The
file is never committed (it is listed in .git/info/exclude); it is a cache of the log that
is appended after each write, caught up on open when it is behind, and rebuildable from git
alone. Reading the newest N lines seeks from the end, so ``get`` does not slow down as
history grows.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple, Protocol

from ..core.errors import HistoryRewritten
from ..core.model import HISTORY_FILE, format_time
from ..core.records import ChangeRecord
from ..core.trailers import NotAGitstateCommit, parse_message
from ..system import faults, safefile


class _Commit(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def parents(self) -> tuple[str, ...]: ...
    @property
    def time(self) -> int: ...
    @property
    def message(self) -> bytes: ...


class _Walker(Protocol):
    def walk(self, head: str, stop: str | None = None) -> Iterator[Any]: ...


def record(info: _Commit) -> ChangeRecord:
    """The projection line of one commit."""
    commit, parent = info.id, info.parents[0] if info.parents else None
    time = format_time(datetime.fromtimestamp(info.time, UTC))
    try:
        change = parse_message(info.message)
    except NotAGitstateCommit:
        text = info.message.decode("utf-8", "replace").strip()
        return {"commit": commit, "parent": parent, "time": time, "actor": None,
                "op": "foreign", "key": None, "old": None, "new": None, "reason": text,
                "expires_at": None, "reverts": None, "request": None}
    out: ChangeRecord = {
        "commit": commit,
        "parent": parent,
        "time": time,
        "actor": change.actor,
        "op": change.op,
        "key": change.key,
        "old": change.old,
        "new": change.new,
        "reason": change.reason,
        "expires_at": change.expires_at,
        "reverts": change.reverts,
        "request": change.request,
    }
    if change.handoff is not None or change.op == "handoff":
        out["handoff"] = change.handoff
    if change.adopt is not None:
        out["adopt"] = change.adopt
    if change.observation:
        out["observation"] = change.observation
    if change.schema_version is not None:
        out["schema_version"] = change.schema_version
    return out


def _line(rec: ChangeRecord) -> bytes:
    return (json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")


class Mark(NamedTuple):
    """What the projection held at one moment: its size and its newest commit.

    Read the mark *before* HEAD: a writer moves the ref first and appends its line after, so
    the marked commit is always in the history of a HEAD read later. Reading them the other
    way round, a write landing in between looks like a rewritten branch. Readers then look
    only at the first ``end`` bytes, so lines appended meanwhile are not counted twice.
    """

    end: int
    last: str | None


def _identity(info: os.stat_result) -> tuple[int, int, int, int]:
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


class Projection:
    """working_state_history.jsonl of one state repository."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / HISTORY_FILE
        # The newest record as last read or written, with the file's identity then (inode,
        # size, mtime): every write asks for it twice (the catch-up check, the append), and
        # an unchanged file need not be parsed again. Any append, rebuild or edit changes
        # the size, the inode or the mtime.
        self._newest: tuple[tuple[int, int, int, int], Mark, bool] | None = None

    def _known(self, info: os.stat_result) -> tuple[Mark, bool] | None:
        """The remembered (mark, ends with a newline) when the file is unchanged since."""
        known = self._newest
        if known is not None and known[0] == _identity(info):
            return known[1], known[2]
        return None

    def _newest_of(self, f: BinaryIO, info: os.stat_result) -> tuple[Mark, bool]:
        """(mark, whether the file ends with a complete line), remembered for next time."""
        known = self._known(info)
        if known is not None:
            return known
        end = info.st_size
        newest = self._tail(f, 1, end)
        complete = True
        if end:
            f.seek(end - 1)
            complete = f.read(1) == b"\n"
        mark = Mark(end, str(newest[0]["commit"]) if newest else None)
        self._newest = (_identity(info), mark, complete)
        return mark, complete

    def _open(self) -> BinaryIO | None:
        """The file for reading; None when it is absent or not a regular file (a symlink
        or FIFO put in its place counts as no projection: it is rebuilt from git, and the
        thing it pointed at is never read or written)."""
        try:
            return safefile.open_regular(self.path, sole=True)  # a hard link: none either
        except OSError:
            return None

    def mark(self) -> Mark:
        """The projection's size and newest complete record, read now."""
        f = self._open()
        if f is None:
            return Mark(0, None)
        with f:
            return self._newest_of(f, os.fstat(f.fileno()))[0]

    def tail(self, n: int, end: int | None = None) -> list[ChangeRecord]:
        """The newest ``n`` complete records (of the first ``end`` bytes), newest first."""
        if n <= 0:
            return []
        f = self._open()
        if f is None:
            return []
        with f:
            size = f.seek(0, os.SEEK_END)
            return self._tail(f, n, size if end is None else min(end, size))

    @staticmethod
    def _tail(f: BinaryIO, n: int, end: int) -> list[ChangeRecord]:
        pos, chunk, data = end, 8192, b""
        while pos > 0 and data.count(b"\n") <= n:
            step = min(chunk, pos)
            pos -= step
            f.seek(pos)
            data = f.read(step) + data
            chunk *= 2
        lines = data.split(b"\n")
        # the last element is b"" after a final newline, or a torn line: drop it either way
        complete = lines[:-1] if pos == 0 else lines[1:-1]
        out = []
        for raw in reversed(complete[-n:]):
            with contextlib.suppress(ValueError):
                out.append(json.loads(raw))
        return out

    def newest_first(self, contains: bytes | None = None,
                     end: int | None = None) -> Iterator[ChangeRecord]:
        """Records (of the first ``end`` bytes) newest first, reading the file backwards in
        chunks; with ``contains``, only lines holding those bytes are parsed (a cheap
        pre-filter for per-key queries)."""
        f = self._open()
        if f is None:
            return
        with f:
            size = f.seek(0, os.SEEK_END)
            pos = size if end is None else min(end, size)
            tail = b""
            first = True
            while pos > 0:
                step = min(65536, pos)
                pos -= step
                f.seek(pos)
                block = f.read(step) + tail
                lines = block.split(b"\n")
                tail = lines[0]
                complete = lines[1:]
                if first:
                    complete = complete[:-1]  # b"" after the final newline, or a torn line
                    first = False
                for raw in reversed(complete):
                    if raw and (contains is None or contains in raw):
                        with contextlib.suppress(ValueError):
                            yield json.loads(raw)
            if tail and not first and (contains is None or contains in tail):
                with contextlib.suppress(ValueError):
                    yield json.loads(tail)

    def last_commit(self) -> str | None:
        return self.mark().last

    def all(self, end: int | None = None) -> list[ChangeRecord]:
        """Every complete record (of the first ``end`` bytes), oldest first."""
        f = self._open()
        if f is None:
            return []
        with f:
            data = f.read() if end is None else f.read(end)
        out = []
        for raw in data.split(b"\n")[:-1]:
            with contextlib.suppress(ValueError):
                out.append(json.loads(raw))
        return out

    def missing(self, walker: _Walker, head: str, last: str | None) -> list[ChangeRecord]:
        """Records for the commits after ``last`` (the projection's newest, from a mark read
        before ``head``) up to ``head``, oldest first.

        Raises HistoryRewritten when ``last`` is not in HEAD's history.
        """
        if last == head:
            return []
        pending = []
        reached = last is None
        for info in walker.walk(head):
            if info.id == last:
                reached = True
                break
            pending.append(record(info))
        if not reached:
            raise HistoryRewritten(
                f"HEAD {head[:12]} does not descend from {last[:12] if last else '?'}, the "
                "last commit the history projection recorded: the branch was rewritten "
                "outside gitstate. Inspect with `git reflog`; `gitstate verify` names it.",
                head=head, recorded=last,
            )
        pending.reverse()
        return pending

    def append(self, records: Iterable[ChangeRecord]) -> None:
        """Append records with one write; a torn tail is cut first. No fsync: the file is
        a cache of the log, caught up from git after a crash."""
        data = b"".join(_line(r) for r in records)
        if not data:
            return
        if safefile.kind(self.path) not in (None, "file") or safefile.shared(self.path):
            # readers took it for no projection, so ``records`` start from the first commit
            self.path.unlink()  # the link itself, never what it points at
        self._cut_torn_tail()
        fd = safefile.open_append(self.path)
        try:
            if faults.armed("projection"):  # die with half a line written
                os.write(fd, data[: len(data) // 2])
                faults.hit("projection")
            os.write(fd, data)
        finally:
            os.close(fd)

    def append_after(self, last: str, records: list[ChangeRecord]) -> bool:
        """Append ``records`` when the newest complete record is ``last`` (the hot path after a
        commit: one open for the check, the torn-tail cut and the write); False, with
        nothing written, when it is not (or the file is absent or not a regular file)."""
        data = b"".join(_line(r) for r in records)
        try:
            f = safefile.open_regular(self.path, write=True)
        except OSError:
            return False
        with f:
            mark, complete = self._newest_of(f, os.fstat(f.fileno()))
            if mark.last != last:
                return False
            if not complete:  # a torn line after the newest record: cut it
                f.seek(0)
                f.truncate(self._end_of_complete(f, mark.end))
            f.seek(0, os.SEEK_END)
            f.flush()
            if faults.armed("projection"):  # die with half a line written
                os.write(f.fileno(), data[: len(data) // 2])
                faults.hit("projection")
            os.write(f.fileno(), data)
            newest = records[-1]["commit"] if records else last
            info = os.fstat(f.fileno())
            self._newest = (_identity(info), Mark(info.st_size, newest), True)
        return True

    @staticmethod
    def _end_of_complete(f: BinaryIO, size: int) -> int:
        """The offset just past the last newline of the first ``size`` bytes (0: none)."""
        pos = size
        while pos > 0:
            step = min(4096, pos)
            pos -= step
            f.seek(pos)
            idx = f.read(step).rfind(b"\n")
            if idx >= 0:
                return pos + idx + 1
        return 0

    def catch_up(self, walker: _Walker, head: str) -> int:
        """Append what the log has and the projection lacks; returns how many."""
        records = self.missing(walker, head, self.last_commit())  # under the write lock
        self.append(records)
        return len(records)

    def rebuild(self, walker: _Walker, head: str | None) -> int:
        """Rewrite the projection from git alone (``head`` None: empty)."""
        from ..store import atomic_write

        records = [record(info) for info in walker.walk(head)] if head else []
        records.reverse()
        atomic_write(self.path, b"".join(_line(r) for r in records))
        return len(records)

    def _cut_torn_tail(self) -> None:
        try:
            with safefile.open_regular(self.path, write=True) as f:
                size = f.seek(0, os.SEEK_END)
                if size == 0:
                    return
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    f.truncate(self._end_of_complete(f, size))
        except (FileNotFoundError, safefile.NotRegular):
            return
