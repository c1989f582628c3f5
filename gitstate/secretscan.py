"""Nothing secret enters history: every value, reason and note is scanned before it is
committed, because git cannot forget (a secret in one commit is in every clone for ever).

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
  do CamelCase identifiers and paths made of words).

A false positive has one way out, in schema.yaml, reviewed like any schema change: a key
may declare ``secrets: allow`` (values of that key are not scanned; reasons still are). The
patterns are documented with their near misses in docs/security.md. Pure and stdlib-only.
"""

from __future__ import annotations

import math
import re
from collections import Counter

_PATTERNS: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("private_key", "a private key block",
     re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")),
    ("aws_access_key", "an AWS access key id",
     re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|ANPA|ANVA|APKA)"
                r"[A-Z2-7]{16}(?![A-Z0-9])")),
    ("aws_access_key", "an AWS secret access key",
     re.compile(r"(?i)aws_?secret_?access_?key[\"']?\s*[:=]\s*[\"']?[A-Za-z0-9/+]{40}")),
    ("github_token", "a GitHub token",
     re.compile(r"(?<![A-Za-z0-9_])(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{60,})")),
    ("gitlab_token", "a GitLab token",
     re.compile(r"(?<![A-Za-z0-9_])gl(?:pat|dt|rt|soat|ptt)-[A-Za-z0-9_-]{20,}")),
    ("slack_token", "a Slack token",
     re.compile(r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}")),
    ("slack_token", "a Slack webhook URL",
     re.compile(r"hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9_/]{20,}")),
    ("jwt", "a JSON Web Token",
     re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\."
                r"[A-Za-z0-9_-]{8,}")),
    ("assignment", "a password, secret or token assignment",
     re.compile(r"(?i)(?<![A-Za-z0-9])(?:password|passwd|pwd|secret|client_secret|token|"
                r"access_token|auth_token|api_?key|private_key)[\"']?\s*[:=]\s*[\"']?"
                r"(?P<value>[^\s\"',;]{6,})")),
)
_PLACEHOLDER = re.compile(r"(?i)^(?:\*+|x+|\.+|<[^>]*>|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|none|null|"
                          r"redacted|\[redacted\]|changeme|example|placeholder|your[_-]?\w*)$")
_CANDIDATE = re.compile(r"[A-Za-z0-9+/_-]{32,}")
ENTROPY_MIN = 4.0
_WORDLIKE = re.compile(r"[a-z]{4,}|[A-Z][a-z]{3,}")


class Finding:
    """One suspected secret: its kind (the rule's suffix), what it looks like, and where
    (character offsets in the scanned text)."""

    __slots__ = ("end", "kind", "label", "start")

    def __init__(self, kind: str, label: str, start: int, end: int) -> None:
        self.kind, self.label, self.start, self.end = kind, label, start, end


def scan(text: str) -> Finding | None:
    """The first suspected secret in ``text``, or None."""
    if len(text) < 6:
        return None
    for kind, label, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            if kind == "assignment" and _PLACEHOLDER.match(match.group("value")):
                continue
            return Finding(kind, label, match.start(), match.end())
    for match in _CANDIDATE.finditer(text):
        word = match.group()
        if _random_looking(word):
            return Finding("high_entropy", "a long random-looking string (a key or token?)",
                           match.start(), match.end())
    return None


def _random_looking(word: str) -> bool:
    """Mixed case and digits, a high entropy, and almost no word-like runs: random keys
    are flagged (about 85% of random 32-40 character tokens; known formats have their own
    patterns above), CamelCase identifiers and paths made of words are not."""
    if not (any(c.islower() for c in word) and any(c.isupper() for c in word)
            and any(c.isdigit() for c in word)):
        return False  # hex digests, words, numbers: one case, or no digits
    counts = Counter(word)
    entropy = -sum(n / len(word) * math.log2(n / len(word)) for n in counts.values())
    words = sum(len(run) for run in _WORDLIKE.findall(word))
    return entropy >= ENTROPY_MIN and words < 0.3 * len(word)
