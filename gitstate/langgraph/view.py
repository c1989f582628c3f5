"""`gitstate log / show / diff --thread`: LangGraph checkpoint threads read like main.

The log lists a thread's commits newest first (checkpoints with their step, source, parent
and run; tombstones of deleted runs and prunes), straight from the thread ref's trailers.
show and diff decode checkpoints through the checkpointer itself (gitstate/langgraph/saver.py), with
LangGraph's strict serde (nothing outside its plain-data allow-list is constructed), and
name the channels a checkpoint changed (channel files whose blob its commit changed).
Values are shown as JSON where they are JSON, else as their text form.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..core.errors import UsageError

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

    from .saver import GitCheckpointSaver


def _saver(agent_dir: Any) -> GitCheckpointSaver:
    """A saver for showing, with LangGraph's strict serde: a value whose msgpack names a
    type outside LangGraph's plain-data allow-list is shown as its arguments, never
    constructed (a thread may come from elsewhere; docs/security.md)."""
    try:
        from .read import strict_serde
        from .saver import GitCheckpointSaver
    except ImportError as exc:
        raise UsageError("reading checkpoint threads needs the langgraph extra: pip install "
                         f"'gitstate[langgraph]' ({exc})", rule="usage.langgraph_missing"
                         ) from exc
    return GitCheckpointSaver(agent_dir, serde=strict_serde())


def _plain(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return repr(value)


def log(agent_dir: Any, thread: str, ns: str = "", limit: int | None = None
        ) -> list[dict[str, Any]]:
    from .saver import parse_trailers, trailer_json

    with _saver(agent_dir) as saver:
        head = saver.store.ref(saver.ref_name(thread, ns, "checkpoints"))
        if head is None:
            raise UsageError(f"no checkpoint thread {thread!r} (namespace {ns!r})",
                             rule="usage.thread")
        out: list[dict[str, Any]] = []
        for info in saver.store.walk(head):
            if limit is not None and len(out) >= limit:
                break
            f = parse_trailers(info.message)
            row: dict[str, Any] = {"commit": info.id, "time": info.time,
                                   "summary": info.message.decode("utf-8", "replace")
                                   .split("\n", 1)[0]}
            for name in ("Checkpoint", "Parent-Checkpoint", "Source", "Step", "Run-Id",
                         "Delete-Runs", "Prune-Keep"):
                if name in f:
                    row[name.lower().replace("-", "_")] = trailer_json(f, name, info.id)
            out.append(row)
        return out


def _find(saver: GitCheckpointSaver, thread: str, ns: str, rev: str | None) -> Any:
    config: RunnableConfig = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
    if rev is not None:
        head = saver.store.ref(saver.ref_name(thread, ns, "checkpoints"))
        match = [cid for commit, cid, _ in (saver.visible(head) if head else ())
                 if cid == rev or commit.startswith(rev.lower())]
        if len(match) != 1:
            raise UsageError(f"{rev!r} names {len(match)} checkpoints of thread {thread!r}",
                             rule="usage.rev")
        config["configurable"]["checkpoint_id"] = match[0]
    tup = saver.get_tuple(config)
    if tup is None:
        raise UsageError(f"no checkpoint {rev or '(latest)'} in thread {thread!r}",
                         rule="usage.rev")
    return tup


def show(agent_dir: Any, thread: str, rev: str | None, ns: str = "") -> dict[str, Any]:
    with _saver(agent_dir) as saver:
        tup = _find(saver, thread, ns, rev)
        cid = tup.config["configurable"]["checkpoint_id"]
        head = saver.store.ref(saver.ref_name(thread, ns, "checkpoints"))
        commit = next(c for c, i, _ in saver.visible(head or "") if i == cid)
        changed = saver.changed_channels(commit)
        return {"thread": thread, "namespace": ns, "checkpoint": cid, "commit": commit,
                "parent_checkpoint": (tup.parent_config or {}).get("configurable", {})
                .get("checkpoint_id"), "metadata": _plain(dict(tup.metadata)),
                "changed_channels": changed,
                "channels": {k: _plain(v) for k, v in
                             sorted(tup.checkpoint["channel_values"].items())},
                "pending_writes": [[t, c, _plain(v)] for t, c, v in tup.pending_writes or []]}


def diff(agent_dir: Any, thread: str, rev_a: str, rev_b: str | None,
         ns: str = "") -> dict[str, Any]:
    with _saver(agent_dir) as saver:
        a, b = _find(saver, thread, ns, rev_a), _find(saver, thread, ns, rev_b)
        va, vb = a.checkpoint["channel_values"], b.checkpoint["channel_values"]
        changes = {k: {"old": _plain(va.get(k)), "new": _plain(vb.get(k))}
                   for k in sorted(set(va) | set(vb)) if va.get(k) != vb.get(k)}
        return {"thread": thread, "from": a.config["configurable"]["checkpoint_id"],
                "to": b.config["configurable"]["checkpoint_id"], "channels": changes}
