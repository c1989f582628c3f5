"""Input rules: what a key, value, reason, ttl and handoff may be.

Every write path (CLI, Python API, MCP) goes through these functions before anything is
computed, so a bad input is refused with the name of the rule and nothing is written.
The limits are documented in docs/design.md ("Input limits").
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NoReturn, cast

from . import secretscan, values
from .errors import HandoffTooLarge, InvalidInput
from .model import HANDOFF_STATUSES, Scalar, Value

KEY_MAX = 128
VALUE_MAX_CHARS = 1000
REASON_MAX_CHARS = 4000
ACTOR_MAX = 64
REQUEST_ID_MAX = 128
TTL_MAX_HOURS = 24 * 366
TEXT_INPUT_MAX_CHARS = 1 << 20  # any single text input, before collapsing or cutting
INT_LIMIT = 2**53  # JSON numbers beyond this lose precision in most readers

_KEY_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_ACTOR_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]*")
# git treats a line starting with "---" as the end of the message when it parses trailers.
_DIVIDER_RE = re.compile(r"^---(\s|$)", re.MULTILINE)


def check_key(key: object) -> str:
    """A key is a short ASCII name that can never be a path or a second line."""
    if not isinstance(key, str) or not key:
        raise InvalidInput("key must be a non-empty string", rule="key.empty")
    if len(key) > KEY_MAX:
        raise InvalidInput(f"key is {len(key)} characters; the limit is {KEY_MAX}",
                           rule="key.too_long")
    if not _KEY_RE.fullmatch(key):
        raise InvalidInput(
            f"key {key!r} has characters outside the safe set: ASCII letters, digits, '.', "
            "'_' and '-', not starting with '.' or '-'",
            rule="key.charset",
        )
    if ".." in key or key.endswith("."):
        raise InvalidInput(f"key {key!r} must not contain '..' or end with '.'",
                           rule="key.dots")
    check_secret(key, "the key name")  # a name is in every commit's tree and trailers
    return key


# Blank letters: category Lo, so not "format" characters, yet they print as nothing.
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0")
# Variation selectors: U+FE0E/U+FE0F pick text or emoji style after a symbol; the others
# (and the supplement, U+E0100-E01EF) carry no visible meaning and can smuggle bytes.
_VARIATION = frozenset(chr(c) for c in (*range(0xFE00, 0xFE0E), *range(0xE0100, 0xE01F0)))
COMBINING_RUN_MAX = 4


def _check_text(text: str, what: str, *, allow_newlines: bool) -> None:
    """Refuse what can hide or disguise content from the model or a person reading it:
    control characters, invisible and bidi ("format", Unicode category Cf: zero-width
    characters, bidi overrides, the tag block U+E0000-E007F, invisible operators
    U+2061-2064, the soft hyphen), blank letters, stray variation selectors, and combining
    marks that strike through or alter ASCII text and digits (a crossed-out 262 that reads as
    262 to a program)."""
    previous = ""
    run = 0
    # NFC first: an accent that composes with its letter (e + U+0301 = é) is ordinary text
    for ch in unicodedata.normalize("NFC", text):
        if ch in "\n\t" and allow_newlines:
            previous, run = ch, 0
            continue
        cat = unicodedata.category(ch)
        if cat == "Cs":
            raise InvalidInput(f"{what} contains a lone surrogate", rule=f"{what}.encoding")
        if cat == "Cc" or ch in "\u2028\u2029":
            raise InvalidInput(
                f"{what} contains a control character or line break (U+{ord(ch):04X})",
                rule=f"{what}.control",
            )
        if cat == "Cf" or ch in _BLANK_LETTERS or ch in _VARIATION:
            raise InvalidInput(
                f"{what} contains an invisible or text-direction character (U+{ord(ch):04X} "
                f"{unicodedata.name(ch, 'unnamed')}); it could hide text from the reader",
                rule=f"{what}.invisible",
            )
        if cat in ("Mn", "Me"):
            run += 1
            if unicodedata.combining(ch) == 1 or previous.isascii() or \
                    unicodedata.category(previous) == "Nd" or run > COMBINING_RUN_MAX:
                raise InvalidInput(
                    f"{what} has a combining mark (U+{ord(ch):04X} "
                    f"{unicodedata.name(ch, 'unnamed')}) on {previous!r}: overlays, marks on "
                    f"ASCII text or digits, and runs of over {COMBINING_RUN_MAX} marks "
                    "disguise what the text says",
                    rule=f"{what}.combining",
                )
            continue
        previous, run = ch, 0


def check_line(text: str, what: str, rule: str) -> None:
    """The text rule of reasons and values (:func:`_check_text`) for a one-line name that is
    not a key (a LangGraph thread id or namespace): refused under ``rule``."""
    try:
        _check_text(text, what, allow_newlines=False)
    except InvalidInput as exc:
        raise InvalidInput(exc.message, rule=rule) from None


# Unicode TS #39 confusables whose source is in the key alphabet (ASCII letters, digits,
# '.', '_', '-'), as skeleton rules: "0" looks like "O", "1" and "I" like "l", and "m",
# "d", "w" like "rn", "cl", "vv". Keys are compared after case folding too (case twins).
_CONFUSABLE_CHARS = str.maketrans({"0": "o", "1": "l", "I": "l", "|": "l"})
_CONFUSABLE_SEQUENCES = (("m", "rn"), ("d", "cl"), ("w", "vv"))
# For names beyond the key alphabet (thread ids): after NFKC (full-width and mathematical
# letters, odd spaces), TS #39's Cyrillic and Greek letters that are drawn as Latin ones.
_HOMOGLYPHS = str.maketrans(
    "\u0430\u0432\u0435\u043e\u0440\u0441\u0443\u0445\u0455\u0456\u0458\u0501\u04bb\u051b"
    "\u051d\u04cf\u0410\u0412\u0415\u041a\u041c\u041d\u041e\u0420\u0421\u0422\u0425\u0423"
    "\u0405\u0406\u0408\u03b1\u03bf\u03c1\u03bd\u03b9\u03ba\u03c5\u03c7\u0391\u0392\u0395"
    "\u0396\u0397\u0399\u039a\u039c\u039d\u039f\u03a1\u03a4\u03a5\u03a7",
    "aBeopcyxsijdhqwlABEKMHOPCTXYSIJaopvikuxABEZHIKMNOPTYX")


@functools.lru_cache(maxsize=1 << 16)
def skeleton(key: str) -> str:
    """The confusable skeleton of a key: two keys with one skeleton look alike."""
    if not key.isascii():
        key = unicodedata.normalize("NFKC", key).translate(_HOMOGLYPHS)
    text = key.translate(_CONFUSABLE_CHARS).lower()
    for single, double in _CONFUSABLE_SEQUENCES:
        text = text.replace(single, double)
    return text


def check_twin(key: str, existing: Iterable[str], what: str = "key") -> None:
    """A new key must not differ from an existing one only in case or by look-alike
    characters (``stop_Ioss.2317`` beside ``stop_loss.2317``). ``what``: the kind of name
    (``thread``: a LangGraph thread id), which names the rules (``<what>.case``,
    ``<what>.confusable``)."""
    noun = "key" if what == "key" else f"{what} id"
    folded, shape = key.casefold(), skeleton(key)
    for other in existing:
        if other == key:
            continue
        if other.casefold() == folded:
            raise InvalidInput(f"{noun} {key!r} differs from existing {noun} {other!r} only "
                               f"in case; use the existing {noun}", rule=f"{what}.case",
                               key=key, existing=other)
        if skeleton(other) == shape:
            raise InvalidInput(f"{noun} {key!r} looks like existing {noun} {other!r} "
                               "(confusable characters such as 0/O, 1/l/I, rn/m, a Cyrillic "
                               f"or Greek letter for a Latin one); use the existing {noun} or a "
                               "clearly different name", rule=f"{what}.confusable", key=key,
                               existing=other)


def check_value(value: object, key: str | None = None) -> Value:
    """A value is a JSON scalar (one line of text, a finite number or a boolean), or an array
    or object of values within the limits of gitstate/core/values.py, each string inside under
    the same rules as a scalar (an empty string or null is allowed inside). An error names
    the path of the offending element (``facts.window_ok``), from ``key`` when given."""
    if isinstance(value, list | dict):
        try:
            return cast("Value", values.check(value, key or "value", _leaf))
        except values.ShapeError as exc:
            raise InvalidInput(f"value {exc}" if key is None else str(exc), rule=exc.rule,
                               path=exc.path) from None
    return _scalar(value)


def _leaf(value: object, path: str) -> object:
    if value is None:
        return value
    try:
        return _scalar(value, blank_ok=True)
    except InvalidInput as exc:
        raise InvalidInput(f"{path}: {exc.message}", rule=exc.rule, path=path) from None


def _scalar(value: object, blank_ok: bool = False) -> Scalar:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) > INT_LIMIT:
            raise InvalidInput(f"integer {value} is beyond ±2**53", rule="value.range")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput("value must be a finite number", rule="value.range")
        return value
    if isinstance(value, str):
        if not value.strip() and not blank_ok:
            raise InvalidInput("value must not be empty; use clear to retire a key",
                               rule="value.empty")
        if len(value) > VALUE_MAX_CHARS:
            raise InvalidInput(
                f"value is {len(value)} characters; the limit is {VALUE_MAX_CHARS}",
                rule="value.too_long",
            )
        _check_text(value, "value", allow_newlines=False)
        return value
    raise InvalidInput(
        f"value must be a string, number, boolean, array or object, not "
        f"{type(value).__name__}", rule="value.type",
    )


def check_secret(text: str, where: str, path: str | None = None) -> None:
    """Refuse ``text`` when it looks like it holds a secret (secretscan.py), naming the kind
    and where, never echoing it: git cannot forget a commit."""
    found = secretscan.scan(text)
    if found is not None:
        refuse_secret(where, found, path)


def refuse_secret(where: str, found: secretscan.Finding, path: str | None = None) -> NoReturn:
    """The refusal of a suspected secret: its kind and where, never the text itself."""
    details = {"path": path} if path else {}
    raise InvalidInput(
        f"{where} looks like it holds {found.label} (characters {found.start + 1}-{found.end}); "
        "nothing secret may enter the history, which git never forgets. Keep the secret "
        "elsewhere and pass a reference; if it is not a secret, the key's schema declaration "
        "may say `secrets: allow` (docs/security.md).",
        rule=f"secret.{found.kind}", **details)


def check_reason(reason: object) -> str:
    """A reason is required; it becomes the commit message verbatim (trimmed)."""
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput("a reason is required and must not be blank", rule="reason.empty")
    reason = reason.strip()
    if len(reason) > REASON_MAX_CHARS:
        raise InvalidInput(
            f"reason is {len(reason)} characters; the limit is {REASON_MAX_CHARS}",
            rule="reason.too_long",
        )
    _check_text(reason, "reason", allow_newlines=True)
    check_secret(reason, "the reason")
    if _DIVIDER_RE.search(reason):
        raise InvalidInput("a reason line must not start with '---' (git reads it as the "
                           "end of the message)", rule="reason.divider")
    return reason


def check_actor(actor: object) -> str:
    if not isinstance(actor, str) or len(actor) > ACTOR_MAX or not _ACTOR_RE.fullmatch(actor):
        raise InvalidInput(
            "actor must be 1-64 characters of ASCII letters, digits and '._:@-'",
            rule="actor.charset",
        )
    check_secret(actor, "the actor")
    return actor


def check_request_id(request_id: object) -> str:
    """A caller's request id travels in a trailer: printable, no spaces, no secret."""
    if not isinstance(request_id, str) or not 1 <= len(request_id) <= REQUEST_ID_MAX or any(
            c.isspace() or not c.isprintable() for c in request_id):
        raise InvalidInput(f"request_id must be 1-{REQUEST_ID_MAX} printable characters "
                           "without spaces", rule="request.id")
    check_secret(request_id, "the request id")
    return request_id


