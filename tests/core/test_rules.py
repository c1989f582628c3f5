"""Specification of the input rules: every bad input is refused with the rule's name."""

from __future__ import annotations

import pytest

from gitstate.core import rules
from gitstate.core.errors import HandoffTooLarge, InvalidInput


@pytest.mark.parametrize(
    ("key", "rule"),
    [
        ("", "key.empty"),
        ("../etc/passwd", "key.charset"),
        ("a/b", "key.charset"),
        (".hidden", "key.charset"),
        ("-flag", "key.charset"),
        ("a..b", "key.dots"),
        ("trailing.", "key.dots"),
        ("k" * 129, "key.too_long"),
        ("stop loss", "key.charset"),
        ("a\nb", "key.charset"),
        ("停損", "key.charset"),
        ("a\u202eb", "key.charset"),
        ("a\x00b", "key.charset"),
    ],
)
def test_bad_keys_are_refused(key: str, rule: str) -> None:
    """Keys outside the safe charset, with dots misused, or too long are refused."""
    with pytest.raises(InvalidInput) as err:
        rules.check_key(key)
    assert err.value.rule == rule


@pytest.mark.parametrize("key", ["stop_loss.2317", "position_cap", "a", "A-1_b.c", "k" * 128])
def test_good_keys_pass(key: str) -> None:
    """Ordinary dotted keys are accepted unchanged."""
    assert rules.check_key(key) == key


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("", "value.empty"),
        ("   ", "value.empty"),
        ("a\nb", "value.control"),
        ("a\rb", "value.control"),
        ("a\u2028b", "value.control"),
        ("a\x00b", "value.control"),
        ("\ud800", "value.encoding"),
        ("x" * 1001, "value.too_long"),
        (float("nan"), "value.range"),
        (float("inf"), "value.range"),
        (2**60, "value.range"),
        (None, "value.type"),
        ([object()], "value.type"),
        ({"a": {1, 2}}, "value.type"),
        ({"a b": 1}, "value.object_key"),
        ({"": 1}, "value.object_key"),
        ([[[[[[[[[1]]]]]]]]], "value.depth"),
        (list(range(257)), "value.size"),
        (["x" * 1000] * 5, "value.too_long"),
        ({"a": "x\u202ey"}, "value.invisible"),
        ({"a": "line\nbreak"}, "value.control"),
        ([float("nan")], "value.range"),
    ],
)
def test_bad_values_are_refused(value: object, rule: str) -> None:
    """Values must be one-line JSON scalars within limits."""
    with pytest.raises(InvalidInput) as err:
        rules.check_value(value)
    assert err.value.rule == rule


def test_reason_rules() -> None:
    """A reason is required, trimmed, may span lines, and cannot hold a git divider."""
    assert rules.check_reason("  why \n") == "why"
    assert rules.check_reason("line one\nline two") == "line one\nline two"
    for bad, rule in [("", "reason.empty"), ("  \n ", "reason.empty"), (None, "reason.empty"),
                      ("a\x1b[31m", "reason.control"), ("x" * 4001, "reason.too_long"),
                      ("why\n---\nGitstate-Key: x", "reason.divider")]:
        with pytest.raises(InvalidInput) as err:
            rules.check_reason(bad)
        assert err.value.rule == rule


@pytest.mark.parametrize("ttl", [0, -1, 10**9, float("inf"), float("nan"), True, "5"])
def test_bad_ttl_is_refused(ttl: object) -> None:
    """ttl_hours must be a positive number of at most 366 days."""
    with pytest.raises(InvalidInput):
        rules.check_ttl(ttl)


def test_ttl_accepts_fractions() -> None:
    """Half an hour is a valid ttl."""
    assert rules.check_ttl(0.5) == 0.5
    assert rules.check_ttl(None) is None


def _handoff(**kw: object) -> rules.HandoffInput:
    args: dict[str, object] = {"note": None, "status": None, "next_steps": None,
                               "evidence": None, "blocker": None}
    args.update(kw)
    return rules.check_handoff(**args, plain_max_chars=1200, max_bytes=16384)  # type: ignore[arg-type]


def test_plain_handoff_is_collapsed_and_cut() -> None:
    """Whitespace collapses; past ~1200 characters the note is cut and flagged."""
    short = _handoff(note="  a \n\n b\t c ")
    assert short.note == "a b c" and not short.truncated
    long = _handoff(note="字" * 5000)
    assert long.truncated and len(long.note) == 1200 and long.note.endswith("…")


@pytest.mark.parametrize(
    ("kw", "rule"),
    [
        ({"next_steps": "x"}, "handoff.status_required"),
        ({"evidence": "x"}, "handoff.status_required"),
        ({"status": "paused", "note": "x"}, "handoff.status"),
        ({"status": "continue"}, "handoff.continue"),
        ({"status": "continue", "next_steps": "  "}, "handoff.continue"),
        ({"status": "continue", "next_steps": "x", "blocker": "y"}, "handoff.continue"),
        ({"status": "complete"}, "handoff.complete"),
        ({"status": "complete", "evidence": "e", "next_steps": "n"}, "handoff.complete"),
        ({"status": "complete", "evidence": "e", "blocker": "b"}, "handoff.complete"),
        ({"status": "blocked"}, "handoff.blocked"),
        ({"note": "  "}, "handoff.empty"),
    ],
)
def test_structured_handoff_table(kw: dict[str, object], rule: str) -> None:
    """Seed 000's validation table, one refusal per row."""
    with pytest.raises(InvalidInput) as err:
        _handoff(**kw)
    assert err.value.rule == rule


def test_structured_handoff_valid_forms() -> None:
    """Each status with its required field passes, uncut."""
    assert _handoff(status="continue", next_steps="n", evidence="e").status == "continue"
    assert _handoff(status="complete", evidence="e").evidence == "e"
    assert _handoff(status="blocked", blocker="b", next_steps="n").blocker == "b"


def test_structured_handoff_over_byte_cap_is_refused_whole() -> None:
    """CJK counts as UTF-8 bytes: 5462 × 3 bytes > 16384 refuses the call."""
    with pytest.raises(HandoffTooLarge) as err:
        _handoff(status="continue", note="字" * 5000, next_steps="字" * 462)
    assert err.value.details["size"] == 5462 * 3
    _handoff(status="continue", note="字" * 5000, next_steps="字" * 461)
