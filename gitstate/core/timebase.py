"""The datetime classes, loaded without the datetime module's pure-Python half.

``import datetime`` runs the module's whole pure-Python implementation and then replaces it
with the C one (``_datetime``): about 1 ms of every wake-up, a twentieth of the process. The
classes here are the very objects ``datetime`` exports (``datetime.datetime is
_datetime.datetime``), so values pass freely to and from code that imports ``datetime``
itself. Where ``_datetime`` does not exist (another Python), the public module.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `from typing import`: typing costs ~3 ms per wake-up
if TYPE_CHECKING:
    from datetime import UTC, datetime, timedelta, timezone, tzinfo
else:
    try:
        from _datetime import UTC, datetime, timedelta, timezone, tzinfo
    except ImportError:
        from datetime import UTC, datetime, timedelta, timezone, tzinfo

__all__ = ["UTC", "datetime", "timedelta", "timezone", "tzinfo"]
