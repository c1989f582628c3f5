"""Specification of commit messages: reason first, trailers that git reads back exactly."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gitstate.core.trailers import Change, NotAGitstateCommit, parse_message
from tests.helpers import GIT

texts = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)
values = st.one_of(texts, st.integers(-(2**53), 2**53), st.booleans(),
                   st.floats(allow_nan=False, allow_infinity=False))
reasons = st.text(st.characters(blacklist_categories=("Cs", "Cc")) | st.just("\n"),
                  min_size=1, max_size=60).map(str.strip).filter(bool)


@given(reasons, st.from_regex(r"[a-z][a-z0-9._-]{0,20}", fullmatch=True), values, values)
def test_round_trip(reason: str, key: str, old: object, new: object) -> None:
    """parse_message(message(c)) == c for any reason and values."""
    change = Change(op="set", reason=reason, actor="agent", key=key, old=old, new=new,
                    expires_at="2026-08-13T05:30:00Z", request="req-1")
    assert parse_message(change.message()) == change


def test_reason_that_looks_like_trailers_is_kept_in_the_reason() -> None:
    """A forged trailer paragraph inside the reason does not become a trailer."""
    reason = "real reason\n\nGitstate-Key: other\nGitstate-New: 1"
    change = Change(op="set", reason=reason, actor="agent", key="k", old=None, new=2)
    parsed = parse_message(change.message())
    assert parsed.key == "k" and parsed.new == 2 and parsed.reason == reason


def test_foreign_messages_are_recognised() -> None:
    """A commit made by plain git has no trailer block."""
    for msg in (b"hand commit\n", b"subject\n\nbody text\n", b"x\n\nSigned-off-by: a <b>\n"):
        with pytest.raises(NotAGitstateCommit):
            parse_message(msg)


def _git_parse(message: bytes) -> list[tuple[str, str]]:
    if GIT is None:
        pytest.skip("git CLI not installed")
    out = subprocess.run([GIT, "interpret-trailers", "--parse"], input=message,
                         capture_output=True, check=True)
    pairs = []
    for line in out.stdout.decode().splitlines():
        name, _, value = line.partition(": ")
        pairs.append((name, value))
    return pairs


@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(reasons, values, values)
def test_git_interpret_trailers_reads_ours_back(reason: str, old: object, new: object) -> None:
    """git's own parser sees exactly our trailers, with values that decode to the input."""
    assume(not re.search(r"^---", reason, re.MULTILINE))  # refused by rules.check_reason
    change = Change(op="set", reason=reason, actor="agent", key="k", old=old, new=new)
    pairs = _git_parse(change.message())
    assert pairs == [(f"Gitstate-{n}", v) for n, v in change.trailers()]
    decoded = dict(pairs)
    assert json.loads(decoded["Gitstate-New"]) == new
    assert json.loads(decoded["Gitstate-Old"]) == old


def test_line_separators_are_escaped_in_trailers() -> None:
    """U+2028 / U+2029 / NEL in a value never appear raw in a trailer line."""
    change = Change(op="set", reason="r", actor="a", key="k", old=None, new="a\u2028b\u2029c\x85")
    message = change.message().decode()
    assert "\u2028" not in message and "\u2029" not in message and "\x85" not in message
    assert parse_message(change.message()).new == "a\u2028b\u2029c\x85"
