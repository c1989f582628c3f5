"""Text that reaches a model or a terminal: flattened, and nothing in it invisible.

Whatever wrote a state (gitstate, a remote, plain git, an older version), its keys, values,
reasons and notes are untrusted when they are shown. Three forms:

* :func:`inline` — one line for the prompt section and for text output: line breaks and
  controls become spaces, invisible and direction-changing characters are dropped, runs of
  space collapse. No field can start a line, forge a key line, or hide text.
* :func:`visible` — for a terminal, where the text must still be read exactly: every control,
  invisible or direction-changing character (a newline too) is shown as ``\\uXXXX``, so a
  reason cannot clear the screen, plant a link (OSC 8) or display ``262‮001‬`` as 262100.
* :func:`dumps` — JSON whose strings carry such characters only as ``\\u`` escapes (the JSON
  stays equal: a parser reads the same strings back).

Standard library only: the wake-up path imports this module.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # not `from typing import`: typing costs ~3 ms per wake-up
if TYPE_CHECKING:
    import re
    from collections.abc import Callable
    from typing import Any

# Letters that print as nothing (category Lo, so not "format" characters).
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0")


def hidden(ch: str) -> bool:
    """Whether ``ch`` is a control, line/paragraph separator, surrogate, format character
    (zero-width, bidi controls, tags, invisible operators, soft hyphen), blank letter or a
    stray variation selector: what must never pass into a line unseen."""
    if ch.isascii():
        return not (" " <= ch <= "~")
    if ch in _BLANK_LETTERS:
        return True
    code = ord(ch)
    # variation selectors, but for U+FE0E/U+FE0F (text or emoji style of a symbol)
    if 0xFE00 <= code <= 0xFE0D or 0xE0100 <= code <= 0xE01EF:
        return True
    return _category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")


def _load_category(ch: str) -> str:
    """unicodedata.category, imported on the first non-ASCII character (a wake-up whose
    texts are all ASCII never loads it)."""
    global _category
    import unicodedata

    _category = unicodedata.category
    return _category(ch)


_category: Callable[[str], str] = _load_category


def plain(text: str) -> bool:
    """Whether no character of ``text`` is hidden, decided without a loop in Python (a
    wake-up's section is thousands of CJK characters): ``str.isprintable`` is False for
    every Cc, Cf, Cs, Zl and Zp character (and for the Zs, Co and Cn ones, which then take
    the character-by-character way), and one search finds the blank letters and the
    variation selectors, which it lets through."""
    global _odd
    if not text.isprintable():
        return False
    if text.isascii():
        return True
    if _odd is None:
        import re

        _odd = re.compile("[" + "".join(sorted(_BLANK_LETTERS)) +
                          "\ufe00-\ufe0d\U000e0100-\U000e01ef]")
    return _odd.search(text) is None


_odd: re.Pattern[str] | None = None


def inline(text: str) -> str:
    """Flatten untrusted text to one line for the section or a text listing."""
    if "  " not in text and plain(text):
        return text.strip()
    out: list[str] = []
    for ch in text:
        if ch.isspace() or (ch.isascii() and hidden(ch)):
            out.append(" ")  # line breaks, tabs and ASCII controls separate words
        elif not hidden(ch):
            out.append(ch)
    return " ".join("".join(out).split())


def visible(text: str) -> str:
    """Every hidden character of ``text`` shown as ``\\uXXXX`` (newlines too)."""
    if plain(text):
        return text
    return "".join(_escape(ch) if hidden(ch) else ch for ch in text)


def _escape(ch: str) -> str:
    code = ord(ch)
    if code > 0xFFFF:  # as JSON writes it: a surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def dumps(data: Any, **kwargs: Any) -> str:
    """``json.dumps`` (non-ASCII kept readable) with every hidden character escaped.

    The hidden characters can only sit inside JSON strings (the syntax is ASCII), where an
    escape means the same character, so the document parses to the same value.
    """
    text = json.dumps(data, ensure_ascii=False, **kwargs)
    if text.isascii() or plain(text):
        return text  # json already escaped the ASCII controls
    return "".join(_escape(ch) if not ch.isascii() and hidden(ch) else ch for ch in text)
