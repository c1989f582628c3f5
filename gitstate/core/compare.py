"""How values compare: the one comparison form behind compare-and-swap and "unchanged?".

A caller's ``expected_value`` matches the stored value when their canonical texts are
equal (docs/design.md, "How values compare"): 262, 262.0 and "262" are one number, ``true``
is a boolean, and a structure compares by its canonical JSON (``values.canonical``), each
scalar inside in the same form. Pure, like the model; decimal is imported on the first
comparison, so the wake-up path (which only displays values) never loads it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `from typing import`: typing costs ~3 ms of imports
if TYPE_CHECKING:
    from decimal import Decimal

    from .model import Value


def canonical_text(value: Value | None) -> str:
    """The comparison form of a value (see docs/design.md, "How values compare").

    Booleans are ``true``/``false``; numbers, and strings that read as a finite decimal
    number, become their normalized decimal (262, 262.0 and "262" are all ``262``);
    any other string is itself. An array or object compares by structure: its canonical
    JSON, each scalar inside in this form, object members in any order (values.canonical).
    """
    from decimal import Decimal, InvalidOperation

    if isinstance(value, list | dict):
        from .values import canonical

        return canonical(value, canonical_text)
    if value is None:  # only inside a structure
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _decimal_text(Decimal(repr(value)) if isinstance(value, float) else Decimal(value))
    text = value.strip()
    # Decimal("２６２") is 262 too: only ASCII digits make a number, other scripts' digits
    # are text and never equal to one (a look-alike must not pass a compare-and-swap)
    if text and text.isascii() and (text[0].isdigit() or text[0] in "+-."):
        try:
            number = Decimal(text)
        except InvalidOperation:
            return value
        if number.is_finite():
            return _decimal_text(number)
    return value


def _decimal_text(number: Decimal) -> str:
    try:
        normal = number.normalize()
    except ArithmeticError:  # beyond the decimal context's exponent range
        return str(number)
    if normal.is_zero():
        return "0"
    if abs(normal.adjusted()) > 60:  # "1e999999999" must not become a billion digits
        return str(normal)
    if normal == normal.to_integral_value():
        return str(int(normal))  # quantize() would overflow the context past 28 digits
    return format(normal, "f")


def values_match(expected: Value, current: Value) -> bool:
    """Whether a caller's ``expected_value`` matches the stored value (a structure matches
    only a structure of the same shape)."""
    if isinstance(expected, list | dict) != isinstance(current, list | dict):
        return False
    return canonical_text(expected) == canonical_text(current)
