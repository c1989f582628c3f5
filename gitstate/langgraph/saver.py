"""gitstate as a LangGraph checkpointer: ``GitCheckpointSaver(agent_dir)``.

Each (thread, namespace) has one ref of its own in the agent's state repository, never
main: ``refs/gitstate/threads/<thread>/<ns>/checkpoints``, one commit per checkpoint. Its
tree is flat (gitstate/threads/format.py): ``checkpoint``, ``metadata``, ``channel.<channel>``
per channel (an unchanged channel is the same blob as before, and ``git show`` of a
checkpoint lists the channels that changed) and ``pending-writes``: the pending writes
made since the ref's previous commit. ``put_writes`` makes no commit: its writes are
appended to the write-ahead log and flushed (gitstate/threads/wal.py), and the next checkpoint
commit of the namespace carries them, so a super-step is one commit. The
message is a summary line and trailers: ``Gitstate-Checkpoint``,
``Gitstate-Parent-Checkpoint`` (LangGraph's parent, which differs from the git parent after
a fork), ``Gitstate-Source``, ``Gitstate-Step``, ``Gitstate-Run-Id``, ``Gitstate-Latest``,
``Gitstate-Writes-For`` (the checkpoints whose pending writes it carries) and
``Gitstate-Layout: 2``. Threads written by the earlier layout (``blobs/<channel>/<version>``
trees and a ``writes`` ref) are read as they are and continue in this one.

Commits go through the store's commit path (the packfmt serializer, the ref's lock taken
and compared first); a put is durable by one flush of its record in the write-ahead log,
its git files written unflushed, checkpointed and replayed by the log (gitstate/threads/wal.py).
The checkpoint index beside the refs (gitstate/langgraph/index.py) finds a checkpoint's commit and
answers ``list`` without walking history. After each put, outside the lock, due log
shards are checkpointed, small packs are folded and, past a threshold, background
maintenance is started (gitstate/write/maintenance.py), as main's writes do.

Deletes keep the audit trail (gitstate/langgraph/retention.py): ``delete_thread`` (and
``prune(strategy="delete")``) move the thread's refs to
``refs/gitstate/archive/threads/<thread>/<time>/...`` instead of dropping commits;
``delete_for_runs`` and ``prune(strategy="keep_latest")`` add a tombstone commit
(``Gitstate-Delete-Runs`` / ``Gitstate-Prune-Keep``) that later reads honour, so the
checkpoints they hide stay in history. ``copy_thread`` points the target's refs at the
source's commits (nothing is copied, the history is shared).

A thread has its own kernel lock (``.git/gitstate-thread-<hash>.flock``), so writers of
different threads wait for each other only for a log shard's flush, and a ref moves only
by compare-and-swap, so two writers of one thread never lose a checkpoint. The async
methods run the sync ones in a worker thread (gitstate/langgraph/asyncapi.py).
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import json
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as exc:  # the extra is not installed: say which one
    raise ImportError("gitstate.langgraph needs the langgraph extra: pip install "
                      f"'gitstate[langgraph]' ({exc})") from exc

from ..core import layout, rules
from ..core.errors import StoreError
from ..store.durability import Deferred
from ..threads import journal as lgjournal
from ..threads.format import (
    ARCHIVE,
    CHANNEL,
    EMPTY,
    LAYOUT,
    PREFIX,
    WRITES_FILE,
    channel_file,
    checkpoint_head,
    checkpoint_message,
    dec,
    enc,
    ids,
    json_or_none,
    parse_trailers,
    refuse_secrets,
    trailer_json,
    typed,
    writes_message,
)
from ..threads.journal import Write
from ..threads.wal import WriteAheadLog
from ..write import maintenance
from .asyncapi import InWorkerThread
from .fence import ThreadFence
from .index import CheckpointIndex, Entry
from .retention import ThreadRetention
from .store import GitStateStore as GitStateStore  # the Store, re-exported here

__all__ = ["ARCHIVE", "PREFIX", "GitCheckpointSaver", "GitStateStore", "dec", "enc",
           "parse_trailers", "trailer_json"]
GC_EVERY_BYTES = 1 << 20  # packs written since the last repack that start maintenance
DEFERRED = Deferred()  # a put's git files: the log's record made it durable (threads/wal)


def _small(metadata: Any) -> Any:
    """The metadata kept in the index (for list's filters): plain and short, else None."""
    return metadata if len(json.dumps(metadata)) <= 256 else None


class GitCheckpointSaver(ThreadRetention, InWorkerThread):
    """A LangGraph ``BaseCheckpointSaver`` whose checkpoints are git commits (see the
    module docstring). ``agent_dir`` is a gitstate agent directory (made if absent)."""

    def __init__(self, agent_dir: str | Path, *,
                 serde: SerializerProtocol | None = None, owner: str | None = None) -> None:
        super().__init__(serde=serde)
        from ..api.repo import StateRepo

        path = Path(agent_dir)
        if not (path / "state" / ".git").is_dir():
            StateRepo.init(path).close()
        self.repo = StateRepo(path, writer="runtime")
        self.store = self.repo.store
        from ..write.engine import identity

        self.identity = identity(self.repo.config)
        self.mutex = threading.RLock()  # one store, many worker threads (the async API)
        self.index = CheckpointIndex(self.store.git_dir / layout.THREAD_INDEX_FILE)
        self._latest_at: dict[str, str | None] = {}  # commit -> its Gitstate-Latest
        self._blobs: OrderedDict[str, bytes] = OrderedDict()
        self._blob_bytes = 0
        self.fence = ThreadFence(self._lock_path, owner)  # one writer per thread (fence.py)
        self.wal = WriteAheadLog(self.store)  # what makes a put durable (threads/wal)
        with self.mutex:
            self.wal.replay_all()  # what a crash left in the log only, back in git first
        self._wake = threading.Event()
        self._closing = False
        self._worker: threading.Thread | None = None

    def close(self) -> None:
        self._closing = True
        self._wake.set()
        if self._worker is not None:
            self._worker.join(timeout=60)
        with self.mutex:
            for shard in list(self.wal.shards.values()):
                self.wal.checkpoint(shard)
            self.wal.close()
        self.repo.close()

    def __enter__(self) -> GitCheckpointSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _lock_path(self, thread_id: str) -> Path:
        return self.store.git_dir / layout.THREAD_LOCK_FILE.format(
            digest=self._digest(thread_id))

    def claim(self, thread_id: str) -> int:
        """Become the thread's one writer now (docs/langgraph.md, "One writer per
        thread"): a saver that wrote it before is refused from its next write on
        (``thread.superseded``). A saver's first write to a thread claims it too."""
        return self.fence.claim(str(thread_id))

    # -- reading --------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = config["configurable"]
        thread_id, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
        wanted = get_checkpoint_id(config)
        with self.mutex:
            head = self.store.ref(self.ref_name(thread_id, ns, "checkpoints"))
            if head is None:
                return None
            # no id: the newest id, as LangGraph's own savers answer
            wanted = wanted if wanted is not None else self._latest(head)
            state = self._entries(thread_id, ns, head)
            entry = state.by_id.get(wanted) if wanted is not None else None
            return self._tuple(state, entry) if entry is not None else None

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None,
             limit: int | None = None) -> Iterator[CheckpointTuple]:
        conf = (config or {}).get("configurable") or {}
        want_ns = conf.get("checkpoint_ns")
        want_id = conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        plain = {k: json_or_none(v) for k, v in (filter or {}).items()}
        with self.mutex:
            if conf.get("thread_id") is not None:
                thread = str(conf["thread_id"])
                heads = {(thread, ns): h for ns, h in self._namespaces(thread).items()}
            else:
                heads = self._all_refs()
            found = []
            for (thread_id, ns), head in heads.items():
                if want_ns is not None and ns != want_ns:
                    continue
                state = self._entries(thread_id, ns, head)
                for cid, entry in state.by_id.items():
                    if (want_id and cid != want_id) or (before_id and cid >= before_id):
                        continue
                    if plain and entry.metadata is not None and any(
                            p is not None and entry.metadata.get(k) != p
                            for k, p in plain.items()):
                        continue  # the index's copy of the metadata already says no
                    found.append((cid, state, entry))
            if limit is not None and not filter:  # the newest `limit` only
                found = heapq.nlargest(limit, found, key=lambda f: f[0])
            else:
                found.sort(key=lambda f: f[0], reverse=True)
            count = 0
            journals: dict[str, list[Write]] = {}  # each thread's, read once per list
            for _cid, state, entry in found:
                if limit is not None and count >= limit:
                    return
                if state.thread not in journals:
                    journals[state.thread] = self._pending(state.thread)
                tup = self._tuple(state, entry, journals[state.thread])
                if filter and not all(tup.metadata.get(k) == v for k, v in filter.items()):
                    continue
                count += 1
                yield tup

    # -- writing --------------------------------------------------------------------------

    def put(self, config: RunnableConfig, checkpoint: Checkpoint,
            metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        conf = config["configurable"]
        thread_id, ns = ids(conf)
        stored = checkpoint.copy()
        values: dict[str, Any] = stored.pop("channel_values")  # type: ignore[misc]
        meta = get_checkpoint_metadata(config, metadata)
        cid = str(checkpoint["id"])
        files: dict[str, bytes] = {
            "checkpoint": typed(self.serde.dumps_typed(stored)),
            "metadata": typed(self.serde.dumps_typed(meta))}
        for channel in new_versions:
            files[channel_file(channel)] = typed(self.serde.dumps_typed(values[channel])) \
                if channel in values else EMPTY
        parent = conf.get("checkpoint_id")
        step, source = meta.get("step"), meta.get("source")
        run_id = None if meta.get("run_id") is None else str(meta["run_id"])
        lines = checkpoint_head(cid, parent, source, step, run_id)
        refuse_secrets(files, "\n".join(lines))
        wanted = {channel_file(ch) for ch in stored["channel_versions"]}
        ref = self.ref_name(thread_id, ns, "checkpoints")
        shard = self.wal.shard(self._digest(thread_id))
        with self.mutex, self.fence.writing(thread_id), shard.locked():
            journal = self._journal(thread_id)  # the earlier, per-thread journal
            old = [w for w in journal.read() if w.ns == ns]
            raw = old + [w for w in shard.pending_of(thread_id) if w.ns == ns]
            folded = lgjournal.merge(raw)
            head = self.store.ref(ref)
            if self.wal.recover(shard, ref, head):  # a dead writer's commit, put back
                head = self.store.ref(ref)
            for attempt in range(5):
                if attempt:  # the ref moved under the commit's compare: read it again
                    head = self.store.ref(ref)
                if head is None:
                    self._new_thread(thread_id)
                changes: dict[str, bytes | None] = dict(files)
                base = self.store.file_ids(head) if head else {}
                if head is not None:
                    state = self._entries(thread_id, ns, head)
                    self._carry(state, parent, wanted, files, base, changes)
                for name in base:
                    if name not in wanted and name not in changes and (
                            name.startswith(CHANNEL) or name in ("blobs", WRITES_FILE)):
                        changes[name] = None
                writes_for = sorted({w.checkpoint for w in folded})
                if folded:
                    changes[WRITES_FILE] = lgjournal.encode(folded)
                before = self._latest(head) if head is not None else None
                latest = max(before or "", cid)
                new = self.store.commit(head, changes,
                                        checkpoint_message(lines, latest, writes_for),
                                        self.identity, self._commit_time(head), ref=ref,
                                        flush=DEFERRED, log=functools.partial(
                                            shard.log_commit, thread_id, ns, ref, head,
                                            fold=bool(raw)))
                if new is not None:
                    break
            else:
                raise StoreError(f"{ref} kept moving while writing", rule="store.contention")
            self._latest_at[new] = latest
            self._keep_blobs(new, files)
            if old:
                journal.clear(ns)
            self.index.added(ref, thread_id, ns, head, new, [Entry(
                cid, new, parent, run_id, _small(json_or_none(meta)), tuple(writes_for), LAYOUT)])
        self._maintain()
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                 "checkpoint_id": checkpoint["id"]}}

    def _maintain(self) -> None:
        """After the lock is released: wake the saver's maintenance thread, which folds
        small packs (as every gitstate write does) and starts background maintenance
        (``gitstate gc --auto``, detached) once the packs written since the last repack
        pass ``GC_EVERY_BYTES``: git's repack stores each channel's versions as deltas,
        so the thread's disk stays linear in its steps without anyone typing a command.
        Neither runs in the put: a put never waits for either."""
        self._wake.set()
        if self._worker is None:
            self._worker = threading.Thread(target=self._maintenance, daemon=True,
                                            name="gitstate-checkpointer-maintenance")
            self._worker.start()

    def _maintenance(self) -> None:
        rounds = 0
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._closing:
                return
            with contextlib.suppress(Exception):  # never the put's failure
                for shard in [s for s in list(self.wal.shards.values()) if s.due()]:
                    self.wal.checkpoint(shard, self.mutex)  # fsyncs without the mutex
                self.store.consolidate()
                rounds += 1
                if rounds % 8 == 0:
                    maintenance.maybe_repack(self.store, self.repo.agent_dir,
                                             self.repo.config, GC_EVERY_BYTES)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        conf = config["configurable"]
        thread_id, ns = ids(conf)
        cid = str(conf["checkpoint_id"])
        rules.check_secret(task_id, "a checkpoint file name (channel, version or task)")
        records = []
        for i, (channel, value) in enumerate(writes):
            kind, body = self.serde.dumps_typed(value)
            records.append(Write(cid, ns, task_id, task_path, channel,
                                 WRITES_IDX_MAP.get(channel, i), kind, body))
        refuse_secrets({f"pending write {w.task_id}/{w.idx} ({w.channel})": w.value
                        for w in records}, f"{task_path} {cid}")
        if records:
            shard = self.wal.shard(self._digest(thread_id))
            with self.mutex, self.fence.writing(thread_id), shard.locked():
                shard.log_writes(thread_id, records)

    def commit_pending_writes(self, thread_id: str) -> Sequence[str]:
        """Commit the thread's pending writes not yet in a commit (those of an interrupted
        super-step), each namespace's on its ref, so that git alone (a push, a clone, an
        auditor) has them; returns the new commits. A put does this by itself."""
        out = []
        with self.mutex, self.fence.locked(str(thread_id)):  # writes already made durable
            shard = self._settle(str(thread_id))
            journal = self._journal(str(thread_id))
            pending = self._pending(str(thread_id))
            for ns in sorted({w.ns for w in pending}):
                ref = self.ref_name(str(thread_id), ns, "checkpoints")
                raw = [w for w in pending if w.ns == ns]
                folded = lgjournal.merge(raw)
                head = self.store.ref(ref)
                if head is None:
                    continue
                writes_for = sorted({w.checkpoint for w in folded})
                message = writes_message(writes_for, self._latest(head))
                new = self.store.commit(head, {WRITES_FILE: lgjournal.encode(folded)},
                                        message, self.identity,
                                        self._commit_time(head), ref=ref)
                if new is None:
                    raise StoreError(f"{ref} moved while writing", rule="store.contention")
                journal.clear(ns)
                with shard.locked():
                    shard.log_fold(str(thread_id), ns)
                self.index.added(ref, str(thread_id), ns, head, new,
                                 [Entry(None, new, writes_for=tuple(writes_for))])
                out.append(new)
        return out

    def push(self, thread_ids: Sequence[str] | bool = True) -> dict[str, Any]:
        """Carry threads (ids, or True: all) to main's remote, their pending writes committed
        first so that an interrupted super-step resumes elsewhere (docs/langgraph.md,
        "Threads travel"); what moved, as ``repo.remote.push_threads`` reports it."""
        for thread_id in self._threads() if thread_ids is True else list(thread_ids or ()):
            self.commit_pending_writes(thread_id)
        return self.repo.remote.push_threads(thread_ids)