def check_ttl(ttl_hours: object) -> float | None:
    if ttl_hours is None:
        return None
    if isinstance(ttl_hours, bool) or not isinstance(ttl_hours, int | float):
        raise InvalidInput("ttl_hours must be a number", rule="ttl.type")
    if not math.isfinite(ttl_hours) or ttl_hours <= 0:
        raise InvalidInput("ttl_hours must be greater than 0", rule="ttl.range")
    if ttl_hours > TTL_MAX_HOURS:
        raise InvalidInput(f"ttl_hours must be at most {TTL_MAX_HOURS} (366 days)",
                           rule="ttl.range")
    return float(ttl_hours)


@dataclass(frozen=True)
class HandoffInput:
    """A validated handoff, ready to store; ``truncated`` tells the caller it was cut."""

    note: str
    status: str | None
    next_steps: str | None
    evidence: str | None
    blocker: str | None
    truncated: bool


def check_handoff(
    note: str | None,
    status: str | None,
    next_steps: str | None,
    evidence: str | None,
    blocker: str | None,
    *,
    plain_max_chars: int,
    max_bytes: int,
) -> HandoffInput:
    """Seed 000's rules: plain notes are collapsed and cut; structured ones refuse whole."""
    texts = {"note": note, "next_steps": next_steps, "evidence": evidence, "blocker": blocker}
    for name, text in texts.items():
        if text is None:
            continue
        if not isinstance(text, str):
            raise InvalidInput(f"{name} must be a string", rule="handoff.type")
        if len(text) > TEXT_INPUT_MAX_CHARS:
            raise InvalidInput(f"{name} is over {TEXT_INPUT_MAX_CHARS} characters",
                               rule="handoff.too_long")
        _check_text(text, "handoff", allow_newlines=True)
        check_secret(text, f"the handoff's {name}")
    structured = any(t is not None for t in (next_steps, evidence, blocker))
    if status is None and structured:
        raise InvalidInput(
            "status is required when next_steps, evidence or blocker is given "
            "(continue, complete or blocked)",
            rule="handoff.status_required",
        )
    if status is None:
        collapsed = " ".join((note or "").split())
        if not collapsed:
            raise InvalidInput("the handoff note is empty", rule="handoff.empty")
        truncated = len(collapsed) > plain_max_chars
        if truncated:
            collapsed = collapsed[: plain_max_chars - 1].rstrip() + "…"
        return HandoffInput(collapsed, None, None, None, None, truncated)

    if status not in HANDOFF_STATUSES:
        raise InvalidInput(f"status must be one of {', '.join(HANDOFF_STATUSES)}, not "
                           f"{status!r}", rule="handoff.status")
    has = {k: bool(v and v.strip()) for k, v in texts.items()}
    if status == "continue":
        if not has["next_steps"]:
            raise InvalidInput("status continue requires non-empty next_steps",
                               rule="handoff.continue")
        if blocker is not None:
            raise InvalidInput("status continue does not allow a blocker",
                               rule="handoff.continue")
    elif status == "complete":
        if not has["evidence"]:
            raise InvalidInput("status complete requires non-empty evidence: done must not "
                               "be self-declared", rule="handoff.complete")
        if blocker is not None or next_steps is not None:
            raise InvalidInput("status complete allows neither blocker nor next_steps",
                               rule="handoff.complete")
    elif not has["blocker"]:
        raise InvalidInput("status blocked requires a non-empty blocker",
                           rule="handoff.blocked")
    total = sum(len(t.encode("utf-8")) for t in texts.values() if t)
    if total > max_bytes:
        raise HandoffTooLarge(
            f"structured handoff is {total} UTF-8 bytes; the limit is {max_bytes} "
            "([memory] working_state_handoff_max_bytes). Nothing was written.",
            size=total, limit=max_bytes,
        )
    return HandoffInput((note or "").strip(), status, next_steps, evidence, blocker, False)


FUTURE_SKEW_SECONDS = 300  # a commit dated later than this past the checker's clock


def time_problem(author_time: int, commit_time: int, previous_time: int | None,
                 now: float) -> tuple[str, str] | None:
    """The clock rule of every namespace, as (rule, message) or None: within a ref, commit
    times never go back, and no time runs more than ``FUTURE_SKEW_SECONDS`` ahead of the
    receiver's clock (expiries, deadlines and TTLs are then judged at those times)."""
    if previous_time is not None and commit_time < previous_time:
        return ("time.backwards", "dated before its parent: commit times within a ref never "
                "go back, so that --at always names one state")
    if max(commit_time, author_time) > now + FUTURE_SKEW_SECONDS:
        return ("time.future", "dated "
                f"{datetime.fromtimestamp(max(commit_time, author_time), UTC):%Y-%m-%d %H:%M}"
                f" UTC — more than {FUTURE_SKEW_SECONDS} s in the future of this machine's "
                "clock")
    return None
