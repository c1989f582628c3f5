"""gitstate as a LangGraph checkpointer: ``GitCheckpointSaver(agent_dir)``.

Each (thread, namespace) has two refs of its own in the agent's state repository, never
main: ``refs/gitstate/threads/<thread>/<ns>/checkpoints`` (one commit per checkpoint) and
``.../writes`` (one commit per ``put_writes``). A checkpoint commit's tree holds
``checkpoint`` and ``metadata`` (LangGraph's own serde, typed) and
``blobs/<channel>/<version>``: every channel value of the thread by version, so a channel
that did not change is the same blob as before, stored once, and ``git show`` of a
checkpoint lists exactly the channels that changed. The message is a summary line and
trailers: ``Gitstate-Checkpoint``, ``Gitstate-Parent-Checkpoint`` (LangGraph's parent, which
differs from the git parent after a fork), ``Gitstate-Source``, ``Gitstate-Step``,
``Gitstate-Run-Id``. Pending writes live on the writes ref as
``<checkpoint>/<task>/<idx>``, so an interrupted super-step resumes with them.

Deletes keep the audit trail: ``delete_thread`` (and ``prune(strategy="delete")``) move the
thread's refs to ``refs/gitstate/archive/threads/<thread>/<time>/...`` instead of dropping
commits; ``delete_for_runs`` and ``prune(strategy="keep_latest")`` add a tombstone commit
(``Gitstate-Delete-Runs`` / ``Gitstate-Prune-Keep``) that later reads honour, so the
checkpoints they hide stay in history. ``copy_thread`` points the target's refs at the
source's commits (nothing is copied, the history is shared).

A thread has its own kernel lock (``.git/gitstate-thread-<hash>.flock``), so writers of
different threads never wait for each other, and a ref moves only by compare-and-swap, so
two writers of one thread never lose a checkpoint. The async methods run the sync ones in a
worker thread. Names (threads, namespaces, channels, versions, tasks) are percent-encoded
into ref and path components (``[A-Za-z0-9_-]`` kept), never interpreted as paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
        writes_sort_key,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as exc:  # the extra is not installed: say which one
    raise ImportError("gitstate.langgraph needs the langgraph extra: pip install "
                      f"'gitstate[langgraph]' ({exc})") from exc

from . import layout, locking, rules, secretscan
from .errors import StoreError
from .lgstore import GitStateStore as GitStateStore  # the Store, re-exported here
from .store.trees import BlobRef, Change
from .trailers import encode_json

PREFIX = "refs/gitstate/threads/"
ARCHIVE = layout.THREADS_ARCHIVE_PREFIX
_KEEP = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_EMPTY = b"empty\0"


def enc(name: str) -> str:
    """A ref or path component for any string: percent-encoded, never '.' or '..'."""
    if name == "":
        return "%"
    out = "".join(c if c in _KEEP else "".join(f"%{b:02X}" for b in c.encode())
                  for c in name)
    if len(out) > 120:  # a file-name limit, not a collision risk: the hash decides
        out = out[:60] + "+" + hashlib.sha256(name.encode()).hexdigest()[:40]
    return out


def dec(component: str) -> str:
    if component == "%":
        return ""
    from urllib.parse import unquote

    return unquote(component)


def _ids(conf: dict[str, Any]) -> tuple[str, str]:
    """A write's thread id and namespace, which become a ref name: scanned for secrets."""
    thread_id, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
    rules.check_secret(thread_id, "the thread id")
    rules.check_secret(ns, "the checkpoint namespace")
    return thread_id, ns


