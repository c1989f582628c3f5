"""The time every writer and reader of one repository goes by (docs/reliability.md, "Clock").

The wall clock can be read wrong once (a process under a stepped clock, a VM resumed with an
old time) and it can be corrected. A wrong reading must not become the time of a commit:
commit times never go back within a ref, so one commit dated two days ahead would date every
later one, expire every approval at once and stretch every TTL set after it by two days.

So a reading is checked against an anchor kept beside the repository
(``.git/gitstate-clock.json``): a wall time taken together with the kernel's boot clock
(the seconds since boot, which no wall-clock step moves) and the boot's id. On the same boot, the
time now is the anchor's wall time plus the boot clock's elapsed seconds; a wall reading
within :data:`SKEW_SECONDS` of that is believed (and becomes the anchor again now and then,
so slow drift is followed); one further off is a step, and the anchored time is used in its
place (the raw reading then goes beside it, in the commit's ``Gitstate-Clock``). A new
offset the wall clock keeps for :data:`ACCEPT_SECONDS` of boot time is a correction, not a
misreading: it is believed from then on. Without an anchor (a new boot, another system than
Linux, a damaged file) the wall clock is believed and anchors.

Standard library only: the wake-up path renders at this time too, so the section, ``can_run``
and a spend judge an expiry at one time.
"""

from __future__ import annotations

import contextlib
import json
import os

from ..core.layout import CLOCK_FILE
from ..core.timebase import UTC, datetime

SKEW_SECONDS = 300  # a reading this close to the anchored time is believed
ACCEPT_SECONDS = 600  # a new offset kept this long (boot time) is a correction
REANCHOR_SECONDS = 60  # a believed reading re-anchors at most this often
_BOOT_ID = "/proc/sys/kernel/random/boot_id"
_UPTIME = "/proc/uptime"


class Reading:
    """``time``: what the clock model says it is (whole seconds, UTC); ``wall``: the raw
    reading (they differ only when the wall clock stepped away from the anchor). A plain
    class: the wake-up path does not import dataclasses."""

    __slots__ = ("time", "wall")

    def __init__(self, time: datetime, wall: datetime) -> None:
        self.time, self.wall = time, wall

    def __repr__(self) -> str:
        return f"Reading(time={self.time!r}, wall={self.wall!r})"

    @property
    def stepped(self) -> bool:
        return self.time != self.wall


def _sense() -> tuple[str, float] | None:
    """This boot's id and its boot clock (seconds since boot, suspended time included, read
    from the kernel's ``/proc/uptime`` rather than through a call a preloaded library could
    answer), or None where there is none (not Linux)."""
    from .safefile import read_regular

    try:
        boot = read_regular(_BOOT_ID, 64).decode("ascii", "replace").strip()
        return boot, float(read_regular(_UPTIME, 64).split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _load(path: str) -> dict[str, object] | None:
    from .safefile import read_regular

    try:
        data = json.loads(read_regular(path, 4096))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _save(path: str, anchor: dict[str, object]) -> None:
    from .safefile import write_atomic

    with contextlib.suppress(OSError):  # a lost anchor: the next reading is believed
        write_atomic(path, json.dumps(anchor, sort_keys=True).encode())


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


def read(git_dir: str | os.PathLike[str], wall: datetime | None = None) -> Reading:
    """The time now for the repository at ``git_dir`` (``wall``: the raw reading, else the
    system clock's)."""
    wall = (wall or datetime.now(UTC)).astimezone(UTC).replace(microsecond=0)
    sense = _sense()
    if sense is None:
        return Reading(wall, wall)
    boot, mono = sense
    path = os.path.join(os.fspath(git_dir), CLOCK_FILE)
    seconds = wall.timestamp()
    fresh = {"boot": boot, "mono": mono, "wall": seconds}
    anchor = _load(path)
    at, since = (_number(anchor.get("wall")), _number(anchor.get("mono"))) if anchor \
        else (None, None)
    if anchor is None or anchor.get("boot") != boot or at is None or since is None \
            or mono < since:
        _save(path, fresh)
        return Reading(wall, wall)
    expected = at + (mono - since)
    offset = seconds - expected
    if abs(offset) <= SKEW_SECONDS:
        if mono - since >= REANCHOR_SECONDS or "offset" in anchor:
            _save(path, fresh)
        return Reading(wall, wall)
    seen, first = _number(anchor.get("offset")), _number(anchor.get("offset_since"))
    if seen is not None and first is not None and abs(offset - seen) <= SKEW_SECONDS:
        if mono - first >= ACCEPT_SECONDS:  # kept this long: the clock was corrected
            _save(path, fresh)
            return Reading(wall, wall)
    else:
        _save(path, {**anchor, "offset": offset, "offset_since": mono})
    return Reading(datetime.fromtimestamp(int(expected), UTC), wall)


class TrustedClock:
    """The default clock of a repository's writers: ``clock()`` is :func:`read`'s time,
    ``clock.reading()`` the whole reading."""

    def __init__(self, git_dir: str | os.PathLike[str]) -> None:
        self.git_dir = os.fspath(git_dir)

    def reading(self) -> Reading:
        return read(self.git_dir)

    def __call__(self) -> datetime:
        return self.reading().time


def reading_of(clock: object) -> Reading:
    """The reading of any clock a writer was given: a :class:`TrustedClock`'s own, else the
    callable's time taken as both (a test's or a caller's clock is believed as given)."""
    if isinstance(clock, TrustedClock):
        return clock.reading()
    assert callable(clock)
    now = clock().astimezone(UTC).replace(microsecond=0)
    return Reading(now, now)
