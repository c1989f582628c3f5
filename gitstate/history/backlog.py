"""The refusal journal's backlog: the records it could not take (a full disk, a lock that
could not be opened), one line of JSON each in ``.git/gitstate-refusals.failed``, until
``gitstate repair-journal`` (``refusals.repair``) journals them. ``verify`` reports the file
while it exists: an empty file or a line cut short by a full disk counts too, never as 0."""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

from ..core.layout import REFUSALS_FAILED_FILE
from ..system import safefile

if TYPE_CHECKING:
    from ..store import GitStore


def failed(store: GitStore, entry: dict[str, Any]) -> None:
    """Keep a record the journal could not take: one line of JSON (its bulky fields
    dropped past 4 KiB). A line the disk cut short, or a file left
    empty, still counts (:func:`failures`): the file's presence is the signal."""
    line = json.dumps(entry, ensure_ascii=True, sort_keys=True)
    if len(line) > 4096:
        line = json.dumps({**{k: entry[k] for k in ("time", "rule", "op", "actor", "writer",
                                                    "request_id", "run_id")},
                           "key": str(entry["key"])[:200], "clipped": True}, sort_keys=True)
    with contextlib.suppress(OSError):  # never through a link (safefile)
        safefile.append(store.git_dir / REFUSALS_FAILED_FILE, (line + "\n").encode(),
                        repair=True)


def failures(store: GitStore) -> str | None:
    """What verify says of the backlog, or None when no journal write failed."""
    try:
        data = safefile.read_regular(store.git_dir / REFUSALS_FAILED_FILE, 64 << 20)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"refusals could not be recorded, how many is unknown ({exc})"
    count = len(data.splitlines())
    if count == 0:
        return ("at least one refusal could not be recorded (the disk was full when it "
                "was counted)")
    return f"{count} refusal{'s' if count > 1 else ''} could not be recorded"
