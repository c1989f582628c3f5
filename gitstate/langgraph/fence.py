"""One writer per LangGraph thread: the fence of the checkpointer (docs/langgraph.md, "One
writer per thread").

Each saver is an owner (``owner_id``: host, process and 8 random bytes; processes that
name the same ``owner`` share one claim, a pool acting as one writer). It claims a
thread at its first write to it, or by ``claim``: the claim is recorded in the thread's
lock file (the bytes of ``gitstate-thread-<hash>.flock``; a JSON line with the claim's
number, the owner and the time), written and fsynced with that lock held. Every checkpoint
write of the thread runs under the same lock and first reads the record: a writer whose
claim is no longer the recorded one has been superseded, and its write is refused
(:class:`ThreadSuperseded`, rule ``thread.superseded``) before anything is written — so is
every later write of that saver to the thread, until it claims the thread again.

The check and the write it guards are under one kernel lock, so a claim falls between two
writes, never inside one. A writer stopped (SIGSTOP) between writes is superseded while it
sleeps and refused when it runs again; one stopped inside a write holds the lock, the claim
waits for it, and that write, begun before the claim, counts. A record that cannot be read
(torn by a crash, planted) names no one: the next writer claims the thread, and a writer
that held it is superseded. The fence is per repository: across clones, a thread moves by
push and pull, which only fast-forward it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

from ..core.errors import DiskFullAs, ThreadSuperseded
from ..core.model import format_time
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


def _read(fd: int) -> dict[str, object] | None:
    raw = os.pread(fd, RECORD_MAX + 1, 0)
    try:
        record = json.loads(raw.decode("utf-8").strip() or "null")
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("owner"), str) or \
            not isinstance(record.get("claim"), int):
        return None
    return record


class ThreadFence:
    """The claims of one saver (see the module docstring). ``lock_path(thread_id)`` is the
    thread's lock file."""

    def __init__(self, lock_path: Callable[[str], Path], owner: str | None = None) -> None:
        self.lock_path = lock_path
        self.owner = owner or owner_id()
        self.held: dict[str, int] = {}  # thread -> the claim number this owner holds
        self.lost: dict[str, dict[str, object]] = {}  # thread -> the claim that superseded

    def _path(self, thread_id: str) -> Path:
        return self.lock_path(thread_id)

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
            return self._claim(thread_id, fd, _read(fd))

    def holder(self, thread_id: str) -> dict[str, object] | None:
        """The thread's recorded claim (number, owner, time), or None."""
        with locking.exclusive(self._path(thread_id)) as fd:
            return _read(fd)

    def _claim(self, thread_id: str, fd: int, record: dict[str, object] | None) -> int:
        number = int(str(record["claim"])) + 1 if record else 1
        data = json.dumps({"claim": number, "owner": self.owner,
                           "at": format_time(datetime.now(UTC))}).encode() + b"\n"
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
        os.fsync(fd)  # a claim is durable before the writes it allows
        self.held[thread_id] = number
        self.lost.pop(thread_id, None)
        return number

    def _check(self, thread_id: str, fd: int) -> None:
        record = _read(fd)
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
        raise ThreadSuperseded(
            f"thread {thread_id!r} was claimed by another writer ({by.get('owner', '?')}, "
            f"claim {by.get('claim', '?')} at {by.get('at', '?')}) after this one "
            f"({self.owner}): this write was refused and nothing of it was written; "
            "resume the thread from its latest checkpoint in the writer that holds it, or "
            "claim it again (saver.claim(thread_id))", thread_id=thread_id,
            owner=self.owner, claimed_by=by.get("owner"), claim=by.get("claim"))