def _refuse_secrets(changes: dict[str, Change], message: str) -> None:
    """Nothing secret enters a checkpoint either (docs/langgraph.md, "Secrets"): a channel
    value, a pending write, a thread, namespace or task id and the commit message are
    scanned as every other text that reaches an object (secretscan), and a finding
    refuses the whole put, naming what and where, never the text. Refused, not redacted:
    a checkpoint is what the graph resumes from, and a silently altered message would
    resume another conversation."""
    for path, change in changes.items():
        rules.check_secret(path, "a checkpoint file name (channel, version or task)")
        if isinstance(change, bytes):
            found = secretscan.scan_bytes(change)
            if found is not None:
                rules.refuse_secret(f"the checkpoint file {path}", found, path)
    rules.check_secret(message, "the checkpoint's commit message (ids, step, source)")


def _typed(data: tuple[str, bytes]) -> bytes:
    return data[0].encode() + b"\0" + data[1]


def _untyped(raw: bytes) -> tuple[str, bytes]:
    kind, _, body = raw.partition(b"\0")
    return kind.decode(), body


class GitCheckpointSaver(BaseCheckpointSaver[int]):
    """A LangGraph ``BaseCheckpointSaver`` whose checkpoints are git commits (see the
    module docstring). ``agent_dir`` is a gitstate agent directory (made if absent)."""

    def __init__(self, agent_dir: str | Path, *,
                 serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        from .repo import StateRepo

        path = Path(agent_dir)
        if not (path / "state" / ".git").is_dir():
            StateRepo.init(path).close()
        self.repo = StateRepo(path, writer="runtime")
        self.store = self.repo.store
        from .engine import identity

        self.identity = identity(self.repo.config)
        self.mutex = threading.RLock()  # one store, many worker threads (the async API)

    def close(self) -> None:
        self.repo.close()

    def __enter__(self) -> GitCheckpointSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- refs and locks -----------------------------------------------------------------

    @staticmethod
    def ref_name(thread_id: str, ns: str, kind: str) -> str:
        return f"{PREFIX}{enc(thread_id)}/{enc(ns)}/{kind}"

    def _lock(self, thread_id: str) -> Any:
        digest = hashlib.sha256(thread_id.encode()).hexdigest()[:24]
        return locking.exclusive(self.store.git_dir /
                                 layout.THREAD_LOCK_FILE.format(digest=digest))

    def _namespaces(self, thread_id: str) -> dict[str, str]:
        """ns -> checkpoints head of one thread."""
        out = {}
        for name, head in self.store.refs_under(f"{PREFIX}{enc(thread_id)}/").items():
            ns_part, _, kind = name.rpartition("/")
            if kind == "checkpoints":
                out[dec(ns_part)] = head
        return out

    def _threads(self) -> list[str]:
        return sorted({dec(name.split("/", 1)[0])
                       for name in self.store.refs_under(PREFIX)})

    def _fold(self) -> None:
        """After the thread's lock is released: fold small packs, as every gitstate write
        does (each checkpoint adds one; unfolded, reads search hundreds)."""
        with contextlib.suppress(OSError, StoreError):
            self.store.consolidate()

    def _commit(self, ref: str, changes: dict[str, Change], message: str) -> str:
        _refuse_secrets(changes, message)
        when = int(datetime.now(UTC).timestamp())
        for _ in range(5):
            base = self.store.ref(ref)
            new = self.store.tree_commit(ref, base, changes, message.encode(),
                                         self.identity, when)
            if new is not None:
                return new
        raise StoreError(f"{ref} kept moving while writing", rule="store.contention")

    # -- reading --------------------------------------------------------------------------

    def visible(self, head: str) -> Iterator[tuple[str, str, dict[str, str]]]:
        """(commit, checkpoint id, trailers) of the checkpoints a reader sees, newest
        first: tombstones hide runs deleted and checkpoints pruned after them."""
        deleted: set[str] = set()
        keep: str | None = None
        pruned = False
        for info in self.store.walk(head):
            fields = parse_trailers(info.message)
            if "Delete-Runs" in fields:
                deleted |= {str(r) for r in trailer_json(fields, "Delete-Runs", info.id)}
                continue
            if "Prune-Keep" in fields:
                if not pruned:
                    pruned, keep = True, trailer_json(fields, "Prune-Keep", info.id)
                continue
            if "Checkpoint" not in fields:
                continue
            cid = str(trailer_json(fields, "Checkpoint", info.id))
            if pruned and cid != keep:
                continue
            if "Run-Id" in fields and trailer_json(fields, "Run-Id", info.id) in deleted:
                continue
            yield info.id, cid, fields

    def _tuple(self, thread_id: str, ns: str, commit: str, cid: str,
               fields: dict[str, str]) -> CheckpointTuple:
        head = self.store.tree_paths(commit, ["checkpoint", "metadata"])
        checkpoint: Checkpoint = self.serde.loads_typed(
            _untyped(self.store.blob(head["checkpoint"])))
        metadata = self.serde.loads_typed(_untyped(self.store.blob(head["metadata"])))
        paths = {f"blobs/{enc(channel)}/{enc(str(version))}": channel
                 for channel, version in checkpoint["channel_versions"].items()}
        values: dict[str, Any] = {}
        for path, sha in self.store.tree_paths(commit, list(paths)).items():
            raw = self.store.blob(sha)
            if raw != _EMPTY:
                values[paths[path]] = self.serde.loads_typed(_untyped(raw))
        parent = json.loads(fields.get("Parent-Checkpoint", "null"))
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                     "checkpoint_id": cid}},
            checkpoint={**checkpoint, "channel_values": values},
            metadata=metadata,
            parent_config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                            "checkpoint_id": parent}} if parent else None,
            pending_writes=self._writes(thread_id, ns, cid))

    def _writes(self, thread_id: str, ns: str, cid: str) -> list[tuple[str, str, Any]]:
        head = self.store.ref(self.ref_name(thread_id, ns, "writes"))
        if head is None:
            return []
        rows = []
        for sha in self.store.tree_files(head, enc(cid)).values():
            header, _, body = self.store.blob(sha).partition(b"\n")
            meta = json.loads(header)
            rows.append((writes_sort_key(meta["task_path"], meta["task_id"], meta["idx"]),
                         meta["task_id"], meta["channel"], _untyped(body)))
        rows.sort(key=lambda r: r[0])
        return [(task, channel, self.serde.loads_typed(value))
                for _, task, channel, value in rows]

    def _sources(self, head: str | None, parent: str | None) -> list[str]:
        """The commits whose trees hold the blobs a new checkpoint reuses: its parent
        checkpoint's commit (usually the head), then the head."""
        if head is None:
            return []
        found = [] if parent is None else [
            next((c for c, cid, _ in self.visible(head) if cid == parent), head)]
        return [*found, head] if head not in found else found

    def _latest(self, head: str) -> str | None:
        """The newest visible checkpoint id: recorded by each commit (``Gitstate-Latest``),
        so finding it reads one commit; a commit without it is walked."""
        fields = parse_trailers(self.store.commit_info(head).message)
        if "Latest" in fields:
            latest = trailer_json(fields, "Latest", head)
            return str(latest) if latest else None
        return max((cid for _, cid, _ in self.visible(head)), default=None)

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
            for commit, cid, fields in self.visible(head):
                if cid == wanted:
                    return self._tuple(thread_id, ns, commit, cid, fields)
            return None

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None,
             limit: int | None = None) -> Iterator[CheckpointTuple]:
        conf = (config or {}).get("configurable") or {}
        threads = [str(conf["thread_id"])] if conf.get("thread_id") is not None else \
            self._threads()
        want_ns = conf.get("checkpoint_ns")
        want_id = conf.get("checkpoint_id")
        before_id = get_checkpoint_id(before) if before else None
        with self.mutex:
            found = []
            for thread_id in threads:
                for ns, head in sorted(self._namespaces(thread_id).items()):
                    if want_ns is not None and ns != want_ns:
                        continue
                    for commit, cid, fields in self.visible(head):
                        if (want_id and cid != want_id) or (before_id and cid >= before_id):
                            continue
                        found.append((thread_id, ns, commit, cid, fields))
            found.sort(key=lambda f: f[3], reverse=True)
            count = 0
            for thread_id, ns, commit, cid, fields in found:
                if limit is not None and count >= limit:
                    return
                tup = self._tuple(thread_id, ns, commit, cid, fields)
                if filter and not all(tup.metadata.get(k) == v for k, v in filter.items()):
                    continue
                count += 1
                yield tup

    # -- writing --------------------------------------------------------------------------

    def put(self, config: RunnableConfig, checkpoint: Checkpoint,
            metadata: CheckpointMetadata, new_versions: ChannelVersions) -> RunnableConfig:
        conf = config["configurable"]
        thread_id, ns = _ids(conf)
        stored = checkpoint.copy()
        values: dict[str, Any] = stored.pop("channel_values")  # type: ignore[misc]
        meta = get_checkpoint_metadata(config, metadata)
        changes: dict[str, Change] = {
            "checkpoint": _typed(self.serde.dumps_typed(stored)),
            "metadata": _typed(self.serde.dumps_typed(meta)), "blobs": None}
        fresh = {f"blobs/{enc(ch)}/{enc(str(v))}": ch for ch, v in new_versions.items()}
        for path, channel in fresh.items():
            changes[path] = _typed(self.serde.dumps_typed(values[channel])) \
                if channel in values else _EMPTY
        kept = [f"blobs/{enc(ch)}/{enc(str(v))}"
                for ch, v in stored["channel_versions"].items()]
        kept = [path for path in kept if path not in fresh]
        parent = conf.get("checkpoint_id")
        step, source = meta.get("step"), meta.get("source")
        summary = f"checkpoint {checkpoint['id']}: step {step} ({source})".replace("\n", " ")
        lines = [summary[:200], "",
                 f"Gitstate-Checkpoint: {encode_json(checkpoint['id'])}",
                 f"Gitstate-Parent-Checkpoint: {encode_json(parent)}",
                 f"Gitstate-Source: {encode_json(source)}",
                 f"Gitstate-Step: {encode_json(step)}"]
        if meta.get("run_id") is not None:
            lines.append(f"Gitstate-Run-Id: {encode_json(str(meta['run_id']))}")
        ref = self.ref_name(thread_id, ns, "checkpoints")
        with self.mutex, self._lock(thread_id):
            head = self.store.ref(ref)
            # a commit holds the blobs its checkpoint names: new ones, and the unchanged
            # ones as the same objects, found in the parent checkpoint (or the head)
            for source_commit in self._sources(head, parent):
                for path, sha in self.store.tree_paths(source_commit, [
                        p for p in kept if p not in changes]).items():
                    changes[path] = BlobRef(sha)
            before = self._latest(head) if head else None
            latest = max(before or "", str(checkpoint["id"]))
            lines.append(f"Gitstate-Latest: {encode_json(latest)}")
            self._commit(ref, changes, "\n".join(lines) + "\n")
        self._fold()
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                 "checkpoint_id": checkpoint["id"]}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                   task_id: str, task_path: str = "") -> None:
        conf = config["configurable"]
        thread_id, ns = _ids(conf)
        cid = str(conf["checkpoint_id"])
        ref = self.ref_name(thread_id, ns, "writes")
        with self.mutex, self._lock(thread_id):
            head = self.store.ref(ref)
            have = self.store.tree_files(head, enc(cid)) if head else {}
            changes: dict[str, Change] = {}
            for i, (channel, value) in enumerate(writes):
                idx = WRITES_IDX_MAP.get(channel, i)
                path = f"{enc(task_id)}/{idx}"
                if idx >= 0 and path in have:
                    continue  # a retried task's writes are kept as first written
                header = json.dumps({"task_id": task_id, "channel": channel, "idx": idx,
                                     "task_path": task_path}, sort_keys=True)
                changes[f"{enc(cid)}/{path}"] = header.encode() + b"\n" + _typed(
                    self.serde.dumps_typed(value))
            if changes:
                self._commit(ref, changes, f"writes of task {task_id} for checkpoint "
                             f"{cid}\n\nGitstate-Writes-For: {encode_json(cid)}\n"
                             f"Gitstate-Task: {encode_json(task_id)}\n")
        self._fold()

    def _archive(self, thread_id: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        for name, head in self.store.refs_under(f"{PREFIX}{enc(thread_id)}/").items():
            self.store.move_ref(f"{ARCHIVE}{enc(thread_id)}/{stamp}/{name}", None, head)
            self.store.move_ref(f"{PREFIX}{enc(thread_id)}/{name}", head, None)

    def delete_thread(self, thread_id: str) -> None:
        with self.mutex, self._lock(str(thread_id)):
            self._archive(str(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        wanted = {str(r) for r in run_ids}
        if not wanted:
            return
        with self.mutex:
            for thread_id in self._threads():
                with self._lock(thread_id):
                    for ns, head in self._namespaces(thread_id).items():
                        seen = [(cid, "Run-Id" in f and json.loads(f["Run-Id"]) in wanted)
                                for _, cid, f in self.visible(head)]
                        if any(hit for _, hit in seen):
                            left = max((cid for cid, hit in seen if not hit), default=None)
                            self._tombstone(thread_id, ns, f"delete the checkpoints of "
                                            f"{len(wanted)} runs", "Delete-Runs",
                                            sorted(wanted), left)

    def _tombstone(self, thread_id: str, ns: str, summary: str, trailer: str,
                   value: object, latest: str | None) -> None:
        """A commit that hides checkpoints from readers and keeps them in history, with the
        newest id still visible after it."""
        self._commit(self.ref_name(thread_id, ns, "checkpoints"), {},
                     f"{summary}\n\nGitstate-{trailer}: {encode_json(value)}\n"
                     f"Gitstate-Latest: {encode_json(latest)}\n")

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        src, dst = str(source_thread_id), str(target_thread_id)
        with self.mutex, self._lock(dst):
            self._archive(dst)
            for name, head in self.store.refs_under(f"{PREFIX}{enc(src)}/").items():
                self.store.move_ref(f"{PREFIX}{enc(dst)}/{name}", None, head)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}")
        with self.mutex:
            for thread_id in (str(t) for t in thread_ids):
                with self._lock(thread_id):
                    if strategy == "delete":
                        self._archive(thread_id)
                        continue
                    for ns, head in self._namespaces(thread_id).items():
                        latest = max((cid for _, cid, _ in self.visible(head)), default=None)
                        if latest is not None:
                            self._tombstone(thread_id, ns, f"prune: keep only {latest}",
                                            "Prune-Keep", latest, latest)

    # -- async: the same, in a worker thread --------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *,
                    filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None,
                    limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        items = await asyncio.to_thread(lambda: [*self.list(
            config, filter=filter, before=before, limit=limit)])
        for item in items:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint,
                   metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *,
                     strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


def trailer_json(fields: dict[str, str], name: str, commit: str) -> Any:
    """A trailer's JSON value; a commit gitstate did not write this way is named, never a
    traceback."""
    try:
        return json.loads(fields[name])
    except (ValueError, RecursionError) as exc:
        raise StoreError(f"{commit[:12]} on a checkpoint thread has a malformed "
                         f"Gitstate-{name} trailer ({exc})", rule="thread.damaged") from None


def parse_trailers(message: bytes) -> dict[str, str]:
    out = {}
    for line in message.decode("utf-8", "replace").splitlines():
        name, sep, value = line.partition(": ")
        if sep and name.startswith("Gitstate-"):
            out[name[9:]] = value
    return out
