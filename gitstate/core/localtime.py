"""Times as a person gives and reads them: in the agent's zone, with its offset.

Stored times are UTC with a ``Z`` (``model.format_time`` writes them, ``model.parse_time``
reads them back). A person gives and reads times in the agent's zone (``config.resolve_tz``):
:func:`parse_given_time` is the one reader of a time option, for the click commands and the
wake-up fast path alike; :func:`local_text` and :func:`local_times_in` show stored times in
text output. Not on the plain wake-up path (only ``--now`` brings it there).
"""

from __future__ import annotations

import re

from .model import parse_time
from .timebase import datetime, tzinfo


def parse_given_time(text: str, zone: tzinfo, option: str, rule: str = "usage.now") -> datetime:
    """A time a person gave (every time option of the CLI): ISO 8601, where a time without
    an offset is a wall-clock time in ``zone``, the agent's zone (``config.resolve_tz``: its
    [gitstate] timezone, else the machine's); a wall-clock time that a clock change makes
    ambiguous is its first occurrence. Returned in UTC. Anything else is a UsageError naming
    ``option``, with ``rule``."""
    try:
        full = text.strip()
        moment = datetime.fromisoformat(full.replace("Z", "+00:00")) if len(full) <= 64 \
            else None
        if moment is not None and moment.tzinfo is None:
            full = moment.replace(tzinfo=zone).isoformat()
        return parse_time(full)
    except (ValueError, OverflowError) as exc:
        from .errors import UsageError

        why = "only years 1970 to 8999" if "years" in str(exc) or "range" in str(exc) \
            else "not an ISO 8601 time"
        raise UsageError(f"{option} {text[:40]!r}: {why} (e.g. 2026-08-13T09:04, in the "
                         "agent's time zone, or 2026-08-13T09:04+08:00)", rule=rule) from None


def local_text(stamp: str | None, zone: tzinfo) -> str:
    """A stored time (UTC, ``...Z``) as the CLI prints it for a person: in ``zone``, with its
    offset (``2026-08-13T11:03:00+08:00``). Text that is no time is returned as it is."""
    if not stamp:
        return ""
    try:
        return parse_time(stamp).astimezone(zone).isoformat()
    except ValueError:
        return stamp


_STORED_TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\b")


def local_times_in(text: str, zone: tzinfo) -> str:
    """``text`` with every stored time in it (``2026-08-13T03:03:00Z``, as a refusal's
    message quotes a key's set time) shown as :func:`local_text` shows one."""
    return _STORED_TIME.sub(lambda m: local_text(m.group(0), zone), text)
