"""Reading LangGraph checkpoint threads: refs, the checkpoint index, checkpoints and their
pending writes, in the layout of gitstate/threads/format.py and the earlier one (a mixin of
GitCheckpointSaver, gitstate/langgraph/saver.py).

Values are decoded with the caller's serde only from a ref whose every commit passed the
rule of foreign commits (gitstate/threads/check.py): the saver's own commits, and heads a
reader checked. A head the index does not know (moved by plain git: a ``git fetch`` into
``refs/gitstate/threads/``, ``update-ref``; or a writer killed before its index line) is
checked from the newest head known to pass, before any of its values is decoded; one that
fails, or a thread of the earlier layout (which the rule refuses), is read with LangGraph's
strict serde (:func:`strict_serde`: nothing off its plain-data allow-list is constructed,
pickle is refused) from then on. The index records which heads passed (``checked``)."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.base import Checkpoint, CheckpointTuple, writes_sort_key
from langgraph.checkpoint.serde.base import SerializerProtocol

from ..core import layout
from ..core.errors import GitStateError
from ..threads import journal as lgjournal
from ..threads.format import (
    CHANNEL,
    EMPTY,
    PREFIX,
    WRITES_FILE,
    channel_file,
    check_ids,
    check_new_thread,
    commit_kind,
    dec,
    digest,
    enc,
    parse_trailers,
    trailer_json,
    untyped,
)
from ..threads.journal import Journal, Write
from ..threads.wal import WriteAheadLog
from .index import CheckpointIndex, Entry, RefEntries

if TYPE_CHECKING:
    from ..store import GitStore

BLOB_CACHE_BYTES = 64 << 20
_STRICT: list[SerializerProtocol] = []


def strict_serde() -> SerializerProtocol:
    """LangGraph's strict serde: a msgpack value naming a type off its plain-data allow-list
    is read as its arguments, never constructed; pickle is refused."""
    if not _STRICT:
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        _STRICT.append(JsonPlusSerializer(allowed_msgpack_modules=None))
    return _STRICT[0]


class ThreadReads:
    """What reading a thread needs: the store, LangGraph's serde, the checkpoint index."""

    store: GitStore
    serde: SerializerProtocol
    index: CheckpointIndex
    wal: WriteAheadLog
    _latest_at: dict[str, str | None]  # commit -> its Gitstate-Latest
    _blobs: OrderedDict[str, bytes]  # blob id -> bytes: what this saver wrote last
    _blob_bytes: int

    def _blob(self, sha: str) -> bytes:
        data = self._blobs.get(sha)
        return data if data is not None else self.store.blob(sha)

    def _keep_blobs(self, commit: str, files: dict[str, bytes]) -> None:
        """Keep the blobs a put just wrote (the next ``get_tuple`` of the thread reads
        them), within ``BLOB_CACHE_BYTES``, the oldest dropped first."""
        ids = self.store.file_ids(commit)
        for name, data in files.items():
            sha = ids.get(name)
            if sha is None or sha in self._blobs or len(data) > BLOB_CACHE_BYTES // 8:
                continue
            self._blobs[sha] = data
            self._blob_bytes += len(data)
        while self._blob_bytes > BLOB_CACHE_BYTES and self._blobs:
            self._blob_bytes -= len(self._blobs.popitem(last=False)[1])

    # -- refs, locks, journals, the index -------------------------------------------------

    @staticmethod
    def ref_name(thread_id: str, ns: str, kind: str) -> str:
        return f"{PREFIX}{enc(thread_id)}/{enc(ns)}/{kind}"

    @staticmethod
    def _digest(thread_id: str) -> str:
        return digest(thread_id)

    def _journal(self, thread_id: str) -> Journal:
        return Journal(self.store.git_dir / layout.THREAD_JOURNAL_FILE.format(
            digest=self._digest(thread_id)))

    def _pending(self, thread_id: str) -> list[Write]:
        """The thread's pending writes: the earlier per-thread journal's, then the log's."""
        return self._journal(thread_id).read() + self.wal.shard(
            self._digest(thread_id)).pending_of(thread_id)

    def _namespaces(self, thread_id: str) -> dict[str, str]:
        """ns -> checkpoints head of one thread."""
        out = {}
        for name, head in self.store.refs_under(f"{PREFIX}{enc(thread_id)}/").items():
            ns_part, _, kind = name.rpartition("/")
            if kind == "checkpoints":
                out[dec(ns_part)] = head
        return out

    def _all_refs(self) -> dict[tuple[str, str], str]:
        """(thread, ns) -> checkpoints head, of every thread."""
        out = {}
        for name, head in self.store.refs_under(PREFIX).items():
            parts = name.split("/")
            if len(parts) == 3 and parts[2] == "checkpoints":
                out[(dec(parts[0]), dec(parts[1]))] = head
        return out

    def _threads(self) -> list[str]:
        return sorted({thread for thread, _ in self._all_refs()})

    def _new_thread(self, thread_id: str) -> None:
        """A thread's first ref (a put, a copy onto it): its id passes the id checks and
        must not look like another thread's (threads/format.py)."""
        check_ids(thread_id, "")
        if not self._namespaces(thread_id):
            check_new_thread(thread_id, self._threads())

    def _entries(self, thread_id: str, ns: str, head: str) -> RefEntries:
        """The index's entries of a ref at ``head``, read from git again when the index
        does not know that head."""
        ref = self.ref_name(thread_id, ns, "checkpoints")
        known = self.index.refs.get(ref)
        if known is None or known.head != head:
            self.index.refresh()
            known = self.index.refs.get(ref)
        if known is not None and known.head == head:
            return known
        entries = self._scan(head)
        checked = self._check(ref, known.checked if known is not None else None, head)
        self.index.reset(ref, thread_id, ns, head, entries, checked)
        fresh = RefEntries(thread_id, ns, head, checked=checked)
        fresh.add(entries)
        return self.index.refs.get(ref) or fresh

    def _check(self, ref: str, base: str | None, head: str) -> str | None:
        """``head`` when the ref's commits after ``base`` (the newest head known to pass;
        from the root when it is None or no longer an ancestor) pass the rule of foreign
        commits, else None: its values are then read with the strict serde."""
        from ..threads.check import check_thread

        try:
            problems = check_thread(self.store, ref, base, head)
            if problems and base is not None:
                problems = check_thread(self.store, ref, None, head)
        except GitStateError:
            return None
        return None if problems else head

    def _serde(self, state: RefEntries) -> SerializerProtocol:
        """The caller's serde for a ref that passed the rule, else the strict one."""
        return self.serde if state.trusted else strict_serde()

    def _scan(self, head: str) -> list[Entry]:
        """A ref's entries from its history, oldest first: the checkpoints a reader sees
        (tombstones hide deleted runs and pruned checkpoints), and every commit that carries
        pending writes."""
        out = []
        deleted: set[str] = set()
        keep: set[str] | None = None
        for info in self.store.walk(head):
            fields = parse_trailers(info.message)
            writes_for = tuple(str(c) for c in trailer_json(fields, "Writes-For", info.id)) \
                if "Writes-For" in fields and "Layout" in fields else ()
            kind = commit_kind(fields)  # as the rule of foreign commits decides it
            if kind == "delete-runs":
                deleted |= {str(r) for r in trailer_json(fields, "Delete-Runs", info.id)}
            elif kind == "prune" and keep is None:  # the newest prune decides
                kept = trailer_json(fields, "Prune-Keep", info.id)
                keep = {str(k) for k in (kept if isinstance(kept, list) else [kept])}
            cid = str(trailer_json(fields, "Checkpoint", info.id)) \
                if "Checkpoint" in fields else None
            run = trailer_json(fields, "Run-Id", info.id) if "Run-Id" in fields else None
            if cid is not None and ((keep is not None and cid not in keep) or
                                    (run is not None and str(run) in deleted)):
                cid = None
            if cid is None and not writes_for:
                continue
            parent = json.loads(fields.get("Parent-Checkpoint", "null")) if cid else None
            out.append(Entry(cid, info.id, parent, None if run is None else str(run), None,
                             writes_for, 2 if "Layout" in fields else 1))
        out.reverse()
        return out

    def visible(self, head: str) -> Iterator[tuple[str, str, dict[str, str]]]:
        """(commit, checkpoint id, trailers) of the checkpoints a reader sees, newest
        first."""
        for entry in reversed(self._scan(head)):
            if entry.checkpoint is not None:
                yield entry.commit, entry.checkpoint, parse_trailers(
                    self.store.commit_info(entry.commit).message)

    def changed_channels(self, commit: str) -> list[str]:
        """The channels whose value ``commit`` changed (from its git parent)."""
        parents = self.store.parents(commit)
        mine = self.store.file_ids(commit)
        if "blobs" in mine:  # the earlier layout: a blob per version
            now = self.store.tree_files(commit, "blobs")
            old = self.store.tree_files(parents[0], "blobs") if parents else {}
            return sorted({dec(p.split("/")[0]) for p in now if p not in old})
        before = self.store.file_ids(parents[0]) if parents else {}
        return sorted(dec(name[len(CHANNEL):]) for name, sha in mine.items()
                      if name.startswith(CHANNEL) and before.get(name) != sha)

    def _carry(self, state: RefEntries, parent: str | None, wanted: set[str],
               files: dict[str, bytes], base: dict[str, str],
               changes: dict[str, bytes | None]) -> None:
        """The unchanged channels a new checkpoint keeps are its parent checkpoint's: the
        head's tree holds them unless the parent is another checkpoint (a fork), whose
        values are then carried over from its commit."""
        entry = state.by_id.get(parent) if parent is not None else None
        if entry is None or (entry.commit == state.head and "blobs" not in base):
            return  # (a head in the earlier layout is carried over: its first new commit)
        if entry.layout >= 2:
            source = self.store.file_ids(entry.commit)
        else:
            checkpoint = self._serde(state).loads_typed(untyped(self.store.blob(
                self.store.file_ids(entry.commit)["checkpoint"])))
            old = {f"blobs/{enc(ch)}/{enc(str(v))}": channel_file(ch)
                   for ch, v in checkpoint["channel_versions"].items()}
            source = {old[p]: sha for p, sha in self.store.tree_paths(
                entry.commit, list(old)).items()}
        for name in wanted:
            if name not in files and name in source and base.get(name) != source[name]:
                changes[name] = self.store.blob(source[name])

    def _latest(self, head: str) -> str | None:
        """The newest visible checkpoint id: recorded by each commit (``Gitstate-Latest``),
        so finding it reads one commit (none, for a commit this saver made)."""
        if head in self._latest_at:
            return self._latest_at[head]
        fields = parse_trailers(self.store.commit_info(head).message)
        if "Latest" in fields:
            latest = trailer_json(fields, "Latest", head)
            found = str(latest) if latest else None
        else:
            found = max((cid for _, cid, _ in self.visible(head)), default=None)
        if len(self._latest_at) > 4096:
            self._latest_at.clear()
        self._latest_at[head] = found
        return found

    def _tuple(self, state: RefEntries, entry: Entry,
               journal: list[Write] | None = None) -> CheckpointTuple:
        assert entry.checkpoint is not None
        serde = self._serde(state)
        files = self.store.file_ids(entry.commit)
        checkpoint: Checkpoint = serde.loads_typed(untyped(self._blob(files["checkpoint"])))
        metadata = serde.loads_typed(untyped(self._blob(files["metadata"])))
        if entry.layout >= 2:
            paths = {channel_file(ch): ch for ch in checkpoint["channel_versions"]}
            found = {p: files[p] for p in paths if p in files}
        else:
            paths = {f"blobs/{enc(ch)}/{enc(str(v))}": ch
                     for ch, v in checkpoint["channel_versions"].items()}
            found = self.store.tree_paths(entry.commit, list(paths))
        values: dict[str, Any] = {}
        for path, sha in found.items():
            raw = self._blob(sha)
            if raw != EMPTY:
                values[paths[path]] = serde.loads_typed(untyped(raw))
        thread_id, ns = state.thread, state.ns
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                     "checkpoint_id": entry.checkpoint}},
            checkpoint={**checkpoint, "channel_values": values},
            metadata=metadata,
            parent_config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                            "checkpoint_id": entry.parent}}
            if entry.parent else None,
            pending_writes=self._writes(state, entry.checkpoint, entry.layout, journal))

    def _writes(self, state: RefEntries, cid: str, layout_: int,
                journal: list[Write] | None = None) -> list[tuple[str, str, Any]]:
        """A checkpoint's pending writes: from the commits carrying them, the journal
        (``journal``: as read already) and, for the earlier layout, its writes ref."""
        found: list[Write] = []
        for commit in state.writes.get(cid, []):
            sha = self.store.file_ids(commit).get(WRITES_FILE)
            if sha is not None:
                found += lgjournal.decode(self._blob(sha))
        found += journal if journal is not None else self._pending(state.thread)
        if layout_ < 2:
            found += self._writes_v1(state.thread, state.ns, cid)
        rows = sorted((writes_sort_key(w.task_path, w.task_id, w.idx), w)
                      for w in lgjournal.merge([w for w in found
                                                if w.checkpoint == cid and w.ns == state.ns]))
        serde = self._serde(state)
        return [(w.task_id, w.channel, serde.loads_typed((w.kind, w.value))) for _, w in rows]

    def _writes_v1(self, thread_id: str, ns: str, cid: str) -> list[Write]:
        """Pending writes of a thread written by the earlier layout (a ``writes`` ref)."""
        head = self.store.ref(self.ref_name(thread_id, ns, "writes"))
        out: list[Write] = []
        for sha in (self.store.tree_files(head, enc(cid)).values() if head else ()):
            header, _, body = self.store.blob(sha).partition(b"\n")
            meta = json.loads(header)
            kind, value = untyped(body)
            out.append(Write(cid, ns, meta["task_id"], meta["task_path"], meta["channel"],
                             int(meta["idx"]), kind, value))
        return out
