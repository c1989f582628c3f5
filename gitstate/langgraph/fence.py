"""One writer per LangGraph thread: the fence of the checkpointer (docs/langgraph.md, "One
writer per thread").

Each saver is an owner (``owner_id``: host, process and 8 random bytes; processes that
name the same ``owner`` share one claim, a pool acting as one writer). It claims a
thread at its first write to it, or by ``claim``: the claim is recorded in the thread's
lock file (the bytes of ``gitstate-thread-<hash>.flock``; a JSON line with the claim's
number, the owner and the time), written with that lock held (not flushed: a power loss
leaves no writer alive to fence). Every checkpoint write of the thread runs under the
same lock and first reads the record: a writer whose
claim is no longer the recorded one has been superseded, and its write is refused
(:class:`ThreadSuperseded`, rule ``thread.superseded``) before anything is written — so is
every later write of that saver to the thread, until it claims the thread again.

The check and the write it guards are under one kernel lock, so a claim falls between two
writes, never inside one. A writer stopped (SIGSTOP) between writes is superseded while it
sleeps and refused when it runs again; one stopped inside a write holds the lock, the claim
waits for it, and that write, begun before the claim, counts. The fence is per repository:
across clones, a thread moves by push and pull, which only fast-forward it.

A record is believed only when the fence wrote it (a hand edit must not hand the thread to
a writer that was superseded): it carries an HMAC-SHA256, under the repository's key that
never enters git (``redact.repo_key``), of the thread id and its fields, so a record made or
edited by hand is detected; and a record written again as it was (an old copy restored over
the file) is told by the file itself, whose inode and change time (``st_ctime``, which no
program sets) differ from those seen when this saver last read or wrote that same record;
a claim number lower than one already seen is a rollback. A record that is torn (a crash),
unsigned, wrongly signed, restored or rolled back names no one: the next writer claims the
thread, and every writer that held it is superseded — a hand edit can take a thread from
its writer, never give it to one.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from ..core.errors import DiskFullAs, ThreadSuperseded
from ..core.model import format_time
from ..history import redact
from ..system import locking

RECORD_MAX = 512


def owner_id() -> str:
    """A writer's name in claims: host, process, 8 random bytes (never reused)."""
    import socket

    host = "".join(c if c.isalnum() or c in "-." else "-" for c in socket.gethostname()[:32])
    return f"{host}:{os.getpid()}:{os.urandom(8).hex()}"


def _disk_full(thread_id: str) -> DiskFullAs:
    """A full disk met under a thread's lock is ``store.disk_full`` with its hint, as for
    every writer (nothing moved: a thread's ref moves last)."""
    return DiskFullAs(f"the write of thread {thread_id[:100]!r} could not be made; the "
                      "thread is as it was")


def _sign(key: bytes, thread_id: str, claim: int, owner: str, at: str) -> str:
    text = json.dumps(["gitstate thread claim", thread_id, claim, owner, at])
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def _parse(raw: bytes, key: bytes, thread_id: str) -> dict[str, object] | None:
    """The claim ``raw`` records, or None unless well formed and signed by the fence."""
    try:
        record = json.loads(raw.decode("utf-8").strip() or "null")
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("owner"), str) or \
            type(record.get("claim")) is not int or not isinstance(record.get("at"), str) \
            or not isinstance(record.get("mac"), str):
        return None
    wanted = _sign(key, thread_id, record["claim"], record["owner"], record["at"])
    return record if hmac.compare_digest(wanted, record["mac"]) else None


