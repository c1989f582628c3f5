"""What a checkpoint thread's life beyond its puts needs: deletes, copies and LangGraph's
prune with gitstate's retention (keep the newest N, hide what is older than a age), each
keeping the audit trail (a mixin of GitCheckpointSaver, gitstate/langgraph/saver.py).

Deletes move a thread's refs to ``refs/gitstate/archive/threads/<thread>/<time>/...``
instead of dropping commits; ``delete_for_runs`` and ``prune(strategy="keep_latest")`` add
a tombstone commit (``Gitstate-Delete-Runs`` / ``Gitstate-Prune-Keep``) that later reads
honour, so the checkpoints they hide stay in history. ``copy_thread`` points the target's
refs at the source's commits. Each is fenced like a put (gitstate/langgraph/fence.py), and
runs after the thread's log shard is checkpointed, so no replay moves a ref back over it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from ..core.errors import StoreError
from ..system import clock as clockbase
from ..threads.format import ARCHIVE, PREFIX, delete_runs_message, enc, prune_message
from .fence import ThreadFence
from .index import Entry
from .read import ThreadReads


class ThreadRetention(ThreadReads):
    """Deletes, copies and prunes, over the reads of :class:`ThreadReads`."""

    mutex: threading.RLock
    fence: ThreadFence
    identity: bytes

    def commit_pending_writes(self, thread_id: str) -> Sequence[str]:
        raise NotImplementedError  # the saver's (gitstate/langgraph/saver.py)

    def _lock(self, thread_id: str) -> Any:  # deletes, prunes, copies: fenced (fence.py)
        return self.fence.guarded(thread_id)

    def _settle(self, thread_id: str) -> Any:
        """Before a write of the thread outside the log (a tombstone, an archive, a
        copy, a commit of pending writes): its shard checkpointed, so that no replay
        moves the thread's refs back over it."""
        shard = self.wal.shard(self._digest(thread_id))
        self.wal.checkpoint(shard)
        return shard

    def _archive(self, thread_id: str) -> None:
        self._settle(thread_id)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        for name, head in self.store.refs_under(f"{PREFIX}{enc(thread_id)}/").items():
            self.store.move_ref(f"{ARCHIVE}{enc(thread_id)}/{stamp}/{name}", None, head)
            self.store.move_ref(f"{PREFIX}{enc(thread_id)}/{name}", head, None)
            self.index.reset(f"{PREFIX}{enc(thread_id)}/{name}", thread_id, "", None, [])

    def delete_thread(self, thread_id: str) -> None:
        self.commit_pending_writes(str(thread_id))  # into the archive with the thread
        with self.mutex, self._lock(str(thread_id)):
            self._archive(str(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        with self.mutex:
            for (thread_id, ns), head in sorted(self._all_refs().items()):
                state = self._entries(thread_id, ns, head)
                if not any(e.run_id in wanted for e in state.by_id.values()):
                    continue
                with self._lock(thread_id):
                    left = max((cid for cid, e in state.by_id.items()
                                if e.run_id not in wanted), default=None)
                    self._tombstone(thread_id, ns, delete_runs_message(sorted(wanted), left))

    def _tombstone(self, thread_id: str, ns: str, message: bytes) -> None:
        """A commit that hides checkpoints from readers and keeps them in history, with the
        newest id still visible after it."""
        ref = self.ref_name(thread_id, ns, "checkpoints")
        self._settle(thread_id)
        for _ in range(5):
            head = self.store.ref(ref)
            new = self.store.commit(head, {}, message, self.identity,
                                    self._commit_time(head), ref=ref)
            if new is not None:
                self._entries(thread_id, ns, new)
                return
        raise StoreError(f"{ref} kept moving while writing", rule="store.contention")

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        src, dst = str(source_thread_id), str(target_thread_id)
        self._new_thread(dst)  # a refused target id writes nothing, not even src's writes
        self.commit_pending_writes(src)  # (its shard checkpointed too)
        with self.mutex, self._lock(dst):
            self._new_thread(dst)
            self._archive(dst)
            for name, head in self.store.refs_under(f"{PREFIX}{enc(src)}/").items():
                self.store.move_ref(f"{PREFIX}{enc(dst)}/{name}", None, head)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest",
              keep: int = 1, older_than: timedelta | None = None) -> None:
        """LangGraph's prune, with the retention gitstate adds: ``keep`` (the newest N
        checkpoints of each namespace stay visible) and ``older_than`` (only checkpoints
        older than that are hidden). A tombstone (``Gitstate-Prune-Keep``: the ids kept)
        hides the rest from readers; history keeps them."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}")
        with self.mutex:
            for thread_id in (str(t) for t in thread_ids):
                with self._lock(thread_id):
                    if strategy == "delete":
                        self._archive(thread_id)
                        continue
                    for ns, head in self._namespaces(thread_id).items():
                        state = self._entries(thread_id, ns, head)
                        ids_ = sorted(state.by_id, reverse=True)
                        kept = ids_[:max(keep, 1)]
                        if older_than is not None:
                            kept += [c for c in ids_[len(kept):]
                                     if not self._older(state.by_id[c], older_than)]
                        if kept and len(kept) < len(ids_):
                            self._tombstone(thread_id, ns, prune_message(kept))

    def _older(self, entry: Entry, age: timedelta) -> bool:
        when = self.store.commit_times(entry.commit)[1]
        return datetime.now(UTC).timestamp() - when > age.total_seconds()

    def _commit_time(self, head: str | None) -> int:
        """A thread commit's time, by main's clock model (gitstate/system/clock.py: a reading
        that stepped away from the repository's anchor is not believed) and never before
        its parent's: commit times do not go back within a thread's ref."""
        now = int(clockbase.read(self.store.git_dir).time.timestamp())
        return max(now, self.store.commit_times(head)[1]) if head is not None else now
