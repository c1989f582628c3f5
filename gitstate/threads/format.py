"""The git form of LangGraph checkpoint threads: ref and file names, trailers, and the
secret scan of what a checkpoint commit holds (gitstate/langgraph/saver.py; docs/langgraph.md).

A checkpoint commit's tree is flat: ``checkpoint`` and ``metadata`` (LangGraph's serde,
typed), ``channel.<channel>`` (the value of each channel at that checkpoint) and, when
the commit carries pending writes, ``pending-writes`` (gitstate/threads/journal.py). A channel's
file keeps its name from checkpoint to checkpoint, so git's delta search, which pairs
objects by the hash of their file name, finds each version's predecessor.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

from ..core import layout, rules, secretscan, textsafe
from ..core.errors import StoreError
from ..core.trailers import encode_json

PREFIX = layout.THREADS_PREFIX
ARCHIVE = layout.THREADS_ARCHIVE_PREFIX
LAYOUT = 2  # the ``Gitstate-Layout`` of commits written now; without it: 1 (blobs/ trees)
CHANNEL = "channel."
WRITES_FILE = "pending-writes"
EMPTY = b"empty\0"  # a channel in the versions with no value
# What str.splitlines (and so many readers) breaks a line at, but for "\n": a commit message
# holding one would show one reader a trailer another does not see. Never written; refused.
LINE_BREAKS = frozenset("\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
_KEEP = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


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
    return unquote(component)


def channel_file(channel: str) -> str:
    return CHANNEL + enc(channel)


def typed(data: tuple[str, bytes]) -> bytes:
    return data[0].encode() + b"\0" + data[1]


def untyped(raw: bytes) -> tuple[str, bytes]:
    kind, _, body = raw.partition(b"\0")
    return kind.decode(), body


def ids(conf: dict[str, Any]) -> tuple[str, str]:
    """A write's thread id and namespace, which become a ref name: scanned for secrets."""
    thread_id, ns = str(conf["thread_id"]), str(conf.get("checkpoint_ns", ""))
    check_ids(thread_id, ns)
    return thread_id, ns


def check_ids(thread_id: str, ns: str) -> None:
    """The checks of a thread id and namespace, written here or arriving in a ref name
    (gitstate/threads/check.py): nothing secret (secretscan) and the text rule of every
    reason and value (``rules.check_line``: no control, invisible, direction-changing or
    blank character, no lone surrogate, no combining mark over ASCII or digits, no run of
    marks: what could disguise the name in a log or a listing), rule ``thread.id_text``."""
    for text, what in ((thread_id, "the thread id"), (ns, "the checkpoint namespace")):
        rules.check_secret(text, what)
        rules.check_line(text, what, "thread.id_text")


def check_new_thread(thread_id: str, existing: Iterable[str]) -> None:
    """A thread id new to a repository must not look like one it has: the key rules'
    look-alike check (``rules.check_twin``: case, the confusable skeleton), as
    ``thread.case`` / ``thread.confusable``. At the first put of a thread, a copy onto a new
    one, and a thread arriving by pull or push."""
    rules.check_twin(thread_id, existing, what="thread")


def refuse_secrets(files: dict[str, bytes], message: str) -> None:
    """Nothing secret enters a checkpoint either (docs/langgraph.md, "Secrets"): a channel
    value, a pending write, a thread, namespace or task id and the commit message are
    scanned as every other text that reaches an object (secretscan), and a finding
    refuses the whole put, naming what and where, never the text. Refused, not redacted:
    a checkpoint is what the graph resumes from, and a silently altered message would
    resume another conversation."""
    for path, data in files.items():
        rules.check_secret(path, "a checkpoint file name (channel, version or task)")
        found = scan_windows(data)
        if found is not None:
            rules.refuse_secret(f"the checkpoint file {path}", found, path)
    rules.check_secret(message, "the checkpoint's commit message (ids, step, source)")


WINDOW = 16 << 10
OVERLAP = 4 << 10
_SEPARATOR = re.compile(rb"[\x00-\x20\"',:;{}\[\]()<>|\\]")
_CLEAN: set[bytes] = set()  # digests of windows scanned clean, in this process


def scan_windows(data: bytes) -> secretscan.Finding | None:
    """``secretscan.scan_bytes`` of ``data``, window by window, skipping windows scanned
    clean before: a channel that grows by appending (a message list) is the same bytes as
    its previous version but for its ends, and scanning its 500 kB whole took 60 ms a
    step. Windows start at multiples of ``WINDOW`` moved on to the next separator byte
    (space, quote, bracket, control byte: never inside a token) and run ``OVERLAP`` bytes
    past the next window's start, then on to a separator: every run of token characters
    lies whole in the window where it starts, as does any match of up to ``OVERLAP``
    bytes (the patterns' texts are far shorter)."""
    if len(data) <= WINDOW + OVERLAP:
        return secretscan.scan_bytes(data)
    cuts = [0]
    while cuts[-1] + WINDOW < len(data):
        sep = _SEPARATOR.search(data, cuts[-1] + WINDOW)
        if sep is None:
            break
        cuts.append(sep.start())
    for i, start in enumerate(cuts):
        end = len(data)
        if i + 1 < len(cuts):
            sep = _SEPARATOR.search(data, cuts[i + 1] + OVERLAP)
            end = sep.start() if sep is not None else len(data)
        window = data[start:end]
        digest = hashlib.sha1(window).digest()
        if digest in _CLEAN:
            continue
        found = secretscan.scan_bytes(window)
        if found is not None:
            return found
        if len(_CLEAN) > 1 << 16:
            _CLEAN.clear()
        _CLEAN.add(digest)
    return None