class ThreadFence:
    """The claims of one saver (see the module docstring). ``lock_path(thread_id)`` is the
    thread's lock file."""

    def __init__(self, lock_path: Callable[[str], Path], owner: str | None = None) -> None:
        self.lock_path = lock_path
        self.owner = owner or owner_id()
        self.held: dict[str, int] = {}  # thread -> the claim number this owner holds
        self.lost: dict[str, dict[str, object]] = {}  # thread -> the claim that superseded
        # thread -> (record bytes, (inode, change time), claim number): the file last seen
        self.seen: dict[str, tuple[bytes, tuple[int, int], int]] = {}
        self._key: bytes | None = None

    def _path(self, thread_id: str) -> Path:
        return self.lock_path(thread_id)

    def key(self, thread_id: str) -> bytes:
        """The repository's key (the lock files live in .git, beside it)."""
        if self._key is None:
            self._key = redact.repo_key(self._path(thread_id).parent)
        return self._key

    def _read(self, thread_id: str, fd: int) -> dict[str, object] | None:
        """The recorded claim, or None when it names no one (see the module docstring)."""
        raw = os.pread(fd, RECORD_MAX + 1, 0)
        info = os.fstat(fd)
        mark = (info.st_ino, info.st_ctime_ns)
        record = _parse(raw, self.key(thread_id), thread_id)
        last = self.seen.get(thread_id)
        if record is not None and last is not None and (
                (raw == last[0] and mark != last[1]) or int(str(record["claim"])) < last[2]):
            record = None  # an old record written back: restored, or rolled back
        if record is not None:
            self.seen[thread_id] = (raw, mark, int(str(record["claim"])))
        return record

    @contextlib.contextmanager
    def locked(self, thread_id: str) -> Iterator[int]:
        """The thread's lock, no check (reads, deletes, archives)."""
        with _disk_full(thread_id), locking.exclusive(self._path(thread_id)) as fd:
            yield fd

    @contextlib.contextmanager
    def writing(self, thread_id: str) -> Iterator[None]:
        """The thread's lock for a checkpoint write by this owner: its claim checked (or,
        at its first write to the thread, made) before the body runs."""
        with _disk_full(thread_id), locking.exclusive(self._path(thread_id)) as fd:
            self._check(thread_id, fd)
            yield

    @contextlib.contextmanager
    def guarded(self, thread_id: str) -> Iterator[None]:
        """The thread's lock for a change other than a checkpoint write (a delete, a prune,
        a copy onto it): refused to an owner the thread was taken from, as its writes are;
        an owner that never wrote the thread (an operator's pruning process) neither claims
        it nor is refused."""
        with _disk_full(thread_id), locking.exclusive(self._path(thread_id)) as fd:
            if thread_id in self.held or thread_id in self.lost:
                self._check(thread_id, fd)
            yield

    def claim(self, thread_id: str) -> int:
        """Take the thread: writers that held it are refused from their next write on.
        Returns the claim's number."""
        with _disk_full(thread_id), locking.exclusive(self._path(thread_id)) as fd:
            return self._claim(thread_id, fd, self._read(thread_id, fd))

    def holder(self, thread_id: str) -> dict[str, object] | None:
        """The thread's recorded claim (number, owner, time), or None."""
        with locking.exclusive(self._path(thread_id)) as fd:
            return self._read(thread_id, fd)

    def _claim(self, thread_id: str, fd: int, record: dict[str, object] | None) -> int:
        # above every number seen: a record that names no one may hide a higher one
        number = max(int(str(record["claim"])) if record else 0,
                     self.seen.get(thread_id, (b"", (0, 0), 0))[2]) + 1
        at = format_time(datetime.now(UTC))
        data = json.dumps({"claim": number, "owner": self.owner, "at": at,
                           "mac": _sign(self.key(thread_id), thread_id, number, self.owner,
                                        at)}).encode() + b"\n"
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
        # not flushed: a claim must outlive a process, which the page cache gives; a power
        # loss ends every writer that held the thread, and whoever writes it next claims it
        info = os.fstat(fd)
        self.seen[thread_id] = (data, (info.st_ino, info.st_ctime_ns), number)
        self.held[thread_id] = number
        self.lost.pop(thread_id, None)
        return number

    def _check(self, thread_id: str, fd: int) -> None:
        record = self._read(thread_id, fd)
        if record is not None and record.get("owner") == self.owner:
            self.held[thread_id] = int(str(record["claim"]))  # ours (or our pool's)
            return
        if thread_id not in self.held and thread_id not in self.lost:
            self._claim(thread_id, fd, record)  # the first write of this owner
            return
        if thread_id in self.held:
            self.held.pop(thread_id)
            self.lost[thread_id] = record or {}
        by = self.lost[thread_id]
        how = (f"was claimed by another writer ({by.get('owner', '?')}, claim "
               f"{by.get('claim', '?')} at {by.get('at', '?')}) after this one") if by else (
            "has a claim record that names no one (torn by a crash, or not the fence's: "
            "edited by hand, restored from a copy), so it is no longer this writer's")
        raise ThreadSuperseded(
            f"thread {thread_id!r} {how} ({self.owner}): this write was refused and nothing "
            "of it was written; "
            "resume the thread from its latest checkpoint in the writer that holds it, or "
            "claim it again (saver.claim(thread_id))", thread_id=thread_id,
            owner=self.owner, claimed_by=by.get("owner"), claim=by.get("claim"))
