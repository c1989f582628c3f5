"""A refusal record: what the journal keeps of a refused write, and the bytes it commits.

A record has the fields :data:`FIELDS`. It keeps what was attempted, where and why, but
never a secret (:func:`withhold`: a field that trips the scan, or the value a ``secret.*``
rule refused, becomes :data:`WITHHELD`), shows a hidden character, clips each value
(:func:`keep`); a record from elsewhere must meet the same rules (:func:`field_problem`,
:func:`parse`). :func:`written` makes a record's commit byte for byte, so that the journal
(``refusals.py``: its ref, lock, retention and exchange between clones) writes with it and
checks a chain from elsewhere by re-deriving every commit.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from ..core import secretscan, textsafe
from ..core.errors import InvalidInput
from ..core.rules import check_key
from ..core.trailers import encode_json

FIELDS = ("time", "rule", "op", "key", "attempted", "expected", "head_value", "actor",
          "writer", "reason", "request_id", "run_id", "message")
_TEXT_MAX = 2000
PREVIOUS_TRAILER = "Gitstate-Previous: "  # on a new generation's root: the full chain's head
_NAME_RE = re.compile(r"[a-z][a-z0-9_-]*(\.[a-z0-9_-]+)*")  # rules and ops, as errors.py names
_TIME_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_RUN_KEY_RE = re.compile(r"runs/[A-Za-z0-9._-]{1,64}")
_TEXTS = ("actor", "writer", "reason", "request_id", "run_id", "message")
WITHHELD = "[withheld: refused as a secret]"


def _clip(value: Any) -> Any:
    """Records keep what was attempted, bounded: a refused 1 MiB value is not kept whole.
    A value clipped already stays as it is (so a record is what keeping it again gives)."""
    if _clipped(value):
        return value
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return value if len(text) <= _TEXT_MAX else {"clipped": text[:_TEXT_MAX]}


def _clipped(value: Any) -> bool:
    return isinstance(value, dict) and list(value) == ["clipped"] and \
        isinstance(value["clipped"], str) and len(value["clipped"]) == _TEXT_MAX


def withhold(name: str, fields: dict[str, Any]) -> Any:
    """A field of a record as it may enter history: a value refused as a secret (or for a
    sensitive key) is withheld, and so is any field that trips the scan whatever rule
    refused the write (a reserved key, a stale compare-and-swap, a value too long): the
    record keeps that it was tried, where and why, never the text. Scanned whole, before
    any clipping, so that no part of a token is kept either."""
    value = fields.get(name)
    if value is None or name in ("time", "rule"):
        return value
    if name in ("attempted", "expected") and str(fields.get("rule") or "").startswith(
            "secret."):
        return WITHHELD
    return WITHHELD if secretscan.find(value) is not None else value


def keep(fields: dict[str, Any]) -> dict[str, Any]:
    """The record of a refusal as it enters history: every field of :data:`FIELDS`, a
    secret withheld (:func:`withhold`), a hidden character shown, each value clipped, the
    time now when none is given. A record gitstate wrote is what keeping it again gives."""
    kept = {name: withhold(name, fields) for name in FIELDS}
    for name in (*_TEXTS, "key"):  # a hidden character is kept, shown (field_problem)
        if isinstance(kept[name], str) and not _plain(kept[name]):
            kept[name] = textsafe.visible(kept[name])
    entry = {name: _clip(value) for name, value in kept.items()}
    entry["time"] = entry["time"] or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return entry


def written(entry: dict[str, Any], seq: int, previous: str | None,
            parent_time: int | None) -> tuple[bytes, bytes, int]:
    """One record's commit, byte for byte: (refusal.json, the message, the commit time).
    The message is a summary line, ``Gitstate-Refusal: <record>``, ``Gitstate-Seq: <n>``
    and, on a new generation's root, ``Gitstate-Previous: <head>``; the time is the
    record's, or the parent's when that is later (commit times never go back within a
    ref). ``refusals.record`` writes with it and ``refusals.check_chain`` re-derives with it."""
    data = (json.dumps(entry, ensure_ascii=False, indent=2, sort_keys=True) + "\n").encode()
    summary = f"refused {entry['op'] or 'write'} of {entry['key'] or '-'}: {entry['rule']}"
    message = (summary.replace("\n", " ")[:200] + "\n\nGitstate-Refusal: "
               + encode_json(entry) + f"\nGitstate-Seq: {seq}\n"
               + (f"{PREVIOUS_TRAILER}{previous}\n" if previous else "")).encode()
    when = int(datetime.fromisoformat(str(entry["time"]).replace("Z", "+00:00")).timestamp())
    return data, message, when if parent_time is None else max(when, parent_time)


def _plain(text: str) -> bool:
    """The text rules' test: nothing hidden; line breaks and tabs are text (a reason)."""
    return textsafe.plain(text.replace("\n", " ").replace("\t", " "))


def field_problem(entry: dict[str, Any]) -> str | None:
    """What in a record gitstate would not have written (None when nothing): the time is
    ISO 8601, the rule and the op are rule names, the key is a key (or ``runs/<id>``; any
    text under a ``key.*`` or ``secret.*`` rule, which refused the key itself), and the
    texts are bounded and hide nothing (``textsafe.plain``, line breaks allowed), as
    ``refusals.record`` keeps them."""
    when = entry.get("time")
    try:
        if not isinstance(when, str) or not _TIME_RE.fullmatch(when):
            raise ValueError
        datetime.fromisoformat(when.replace("Z", "+00:00"))
    except ValueError:
        return f"time {str(when)[:40]!r} is not an ISO 8601 time as gitstate writes it " \
               "(YYYY-MM-DDTHH:MM:SSZ)"
    for name in ("rule", "op"):
        value = entry.get(name)
        if not (value is None and name == "op") and not (
                isinstance(value, str) and len(value) <= 100 and _NAME_RE.fullmatch(value)):
            return f"{name} {str(value)[:40]!r} is not a rule name"
    key, rule = entry.get("key"), str(entry.get("rule"))
    if key is not None and not rule.startswith(("key.", "secret.")):
        try:
            if not (isinstance(key, str) and _RUN_KEY_RE.fullmatch(key)):
                check_key(key)
        except InvalidInput as exc:
            return f"key: {exc.message}"
    for name in (*_TEXTS, "key"):
        value = entry.get(name)
        if isinstance(value, dict) and list(value) == ["clipped"]:  # as _clip cuts it
            value = value["clipped"]
        if value is not None and not (isinstance(value, str) and len(value) <= _TEXT_MAX
                                      and _plain(value)):
            return f"{name} is not a plain bounded text"
    return None


def parse(message: bytes) -> dict[str, Any]:
    """The record a journal commit carries (ValueError naming what is wrong when it is
    not one gitstate would write)."""
    for line in message.decode("utf-8").splitlines():
        if line.startswith("Gitstate-Refusal: "):
            entry = json.loads(line[18:])
            if isinstance(entry, dict) and set(entry) == set(FIELDS):
                problem = field_problem(entry)
                if problem is not None:
                    raise ValueError(f"[refusals.bad_record] {problem}")
                return entry
    raise ValueError("not a refusal record")
