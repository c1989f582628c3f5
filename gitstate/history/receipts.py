"""Wake-up receipts: what each hook or gateway render delivered, kept so that "what did the
11:03 patrol see" is answered by a record, not only by recomputation.

Each ``gitstate hook ...`` (Claude Code, a gateway's ``hook plain``) appends one JSON line to
``.git/gitstate-receipts.jsonl``: an id, the moment it rendered for, main's commit it read,
the sha256 and length of the exact bytes it wrote to stdout, the runtime and hook event, the
locale, time zone and budget, and the run (id and commit) when the wake-up named one. It is
cheap by design: one ``O_APPEND`` write, no fsync (a crash may lose the last receipts, never
the state), nothing on main. Rotated: past :data:`MAX_BYTES` the file moves to
``gitstate-receipts.jsonl.1`` (replacing the one before), so at most twice that is kept.

``gitstate render --receipt ID`` renders the same commit, moment, locale, zone, budget and
run again, wraps it as the runtime did, and checks the sha256: the exact bytes, or a
refusal saying they differ. Standard library only, and no hashlib (OpenSSL costs ~3 ms):
the wake-up path imports this module.
"""

from __future__ import annotations

import json
import os

from ..core.layout import RECEIPTS_FILE
from ..core.timebase import UTC, datetime

try:
    from _sha256 import sha256  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - other Python implementations
    from hashlib import sha256

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

FILE = RECEIPTS_FILE
MAX_BYTES = 1 << 20
FIELDS = ("id", "time", "head", "sha256", "bytes", "runtime", "event", "locale", "tz",
          "max_chars", "run_id", "run_head")


def digest(data: bytes) -> str:
    return str(sha256(data).hexdigest())


def record(git_dir: str, data: bytes, *, now: datetime, head: str | None, runtime: str,
           event: str, locale: str, tz: str | None, max_chars: int | None,
           run_id: str | None,
           run_head: str | None) -> str | None:
    """Append one receipt; returns its id (None when the directory is not writable)."""
    stamp = now.astimezone(UTC)
    rid = stamp.strftime("%Y%m%dT%H%M%S%fZ") + "-" + os.urandom(2).hex()
    line = json.dumps({"id": rid, "time": stamp.isoformat().replace("+00:00", "Z"),
                       "head": head, "sha256": digest(data), "bytes": len(data),
                       "runtime": runtime, "event": event, "locale": locale, "tz": tz,
                       "max_chars": max_chars, "run_id": run_id, "run_head": run_head},
                      sort_keys=True, separators=(",", ":")) + "\n"
    path = os.path.join(git_dir, FILE)
    try:
        try:
            if os.lstat(path).st_size > MAX_BYTES:
                os.replace(path, path + ".1")
        except FileNotFoundError:
            pass
        # a planted symlink, FIFO or hard link is refused, never written through
        from ..system.safefile import append

        append(path, line.encode(), repair=True)
    except OSError:
        return None
    return rid


def _lines(path: str) -> list[str]:
    from ..system.safefile import read_regular

    try:
        return read_regular(path, 2 * MAX_BYTES).decode("utf-8", "replace").splitlines()
    except OSError:
        return []


def entries(git_dir: str, since: datetime | None = None) -> Iterator[dict[str, Any]]:
    """Every receipt kept, newest first; lines that are not receipts are skipped."""
    from ..core.model import parse_time

    path = os.path.join(git_dir, FILE)
    for line in reversed(_lines(path + ".1") + _lines(path)):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or set(rec) != set(FIELDS):
            continue
        if since is not None and parse_time(str(rec["time"])) < since:
            continue
        yield rec


def find(git_dir: str, rid: str) -> dict[str, Any] | None:
    return next((r for r in entries(git_dir) if r["id"] == rid), None)
