"""The one rule of foreign commits for LangGraph thread refs (docs/security.md, docs/
langgraph.md "Threads travel"): a thread commit from elsewhere is taken only when it is the
commit the saver itself makes at its parent, for what the commit records.

Shared with every namespace (gitstate/accept/main.py): the history is one line descending from
what is already here (``linear_chain``), commit times never go back and never run ahead of
this clock (``time_problem``), a tree holds only known names as regular, bounded blobs whose
sizes are read from headers before anything is inflated, every new file and the message
pass the secret scan the writer applies (``format.refuse_secrets``, the saver's own), and
the message is re-derived byte for byte by the saver's own builders (gitstate/threads/format.py).
Specific to threads — a checkpoint's structure, never LangGraph's serde, which the checker
neither needs nor runs:

* a checkpoint commit: ``checkpoint`` and ``metadata``, ``channel.<name>`` files (names as
  the saver encodes them), every new file typed as the saver writes it (``<kind>\\0...``,
  no pickle, no ``msgpack`` extension that would construct more than plain data:
  gitstate/threads/value.py), ``pending-writes`` exactly when ``Gitstate-Writes-For``
  names checkpoints;
  its id new on the ref, its parent checkpoint one the ref already had;
  ``Gitstate-Latest`` the newest id so far;
* a pending-writes commit: the parent's tree but for ``pending-writes``;
* a tombstone (``Delete-Runs``, ``Prune-Keep``): the parent's tree, hiding only checkpoints
  the ref shows, ``Latest`` as the saver computes it;
* pending writes: well-formed records (journal.py) in canonical form, of this namespace,
  for exactly the checkpoints ``Gitstate-Writes-For`` names (any ids: with LangGraph's
  async durability a task's writes can reach the journal before the put of the checkpoint
  they belong to, so a commit may carry writes of a checkpoint a later commit adds).

Nothing here writes; :func:`check_thread` returns the problems (empty: it may land).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..accept.main import Problem, linear_chain
from ..core import layout, rules
from ..core.errors import GitStateError, InvalidInput, StoreError
from ..core.rules import time_problem
from . import journal as lgjournal
from .format import (
    CHANNEL,
    EMPTY,
    LAYOUT,
    LINE_BREAKS,
    PREFIX,
    WRITES_FILE,
    check_ids,
    checkpoint_head,
    checkpoint_message,
    commit_kind,
    dec,
    delete_runs_message,
    enc,
    parse_trailers,
    prune_message,
    refuse_secrets,
    writes_message,
)
from .value import UnsafeValue, check_typed

if TYPE_CHECKING:
    from ..store import GitStore

FILE_MAX = 64 << 20  # one checkpoint file (a channel's value, serialized)
COMMIT_MAX = 2 * FILE_MAX  # all the files of one commit, counted by name (as read)
ID_MAX = 200
_KIND = re.compile(rb"[a-z][a-z0-9_+.-]{0,31}")


class _Refusal(Exception):
    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule, self.message = rule, message


def parse_ref(ref: str) -> tuple[str, str] | None:
    """(thread id, namespace) of a thread's checkpoints ref, or None when the name is not
    one the saver writes (the layout's pattern, names encoded as it encodes them)."""
    if layout.ref_name_problem(ref, "threads") is not None:
        return None
    thread, ns, kind = ref[len(PREFIX):].split("/")
    if kind != "checkpoints" or enc(dec(thread)) != thread or enc(dec(ns)) != ns:
        return None
    return dec(thread), dec(ns)


@dataclass
class ThreadState:
    """What the ref holds at a commit, as re-derivation needs it."""

    seen: set[str] = field(default_factory=set)  # every checkpoint id on the ref
    visible: dict[str, str | None] = field(default_factory=dict)  # shown id -> its run
    latest: str | None = None  # the commit's Gitstate-Latest
    tree: dict[str, str] | None = None  # the commit's files (None: no commit yet)
    time: int | None = None

    def apply(self, fields: dict[str, Any]) -> None:
        kind = commit_kind(fields)
        if kind == "checkpoint":
            cid = str(fields["Checkpoint"])
            self.seen.add(cid)
            run = fields.get("Run-Id")
            self.visible[cid] = None if run is None else str(run)
        elif kind == "delete-runs":
            runs = {str(r) for r in fields["Delete-Runs"]}
            self.visible = {c: r for c, r in self.visible.items() if r not in runs}
        elif kind == "prune":
            kept = {str(k) for k in fields["Prune-Keep"]}
            self.visible = {c: r for c, r in self.visible.items() if c in kept}
        latest = fields.get("Latest")
        self.latest = None if latest is None else str(latest)


def _fields(message: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, text in parse_trailers(message).items():
        try:
            out[name] = json.loads(text)
        except (ValueError, RecursionError):
            raise _Refusal("thread.rederive", f"Gitstate-{name[:40]} is not JSON") from None
    return out


def state_at(store: GitStore, commit: str | None) -> ThreadState:
    """The state of a ref already accepted here, from its trailers alone."""
    state = ThreadState()
    if commit is None:
        return state
    for info in reversed(list(store.walk(commit))):
        try:
            state.apply(_fields(info.message))
        except (_Refusal, TypeError):
            continue  # an older layout's commit: it carries no id this rule relies on
    state.tree = store.file_ids(commit)
    state.time = store.commit_times(commit)[1]
    return state


def check_thread(store: GitStore, ref: str, old: str | None, new: str,
                 now: float | None = None) -> list[Problem]:
    """Problems with the commits of a thread's ref after ``old`` (None: from the root) up
    to ``new``; the first refused commit ends the check (later ones build on it)."""
    where = parse_ref(ref)
    if where is None:
        return [Problem(new, "remote.ref_name", f"{ref[:200]!r} is not a thread ref the "
                        "saver writes (refs/gitstate/threads/<thread>/<ns>/checkpoints)")]
    try:
        check_ids(*where)
    except InvalidInput as exc:
        return [Problem(new, exc.rule, f"the ref's thread id or namespace: {exc.message}")]
    chain, refused = linear_chain(store, old, new)
    if refused is not None:
        return [refused]
    now = time.time() if now is None else now
    try:
        state = state_at(store, old)
    except GitStateError as exc:
        return [Problem(old or new, exc.rule, exc.message)]
    for commit in chain:
        try:
            _check_commit(store, commit, where[1], state, now)
        except _Refusal as exc:
            return [Problem(commit, exc.rule, exc.message)]
        except (GitStateError, InvalidInput) as exc:
            return [Problem(commit, exc.rule, exc.message)]
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            return [Problem(commit, "thread.rederive", f"the trailers do not re-derive "
                            f"({type(exc).__name__}: {str(exc)[:120]})")]
    return []


def _check_commit(store: GitStore, commit: str, ns: str, state: ThreadState,
                  now: float) -> None:
    author, committed = store.commit_times(commit)
    clock = time_problem(author, committed, state.time, now)
    if clock is not None:
        raise _Refusal(*clock)
    if author != committed:
        raise _Refusal("thread.rederive", "author and committer times differ: the saver "
                       "writes one time")
    files = _tree(store, commit)
    message = store.commit_info(commit).message
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refusal("commit.encoding", "the commit message is not UTF-8") from None
    odd = next((ch for ch in text if ch in LINE_BREAKS), None)
    if odd is not None:
        raise _Refusal("commit.line_break", f"the commit message holds U+{ord(odd):04X}, a "
                       "line break other than \\n: the saver never writes one, and readers "
                       "that split lines there would see other trailers")
    fields = _fields(message)
    if fields.get("Layout") != LAYOUT:
        raise _Refusal("thread.layout", f"a thread commit without Gitstate-Layout: {LAYOUT} "
                       "(threads of the earlier layout do not travel)")
    if "Checkpoint" in fields:
        wanted = _checkpoint(store, fields, files, ns, state)
    elif state.tree is None:
        raise _Refusal("thread.root", "a thread's first commit must be a checkpoint")
    elif "Delete-Runs" in fields or "Prune-Keep" in fields:
        wanted = _tombstone(fields, files, state)
    else:
        writes_for = _id_list(fields.get("Writes-For"), "Writes-For")
        if not writes_for or {n: s for n, s in files.items() if n != WRITES_FILE} != {
                n: s for n, s in state.tree.items() if n != WRITES_FILE}:
            raise _Refusal("thread.rederive", "a pending-writes commit changes only "
                           f"{WRITES_FILE}, for the checkpoints Gitstate-Writes-For names")
        _writes(store, files, writes_for, ns, state)
        wanted = writes_message(writes_for, state.latest)
    if message != wanted:
        raise _Refusal("thread.rederive", "the commit message is not the one the saver "
                       "writes for this change at its parent (trailers, their values or "
                       "their order differ)")
    state.apply(fields)
    state.tree, state.time = files, committed


def _tree(store: GitStore, commit: str) -> dict[str, str]:
    files: dict[str, str] = {}
    total = 0
    for raw, mode, sha in store.tree_entries(commit):
        name = raw.decode("utf-8", "replace")
        if name not in ("checkpoint", "metadata", WRITES_FILE) and not (
                name.startswith(CHANNEL) and name[len(CHANNEL):] and
                enc(dec(name[len(CHANNEL):])) == name[len(CHANNEL):]):
            raise _Refusal("tree.unknown_name", f"the tree holds {name[:80]!r}, which is not "
                           "a file the saver writes (checkpoint, metadata, channel.<name>, "
                           f"{WRITES_FILE})")
        if mode != layout.FILE_MODE:
            raise _Refusal("tree.mode", f"{name[:80]} has mode {mode:o}: only regular files")
        size = store.object_size(sha)
        if size > FILE_MAX:
            raise _Refusal("tree.too_large", f"{name[:80]} is {size} bytes; the limit is "
                           f"{FILE_MAX}")
        total += size
        if total > COMMIT_MAX:
            raise _Refusal("tree.total_too_large", f"the files of the commit, counted by "
                           f"name, are over {COMMIT_MAX} bytes (one blob named many times "
                           "counts each time: a reader inflates it each time)")
        files[name] = sha
    return files


def _id(value: object, what: str) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= ID_MAX or not value.isprintable():
        raise _Refusal("thread.rederive", f"{what} must be a printable id of 1-{ID_MAX} "
                       "characters")
    return value


def _id_list(value: object, what: str) -> list[str]:
    if not isinstance(value, list):
        raise _Refusal("thread.rederive", f"Gitstate-{what} must be a list of ids")
    ids = [_id(v, f"an id of Gitstate-{what}") for v in value]
    if ids != sorted(set(ids)):
        raise _Refusal("thread.rederive", f"Gitstate-{what} must be sorted, each id once")
    return ids


def _checkpoint(store: GitStore, fields: dict[str, Any], files: dict[str, str], ns: str,
                state: ThreadState) -> bytes:
    cid = _id(fields["Checkpoint"], "Gitstate-Checkpoint")
    if cid in state.seen:
        raise _Refusal("thread.id_reused", f"checkpoint {cid[:60]} is already on the thread: "
                       "the saver writes each checkpoint once")
    parent = fields.get("Parent-Checkpoint")
    if parent is not None and _id(parent, "Gitstate-Parent-Checkpoint") not in state.seen:
        raise _Refusal("thread.parent", f"the parent checkpoint {str(parent)[:60]} is not "
                       "on the thread before this commit")
    run = fields.get("Run-Id")
    run_id = None if run is None else _id(run, "Gitstate-Run-Id")
    writes_for = _id_list(fields.get("Writes-For"), "Writes-For")
    if "checkpoint" not in files or "metadata" not in files:
        raise _Refusal("tree.missing", "a checkpoint commit holds checkpoint and metadata")
    if bool(writes_for) != (WRITES_FILE in files):
        raise _Refusal("thread.rederive", f"{WRITES_FILE} is in the tree exactly when "
                       "Gitstate-Writes-For names checkpoints")
    before = state.tree or {}
    new = {n: store.blob(s) for n, s in files.items() if before.get(n) != s and
           n != WRITES_FILE}
    for name, data in new.items():
        kind = data.partition(b"\0")[0]
        if (data != EMPTY or name in ("checkpoint", "metadata")) and (
                b"\0" not in data or not _KIND.fullmatch(kind) or b"pickle" in kind):
            raise _Refusal("thread.value", f"{name[:80]} is not a value the saver writes "
                           "(<serde kind>\\0<bytes>; pickle is never taken)")
        _safe(name, kind.decode(), data.partition(b"\0")[2])
    head = checkpoint_head(cid, parent, fields.get("Source"), fields.get("Step"), run_id)
    refuse_secrets(new, "\n".join(head))
    if writes_for:
        _writes(store, files, writes_for, ns, state)
    return checkpoint_message(head, max(state.latest or "", cid), writes_for)


def _writes(store: GitStore, files: dict[str, str], writes_for: list[str], ns: str,
            state: ThreadState) -> None:
    data = store.blob(files[WRITES_FILE])
    try:
        records = lgjournal.decode(data)
    except StoreError as exc:
        raise _Refusal("thread.writes", exc.message) from None
    if lgjournal.encode(records) != data or lgjournal.merge(records) != records:
        raise _Refusal("thread.writes", f"{WRITES_FILE} is not in the form the saver writes "
                       "(canonical records, one per checkpoint, task and index)")
    for w in records:
        if w.ns != ns or not _KIND.fullmatch(w.kind.encode()) or "pickle" in w.kind:
            raise _Refusal("thread.writes", f"a pending write of {w.task_id[:40]!r} is for "
                           "another namespace or not typed as the saver writes it")
        _id(w.task_id, "a pending write's task id")
        _id(w.checkpoint, "a pending write's checkpoint id")
        if not isinstance(w.idx, int) or isinstance(w.idx, bool):
            raise _Refusal("thread.writes", "a pending write's index is not an integer")
        rules.check_secret(w.task_id, "a checkpoint file name (channel, version or task)")
        _safe(f"a pending write of {w.task_id[:40]!r}", w.kind, w.value)
    if sorted({w.checkpoint for w in records}) != writes_for:
        raise _Refusal("thread.writes", "Gitstate-Writes-For is not the checkpoints "
                       f"{WRITES_FILE} holds writes for")
    if state.tree is None or state.tree.get(WRITES_FILE) != files[WRITES_FILE]:
        refuse_secrets({f"pending write {w.task_id}/{w.idx} ({w.channel})": w.value
                        for w in records}, " ".join(f"{w.task_path} {w.checkpoint}"
                                                    for w in records))


def _safe(what: str, kind: str, body: bytes) -> None:
    """No value from elsewhere that would construct an object when decoded
    (gitstate/threads/value.py)."""
    try:
        check_typed(kind, body)
    except UnsafeValue as exc:
        raise _Refusal("thread.unsafe_value", f"{what[:80]} holds {exc}; a value from "
                       "elsewhere may only construct plain data when decoded") from None


def _tombstone(fields: dict[str, Any], files: dict[str, str], state: ThreadState) -> bytes:
    if files != state.tree:
        raise _Refusal("thread.rederive", "a tombstone keeps its parent's tree")
    if "Delete-Runs" in fields:
        runs = _id_list(fields["Delete-Runs"], "Delete-Runs")
        if not any(r in runs for r in state.visible.values()):
            raise _Refusal("thread.rederive", "Gitstate-Delete-Runs hides no checkpoint the "
                           "thread shows")
        left = max((c for c, r in state.visible.items() if r not in runs), default=None)
        return delete_runs_message(runs, left)
    kept = _id_list(fields["Prune-Keep"], "Prune-Keep")
    shown = set(state.visible)
    if not kept or not set(kept) <= shown or max(shown) not in kept or len(kept) == len(shown):
        raise _Refusal("thread.rederive", "Gitstate-Prune-Keep must keep the newest "
                       "checkpoint and hide at least one, among those the thread shows")
    return prune_message(kept)
