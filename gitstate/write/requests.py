"""Idempotent requests: a caller's request id and a fingerprint of the call's arguments
travel in the ``Gitstate-Request`` trailer; a retry finds the first commit and returns its
result instead of writing again (the same id with other arguments is refused)."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from ..core.errors import Refused
from ..core.model import State
from ..core.results import WriteResult
from ..core.rules import check_request_id
from ..history.reader import StateReader

REQUEST_WINDOW = 1000  # how many recent commits a request id is remembered for


def fingerprint(request_id: str | None, *args: Any) -> dict[str, str] | None:
    """The request trailer: the caller's id and a hash of the call's arguments."""
    if request_id is None:
        return None
    request_id = check_request_id(request_id)
    canonical = json.dumps(args, sort_keys=True, ensure_ascii=True, default=str)
    return {"id": request_id, "args": hashlib.sha256(canonical.encode()).hexdigest()[:16]}


def find(reader: StateReader, request: dict[str, str], now: datetime,
         max_keys: int) -> WriteResult | None:
    """The first result of an earlier call with this request id (lock held), or None."""
    needle = f'"id": "{request["id"]}"'.encode()
    for n, rec in enumerate(reader.history_iter(needle)):
        if n >= REQUEST_WINDOW:
            break
        earlier = rec.get("request")
        if not isinstance(earlier, dict) or earlier.get("id") != request["id"]:
            continue
        if earlier.get("args") != request["args"]:
            raise Refused(f"request id {request['id']!r} was already used for a different call "
                          f"({rec['commit'][:12]}); use a new id", rule="request.conflict",
                          commit=rec["commit"])
        commit = str(rec["commit"])
        after = reader.state_at(commit)
        parent = rec.get("parent")
        before = reader.state_at(str(parent)) if parent else State()
        key = rec.get("key")
        head_state = reader.state_at(reader.head())
        return WriteResult(
            op=str(rec["op"]), commit=commit, key=key,
            old=before.keys.get(key) if key else None,
            new=after.keys.get(key) if key else None,
            handoff=after.handoff if rec["op"] == "handoff" else None,
            live_keys=len(head_state.live(now)), max_keys=max_keys,
            warnings=[f"request {request['id']!r} was already applied in {commit[:12]}; "
                      "returning that result (no new commit)"],
            replayed=True, reverted=rec.get("reverts"))
    return None