def trailer_json(fields: dict[str, str], name: str, commit: str) -> Any:
    """A trailer's JSON value; a commit gitstate did not write this way is named, never a
    traceback."""
    try:
        return json.loads(fields[name])
    except (ValueError, RecursionError) as exc:
        raise StoreError(f"{commit[:12]} on a checkpoint thread has a malformed "
                         f"Gitstate-{name} trailer ({exc})", rule="thread.damaged") from None


def parse_trailers(message: bytes) -> dict[str, str]:
    """The ``Gitstate-`` trailers of a thread commit: the one parser of the reader
    (gitstate/langgraph/read.py) and the rule of foreign commits
    (gitstate/threads/check.py). Lines end at "\\n" only (never at the other breaks
    str.splitlines knows: see LINE_BREAKS), and only the block after the summary's blank
    line holds trailers: no summary text, however made, is ever read as one."""
    out = {}
    _summary, _, block = message.decode("utf-8", "replace").partition("\n\n")
    for line in block.split("\n"):
        name, sep, value = line.partition(": ")
        if sep and name.startswith("Gitstate-"):
            out[name[9:]] = value
    return out


def commit_kind(fields: dict[str, Any]) -> str:
    """What a thread commit is, from its trailers, as the reader and the rule of foreign
    commits both decide it: ``checkpoint`` (its Gitstate-Checkpoint wins over any other
    trailer), ``delete-runs``, ``prune`` or ``writes``; a trailer of another kind on a
    commit is never applied."""
    for trailer, kind in (("Checkpoint", "checkpoint"), ("Delete-Runs", "delete-runs"),
                          ("Prune-Keep", "prune")):
        if trailer in fields:
            return kind
    return "writes"


def json_or_none(value: Any) -> Any:
    """``value`` as JSON reads it back, or None when it is not plain JSON."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError, RecursionError):
        return None


# -- commit messages: what the saver writes, and what a thread from elsewhere is re-derived
# against (gitstate/threads/check.py), byte for byte ---------------------------------------------

def checkpoint_head(cid: str, parent: str | None, source: Any, step: Any,
                    run_id: str | None) -> list[str]:
    """The summary line and the first trailers of a checkpoint commit (what ``put`` scans
    for secrets before taking the lock)."""
    summary = _summary(f"checkpoint {cid}: step {step} ({source})")
    lines = [summary, "",
             f"Gitstate-Checkpoint: {encode_json(cid)}",
             f"Gitstate-Parent-Checkpoint: {encode_json(parent)}",
             f"Gitstate-Source: {encode_json(source)}",
             f"Gitstate-Step: {encode_json(step)}"]
    if run_id is not None:
        lines.append(f"Gitstate-Run-Id: {encode_json(run_id)}")
    return lines


def _summary(text: str) -> str:
    """A summary line: one line, every control, invisible or line-breaking character
    escaped (``\\uXXXX``), at most 200 characters."""
    return textsafe.visible(text.replace("\n", " "))[:200]


def checkpoint_message(head: list[str], latest: str, writes_for: list[str]) -> bytes:
    tail = [f"Gitstate-Latest: {encode_json(latest)}",
            f"Gitstate-Writes-For: {encode_json(writes_for)}",
            f"Gitstate-Layout: {LAYOUT}"]
    return "\n".join(head + tail).encode() + b"\n"


def writes_message(writes_for: list[str], latest: str | None) -> bytes:
    """A commit of pending writes only (``commit_pending_writes``)."""
    return (f"pending writes of {len(writes_for)} checkpoints\n\n"
            f"Gitstate-Writes-For: {encode_json(writes_for)}\n"
            f"Gitstate-Latest: {encode_json(latest)}\n"
            f"Gitstate-Layout: {LAYOUT}\n").encode()


def _tombstone(summary: str, trailer: str, value: object, latest: str | None) -> bytes:
    return (f"{_summary(summary)}\n\nGitstate-{trailer}: {encode_json(value)}\n"
            f"Gitstate-Latest: {encode_json(latest)}\nGitstate-Layout: {LAYOUT}\n").encode()


def delete_runs_message(runs: list[str], latest: str | None) -> bytes:
    """The tombstone of ``delete_for_runs``: ``runs`` sorted, ``latest`` the newest id
    still visible."""
    return _tombstone(f"delete the checkpoints of {len(runs)} runs", "Delete-Runs", runs,
                      latest)


def prune_message(kept: list[str]) -> bytes:
    """The tombstone of ``prune``: the ids kept (the newest one among them)."""
    newest = max(kept)
    return _tombstone(f"prune: keep {len(kept)} checkpoints, newest {newest}", "Prune-Keep",
                      sorted(kept), newest)


def digest(thread_id: str) -> str:
    """The hash naming a thread's lock and journal files."""
    return hashlib.sha256(thread_id.encode()).hexdigest()[:24]
