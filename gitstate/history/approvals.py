"""Where an approval record lives once it is finished.

A pending or approved approval is a key of the state (``approval.<id>``): it counts toward
the live-key cap and the stored-key limit while the agent may still see it decided or spend
it. A finished one leaves the key table in the commit that finishes it: a denial, a spend
and a failed call's outcome each retire their key, and a request retires every approval
record that has expired by its time. The commit names what it retires in a
``Gitstate-Retired`` trailer (a JSON list of keys) and replay drops them, so the key table
never fills with approvals that can no longer run; their whole life stays in git
(``git log``, ``gitstate approvals --all``), and the planners read a retired record back from
there (:func:`last_record`) to refuse a second decision, spend or outcome by its own rule.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..core.model import Entry, State

if TYPE_CHECKING:
    from datetime import datetime

    from ..store import GitStore

RETIRED = "Retired"  # Gitstate-Retired: ["approval.<id>", ...]
FINAL_STEPS = ("deny", "consume", "outcome")
PREFIX = "approval."

Finished = Callable[[str], "Entry | None"]
"""A reader of the newest record of an approval key that left the state (None: never set)."""


def expired_keys(state: State, now: datetime) -> list[str]:
    """The approval records a request retires: every one expired at ``now``."""
    return sorted(k for k, e in state.keys.items()
                  if k.startswith(PREFIX) and e.is_expired(now))


def retired(extra: Iterable[tuple[str, str]]) -> list[str]:
    """The keys a commit's ``Gitstate-Retired`` trailer names (none without it)."""
    text = dict(extra).get(RETIRED)
    if text is None:
        return []
    keys = json.loads(text)
    if not isinstance(keys, list) or not all(isinstance(k, str) and k.startswith(PREFIX)
                                             for k in keys):
        raise ValueError("Gitstate-Retired must list approval keys")
    return keys


def without(state: State, keys: Iterable[str]) -> State:
    for key in keys:
        state = state.with_key(key, None)
    return state


def record_from(change: Any, time: str) -> Entry | None:
    """The record a commit's change left on its approval key (a set's new value)."""
    if change.op != "set" or not isinstance(change.new, dict):
        return None
    return Entry(change.new, time, change.reason, change.actor, change.expires_at)


def last_record(store: GitStore, head: str, key: str) -> Entry | None:
    """The newest record of ``key`` on the history of ``head`` (its final step's value)."""
    from ..core.model import format_time
    from ..core.timebase import UTC, datetime
    from ..core.trailers import NotAGitstateCommit, parse_message

    needle = f"Gitstate-Key: {key}\n".encode()
    for info in store.walk(head):
        if needle not in info.message:
            continue
        try:
            change = parse_message(info.message)
        except NotAGitstateCommit:
            continue
        if change.key == key:
            return record_from(change, format_time(datetime.fromtimestamp(info.time, UTC)))
    return None


def finished_in(store: GitStore, head: str | None) -> Finished:
    """:func:`last_record` on ``head``'s history, as a planner's reader."""
    if head is None:
        return lambda key: None
    return lambda key: last_record(store, head, key)


def history(records: Iterable[Mapping[str, Any]]) -> dict[str, Entry]:
    """The newest record of every approval key in a projection's records, newest first."""
    out: dict[str, Entry] = {}
    for rec in records:
        key = rec.get("key")
        if isinstance(key, str) and key.startswith(PREFIX) and key not in out and \
                rec.get("op") == "set" and isinstance(rec.get("new"), dict):
            out[key] = Entry(rec["new"], rec["time"], rec["reason"], rec["actor"] or "",
                             rec["expires_at"])
    return out
