"""What a run commit is, byte for byte: the ref prefix, run.json's bytes, the message and
its trailers (``Gitstate-Run``, ``Gitstate-Event``, ``Gitstate-Writer``, ``Gitstate-Request``,
``Gitstate-Process``). The ledger writes with these and the one rule of foreign commits
(gitstate/runs/check.py) re-derives with the same ones, so the two cannot drift.
"""

from __future__ import annotations

import json
import os
import re
import socket
from typing import TYPE_CHECKING, Any

from ..core.trailers import encode_json

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ..store import GitStore
    from ..store.objects import CommitInfo

PREFIX = "refs/heads/runs/"
RUN_FILE = "run.json"
RUN_MAX_BYTES = 1 << 20

_TRAILERS = ("Run", "Event", "Writer", "Request", "Process", "Clock")
HOST_MAX = 40
_SESSION = re.compile(r"([^:]{0,40}):([1-9][0-9]{0,9}):([0-9a-f]{6})")


def session_id() -> str:
    """Who wrote an event (``Gitstate-Process``): host, process and one opening of the
    repository. A run continued under another one (a restart, another machine after pull)
    counts as a resume."""
    host = "".join(c if c.isalnum() or c in "-." else "-"
                   for c in socket.gethostname()[:HOST_MAX])
    return f"{host}:{os.getpid()}:{os.urandom(3).hex()}"


def trailer_problem(writer: str, session: str) -> str | None:
    """What in a commit's ``Gitstate-Writer`` and ``Gitstate-Process`` the ledger would not
    have written (None: nothing): the writer is one of the roles, the process is
    :func:`session_id`'s shape (host of letters, digits, ``-`` and ``.``, a process id, six
    hex digits)."""
    from ..core.schema import WRITERS

    if writer not in WRITERS:
        return f"[run.writer] Gitstate-Writer {writer[:40]!r} is not one of {', '.join(WRITERS)}"
    shape = _SESSION.fullmatch(session)
    if shape is None or not all(c.isalnum() or c in "-." for c in shape.group(1)):
        return (f"[run.process] Gitstate-Process {session[:60]!r} is not host:pid:6 hex digits, "
                "as the ledger writes it")
    return None


def message(reason: str, run_id: str, event: dict[str, Any], writer: str,
            request: str | None, session: str, clock: str | None = None) -> bytes:
    """The message of one event's commit: the reason, then the trailers (``clock``: the raw
    wall reading when the commit is dated otherwise, as on main)."""
    lines = [f"Gitstate-Run: {run_id}", f"Gitstate-Event: {encode_json(event)}",
             f"Gitstate-Writer: {writer}"]
    if request is not None:
        lines.append(f"Gitstate-Request: {encode_json(request)}")
    lines.append(f"Gitstate-Process: {session}")
    if clock is not None:
        lines.append(f"Gitstate-Clock: {clock}")
    return (reason.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n").encode("utf-8")


def parse(raw: bytes) -> tuple[str, dict[str, str]]:
    """(reason, trailers) of a run commit; ValueError when it is not one."""
    text = raw.decode("utf-8")
    reason, sep, block = text.rstrip("\n").rpartition("\n\n")
    if not sep:
        raise ValueError("no trailer block")
    fields: dict[str, str] = {}
    for line in block.split("\n"):
        name, colon, value = line.partition(": ")
        if not colon or not name.startswith("Gitstate-") or name[9:] not in _TRAILERS:
            raise ValueError(f"not a run trailer: {line[:60]!r}")
        fields[name[9:]] = value
    if not {"Run", "Event", "Writer"} <= set(fields):
        raise ValueError("a run commit names its run, event and writer")
    return reason, fields


def events(store: GitStore, run_id: str,
           head: str) -> Iterator[tuple[CommitInfo, str, dict[str, str]]]:
    """The run's commits oldest first, each with its reason and trailers."""
    for info in list(store.walk(head))[::-1]:
        reason, fields = parse(info.message)
        if fields["Run"] != run_id:
            raise ValueError(f"names run {fields['Run']!r}, on the ref of {run_id!r}")
        yield info, reason, fields


def encode_run(run: dict[str, Any]) -> bytes:
    """run.json's bytes, as every run commit holds them."""
    return (json.dumps(run, ensure_ascii=False, indent=2, sort_keys=True) + "\n").encode()
