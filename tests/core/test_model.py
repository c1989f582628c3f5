"""Specification of the state model: the JSON form on disk and how values compare."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from gitstate.core.compare import canonical_text, values_match
from gitstate.core.model import Entry, Handoff, State, display_value

scalars = st.one_of(
    st.text(min_size=1, max_size=20).filter(str.strip),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
)


def test_number_and_numeric_string_compare_equal() -> None:
    """262, 262.0 and "262" are the same value for compare-and-swap."""
    assert values_match(262, "262")
    assert values_match("262", 262.0)
    assert values_match(" 262 ", 262)
    assert not values_match(262, 261)
    assert not values_match("262a", 262)


def test_booleans_and_strings_compare_by_text() -> None:
    """true matches "true"; non-numeric strings compare exactly."""
    assert values_match(True, "true")
    assert not values_match(True, 1)
    assert values_match("96%", "96%")
    assert not values_match("96%", "96")


def test_canonical_decimal_form() -> None:
    """Numbers normalise to plain decimals."""
    assert canonical_text(1.50) == "1.5"
    assert canonical_text("1e2") == "100"
    assert canonical_text(-0.0) == "0"


def test_display_value() -> None:
    """Integral floats show without a fraction; booleans lowercase."""
    assert display_value(262.0) == "262"
    assert display_value(False) == "false"
    assert display_value("96%") == "96%"


def test_state_bytes_are_sorted_pretty_and_unescaped() -> None:
    """The file is sorted, indented UTF-8 with CJK left readable."""
    state = State(keys={
        "b": Entry("跌破即出場", "2026-08-13T01:04:00Z", "理由", "agent"),
        "a": Entry(1, "2026-08-13T01:04:00Z", "r", "agent", "2026-08-13T05:30:00Z"),
    })
    text = state.to_bytes().decode()
    assert "跌破即出場" in text and "\\u" not in text
    assert text.index('"a"') < text.index('"b"')
    assert text.endswith("}\n") and '\n  "keys"' in text


@given(st.dictionaries(st.from_regex(r"[a-z][a-z0-9._-]{0,10}", fullmatch=True), scalars,
                       max_size=5),
       st.one_of(st.none(), st.text(max_size=30)))
def test_state_round_trip(values: dict[str, object], note: str | None) -> None:
    """from_bytes(to_bytes(s)) == s, and serialisation is deterministic."""
    keys = {k: Entry(v, "2026-08-13T01:04:00Z", "why", "agent") for k, v in values.items()}  # type: ignore[arg-type]
    handoff = Handoff(note, "2026-08-13T01:36:00Z", "agent") if note is not None else None
    state = State(keys=keys, handoff=handoff)
    data = state.to_bytes()
    again = State.from_bytes(data)
    assert again == state
    assert again.to_bytes() == data
    json.loads(data)


def test_live_excludes_expired() -> None:
    """An entry is live until its expiry, not at or after it."""
    from datetime import UTC, datetime

    entry = Entry(1, "2026-08-13T01:04:00Z", "r", "a", "2026-08-13T05:30:00Z")
    state = State(keys={"k": entry})
    assert state.live(datetime(2026, 8, 13, 5, 29, 59, tzinfo=UTC)) == {"k": entry}
    assert state.live(datetime(2026, 8, 13, 5, 30, tzinfo=UTC)) == {}


def test_extreme_numbers_compare_without_blowing_up() -> None:
    """Huge exponents stay short (no billion-digit expansion); 1e28 equals its digits."""
    assert canonical_text("1e999999999") == "1E+999999999"
    assert canonical_text("1e99") == "1E+99" and values_match("1e99", 1e99)
    assert values_match(1e28, "10000000000000000000000000000")
    assert canonical_text(1.5e-10) == "0.00000000015"


_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
_ENTRIES = st.builds(Entry, st.one_of(st.integers(), st.floats(allow_nan=False,
                                                              allow_infinity=False),
                                      _TEXT, st.booleans()),
                     st.just("2026-08-13T01:00:00Z"), _TEXT, _TEXT,
                     st.one_of(st.none(), st.just("2026-08-14T01:00:00Z")))
_HANDOFFS = st.one_of(st.none(), st.builds(
    Handoff, _TEXT, st.just("2026-08-13T01:00:00Z"), _TEXT,
    st.sampled_from([None, "continue", "blocked"]), st.one_of(st.none(), _TEXT)))


@given(st.dictionaries(_TEXT, _ENTRIES, max_size=6), _HANDOFFS)
def test_to_bytes_is_exactly_the_pretty_json(keys: dict[str, Entry],
                                             handoff: Handoff | None) -> None:
    """The file assembled from cached entries is byte for byte json.dumps' pretty form
    (keys with quotes, newlines and CJK included), and reads back as the same state."""
    state = State(keys, handoff)
    reference = json.dumps(state.to_dict(), ensure_ascii=False, indent=2, sort_keys=True)
    assert state.to_bytes() == (reference + "\n").encode("utf-8")
    assert state.to_bytes() == state.to_bytes()  # the cached form is the same again
    assert State.from_bytes(state.to_bytes()) == state
