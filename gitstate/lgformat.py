"""The git form of LangGraph checkpoint threads: ref and file names, trailers, and the
secret scan of what a checkpoint commit holds (gitstate/langgraph.py; docs/langgraph.md).

A checkpoint commit's tree is flat: ``checkpoint`` and ``metadata`` (LangGraph's serde,
typed), ``channel.<channel>`` (the value of each channel at that checkpoint) and, when
the commit carries pending writes, ``pending-writes`` (gitstate/lgjournal.py). A channel's
file keeps its name from checkpoint to checkpoint, so git's delta search, which pairs
objects by the hash of their file name, finds each version's predecessor.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any
from urllib.parse import unquote

from . import layout, rules, secretscan
from .errors import StoreError

PREFIX = layout.THREADS_PREFIX
ARCHIVE = layout.THREADS_ARCHIVE_PREFIX
LAYOUT = 2  # the ``Gitstate-Layout`` of commits written now; without it: 1 (blobs/ trees)
CHANNEL = "channel."
WRITES_FILE = "pending-writes"
EMPTY = b"empty\0"  # a channel in the versions with no value
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
    rules.check_secret(thread_id, "the thread id")
    rules.check_secret(ns, "the checkpoint namespace")
    return thread_id, ns


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
    out = {}
    for line in message.decode("utf-8", "replace").splitlines():
        name, sep, value = line.partition(": ")
        if sep and name.startswith("Gitstate-"):
            out[name[9:]] = value
    return out


def json_or_none(value: Any) -> Any:
    """``value`` as JSON reads it back, or None when it is not plain JSON."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError, RecursionError):
        return None
