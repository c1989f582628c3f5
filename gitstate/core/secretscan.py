"""Nothing secret enters history: every text that reaches a git object or a ref name is
scanned before it is committed, because git cannot forget (a secret in one commit is in every
clone for ever).

What is refused, each under its own rule (``secret.<kind>``), with where it was found and
never the matched text:

* ``private_key``: a PEM / OpenSSH / PGP private-key block header;
* ``aws_access_key``: an AWS access key id (``AKIA``/``ASIA``... and 16 more) and a secret
  access key assignment;
* ``github_token``, ``gitlab_token``, ``slack_token`` (tokens and incoming-webhook URLs);
* ``jwt``: three base64url parts, the first two JSON objects (``eyJ``);
* ``assignment``: ``password=`` / ``secret:`` / ``token=`` / ``api_key=`` ... followed by a
  value of 6 or more characters that is not a placeholder (``***``, ``<redacted>``, ``none``);
* ``high_entropy``: a run of 32+ letters and digits mixing upper case, lower case and digits,
  with a Shannon entropy of at least 4 bits a character and hardly any word-like runs (random
  keys; hex digests such as git object ids or sha256 sums are all one case and pass, and so
  do CamelCase identifiers and paths made of words);
* ``hex_encoded``: a run of hex digits that decodes to printable text which is itself a
  secret by the rules above or looks random (a token of any length from 8 characters, hex
  encoded to slip past them). A digest decodes to random bytes, not text, and passes.

Beyond one text: :func:`find` walks a JSON-like value (dict keys included) and
:func:`scan_parts` finds a secret split across adjacent texts (two keys' values, two
elements of a list) that no part holds alone. :func:`scan_bytes` scans serialized data
(a checkpoint's bytes) as text, and :func:`replace` rebuilds a value with every string that
trips the scan replaced (for a redacting caller).

A false positive has one way out, in schema.yaml, reviewed like any schema change: a key
may declare ``secrets: allow`` (values of that key are not scanned; reasons still are). The
patterns are documented with their near misses in docs/security.md. Pure and stdlib-only.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .values import join

_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
# (kind, label, pattern, run on the ASCII-lowered text, characters that must not precede
# the match). Each pattern starts with a literal and the preceding character is checked by
# hand: a look-behind or a case-insensitive alternation at the front makes the regex
# engine try every position (40 times slower on an ordinary state).
_PATTERNS: tuple[tuple[str, str, re.Pattern[str], bool, str], ...] = (
    ("private_key", "a private key block",
     re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"), False, ""),
    ("aws_access_key", "an AWS access key id",
     re.compile(r"A(?:KIA|SIA|BIA|CCA|GPA|IDA|ROA|NPA|NVA|PKA)[A-Z2-7]{16}(?![A-Z0-9])"),
     False, _ALNUM[:26] + _ALNUM[52:]),
    ("aws_access_key", "an AWS secret access key",
     re.compile(r"aws_?secret_?access_?key[\"']?\s*[:=]\s*[\"']?[A-Za-z0-9/+]{40}"), True, ""),
    ("github_token", "a GitHub token",
     re.compile(r"g(?:h[pousr]_[A-Za-z0-9]{36,255}|ithub_pat_[A-Za-z0-9_]{60,})"), False,
     _ALNUM + "_"),
    ("gitlab_token", "a GitLab token",
     re.compile(r"gl(?:pat|dt|rt|soat|ptt)-[A-Za-z0-9_-]{20,}"), False, _ALNUM + "_"),
    ("slack_token", "a Slack token",
     re.compile(r"xox[abposr]-[A-Za-z0-9-]{10,}"), False, _ALNUM),
    ("slack_token", "a Slack webhook URL",
     re.compile(r"hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9_/]{20,}"), False, ""),
    ("jwt", "a JSON Web Token",
     re.compile(r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), False,
     _ALNUM + "_-"),
    # client_secret, access_token and auth_token match at their last word
    ("assignment", "a password, secret or token assignment",
     re.compile(r"(?:pass(?:word|wd)|pwd|secret|token|api_?key|private_key)[\"']?\s*[:=]"
                r"\s*[\"']?(?P<value>[^\s\"',;]{6,})"), True, _ALNUM),
)
_LOWER = str.maketrans(_ALNUM[:26], _ALNUM[26:52])  # ASCII only: offsets stay the same
_PLACEHOLDER = re.compile(r"(?i)^(?:\*+|x+|\.+|<[^>]*>|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|none|null|"
                          r"redacted|\[redacted\]|changeme|example|placeholder|your[_-]?\w*)$")
_RUN = re.compile(r"[A-Za-z0-9+/_-]{16,}")  # where a random run or a hex run can be
ENTROPY_MIN = 4.0
_WORDLIKE = re.compile(r"[a-z]{4,}|[A-Z][a-z]{3,}")
_HEX = re.compile(r"(?<![0-9A-Fa-f])[0-9A-Fa-f]{16,}")  # 8 or more bytes as hex
HEX_TOKEN_MIN = 8  # decoded characters
_HEX_DEPTH = 3  # hex of hex of hex: deeper nesting is not an accident either way
_SHORT = 6  # no rule matches fewer characters
SPLIT_PART_MIN = 12  # a random-looking run split across texts: each fragment's least length
SPLIT_RUN_MAX = 256  # ... and the longest run of fragments tried
SPLIT_SCAN = 512  # the text scanned from each part's start: longer than any known format
_FRAGMENT = re.compile(r"[A-Za-z0-9+/_-]{" + str(SPLIT_PART_MIN) + ",}")


class Finding:
    """One suspected secret: its kind (the rule's suffix), what it looks like, and where
    (character offsets in the scanned text)."""

    __slots__ = ("end", "kind", "label", "start")

    def __init__(self, kind: str, label: str, start: int, end: int) -> None:
        self.kind, self.label, self.start, self.end = kind, label, start, end

    def __repr__(self) -> str:  # never the text: only what and where
        return f"Finding({self.kind!r}, {self.start}-{self.end})"


def scan(text: str) -> Finding | None:
    """The first suspected secret in ``text``, or None."""
    return next(_findings(text, 0), None)


def _findings(text: str, depth: int) -> Iterator[Finding]:
    if len(text) < _SHORT:
        return
    lowered = text.translate(_LOWER)
    for kind, label, pattern, lower, not_after in _PATTERNS:
        for match in pattern.finditer(lowered if lower else text):
            start = match.start()
            if start and text[start - 1] in not_after:
                continue
            if kind == "assignment" and _PLACEHOLDER.match(match.group("value")):
                continue
            yield Finding(kind, label, start, match.end())
    for run in _RUN.finditer(text):  # one pass finds both kinds' candidates
        word = run.group()
        if len(word) >= 32 and _random_looking(word):
            yield Finding("high_entropy", "a long random-looking string (a key or token?)",
                          run.start(), run.end())
        if depth < _HEX_DEPTH:
            for match in _HEX.finditer(word):  # a maximal run: an odd one is no encoding
                if len(match.group()) % 2 == 0 and _hex_secret(match.group(), depth):
                    yield Finding("hex_encoded", "a hex-encoded token",
                                  run.start() + match.start(), run.start() + match.end())


def _hex_secret(run: str, depth: int) -> bool:
    """A hex run that decodes to printable text holding a secret, or to a random-looking
    token of any length (a digest decodes to bytes that are not text)."""
    raw = bytes.fromhex(run)
    if not all(0x20 <= b < 0x7F for b in raw):
        return False
    decoded = raw.decode("ascii")
    if next(_findings(decoded, depth + 1), None) is not None:
        return True
    return _short_random(decoded)


def _short_random(word: str) -> bool:
    """A token of 8+ printable characters without spaces that mixes at least three of
    lower case, upper case, digits and punctuation, nearly every character distinct."""
    if len(word) < HEX_TOKEN_MIN or " " in word:
        return False
    classes = (any(c.islower() for c in word) + any(c.isupper() for c in word)
               + any(c.isdigit() for c in word) + any(not c.isalnum() for c in word))
    if classes < 3 or sum(map(len, _WORDLIKE.findall(word))) >= 0.3 * len(word):
        return False
    entropy = _entropy(word)
    return entropy >= min(ENTROPY_MIN, 0.8 * math.log2(len(word)))


def _entropy(word: str) -> float:
    counts = Counter(word)
    return -sum(n / len(word) * math.log2(n / len(word)) for n in counts.values())


def _mixed(word: str) -> bool:
    return any(c.islower() for c in word) and any(c.isupper() for c in word) and \
        any(c.isdigit() for c in word)


def _random_looking(word: str) -> bool:
    """Mixed case and digits, a high entropy, and almost no word-like runs: random keys
    are flagged (about 85% of random 32-40 character tokens; known formats have their own
    patterns above), CamelCase identifiers and paths made of words are not."""
    if not _mixed(word):
        return False  # hex digests, words, numbers: one case, or no digits
    words = sum(len(run) for run in _WORDLIKE.findall(word))
    return _entropy(word) >= ENTROPY_MIN and words < 0.3 * len(word)


def scan_parts(parts: Sequence[str]) -> tuple[int, int, Finding] | None:
    """A secret that adjacent texts make together and none holds alone: ``(first, last,
    finding)``, the indices of the first and last part it spans (``first < last``) and the
    finding's offsets in the joined text, or None.

    A known format or a hex encoding counts wherever it starts and ends; a random-looking
    run only when every part it touches is wholly made of token characters and at least
    :data:`SPLIT_PART_MIN` long (fragments of one token, not a run of short names and ids).
    """
    if len(parts) < 2:
        return None
    starts, offset = [], 0
    for part in parts:
        starts.append(offset)
        offset += len(part)
    # Scanned from each part's start, over the parts that follow it up to SPLIT_SCAN
    # characters: a format anchored at a word boundary ("ghp_...") must not be hidden by the
    # word character the part before it happens to end with.
    for k in range(len(parts) - 1):
        window, end = parts[k], k + 1
        while end < len(parts) and len(window) < SPLIT_SCAN:
            window += parts[end]
            end += 1
        for found in _findings(window, 0):
            first = _index(starts, starts[k] + found.start)
            last = _index(starts, starts[k] + found.end - 1)
            if first == last:
                continue  # inside one part: that part's own scan reports it
            # a random run has its own rule below; an assignment's value running on into
            # the next text ("pwd=abc" beside "pwd=abc") is no token cut in two
            if found.kind not in ("high_entropy", "assignment"):
                return first, last, Finding(found.kind, found.label, starts[k] + found.start,
                                            starts[k] + found.end)
    return _random_split(parts, starts)


def _random_split(parts: Sequence[str], starts: list[int]) -> tuple[int, int, Finding] | None:
    """Consecutive whole fragments (each at least SPLIT_PART_MIN token characters mixing
    upper case, lower case and digits, as any part of a random token does, and no digest
    does) that make a random-looking run together; tried from each fragment, so that a neighbour
    made of words does not dilute the run."""
    fragment = [_FRAGMENT.fullmatch(p) is not None and _mixed(p) for p in parts]
    for first in range(len(parts)):
        if not fragment[first]:
            continue
        text = parts[first]
        last = first + 1
        while last < len(parts) and fragment[last] and len(text) < SPLIT_RUN_MAX:
            text += parts[last]
            if len(text) >= 32 and _random_looking(text):
                return first, last, Finding(
                    "high_entropy", "a long random-looking string (a key or token?)",
                    starts[first], starts[first] + len(text))
            last += 1
    return None


def _index(starts: list[int], offset: int) -> int:
    low, high = 0, len(starts) - 1
    while low < high:  # the last start at or before offset
        mid = (low + high + 1) // 2
        if starts[mid] <= offset:
            low = mid
        else:
            high = mid - 1
    return low


def strings(value: object, path: str = "") -> Iterator[tuple[str, str]]:
    """Every text in a JSON-like value with its element path (``facts.inner[1].deep``):
    strings, dict keys (``a name in facts.inner``: the path never repeats the name), bytes
    decoded as
    UTF-8 with replacement; numbers and booleans hold no text."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, bytes | bytearray | memoryview):
        yield path, bytes(value).decode("utf-8", "replace")
    elif isinstance(value, dict):
        for k, v in value.items():
            name = k if isinstance(k, str) else str(k)
            yield (f"a name in {path}" if path else "a name"), name  # never the name
            yield from strings(v, join(path, name))
    elif isinstance(value, list | tuple | set | frozenset):
        for i, v in enumerate(value):
            yield from strings(v, join(path, i))


def value_strings(value: object, path: str = "") -> Iterator[tuple[str, str]]:
    """:func:`strings` without the names of a structure's members: the texts a secret can
    be split across (a member's name between two halves would hide the join)."""
    return ((where, text) for where, text in strings(value, path)
            if not where.startswith("a name"))


def find(value: object, path: str = "") -> tuple[str, Finding] | None:
    """The first suspected secret anywhere in a JSON-like value, as (where, finding): a
    string, a dict key, or a secret split across adjacent strings of it (where names the
    first and the last)."""
    texts = list(strings(value, path))
    for where, text in texts:
        found = scan(text)
        if found is not None:
            return where, found
    values = list(value_strings(value, path))
    split = scan_parts([text for _, text in values])
    if split is not None:
        first, last, found = split
        return f"{values[first][0]} to {values[last][0]} together", found
    return None


def scan_bytes(data: bytes) -> Finding | None:
    """Serialized data (a checkpoint, a pending write) scanned as UTF-8 text: the strings a
    serializer stores inside are found whatever its framing bytes around them."""
    return scan(data.decode("utf-8", "replace"))


def replace(value: Any, fn: Callable[[str], str]) -> Any:
    """``value`` rebuilt (dicts, lists, tuples) with each string that trips the scan (a
    dict key too) replaced by ``fn(string)``; everything else is kept as it is."""
    if isinstance(value, str):
        return fn(value) if scan(value) is not None else value
    if isinstance(value, dict):
        return {replace(k, fn): replace(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [replace(v, fn) for v in value]
    if isinstance(value, tuple):
        return tuple(replace(v, fn) for v in value)
    return value
