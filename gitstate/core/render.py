"""The renderer: state in, the prompt section out. Pure.

``render(state, now, locale, tz)`` depends on nothing but its arguments (invariant 6), so
``--at`` can reproduce exactly what a past wake-up saw. Every untrusted text is flattened to
one line by :func:`inline` before it is placed, so no value, reason or note can start a new
line, a heading, or a forged key line.
"""

from __future__ import annotations

import functools

from .model import Entry, Handoff, State, display_value, parse_time
from .textsafe import inline
from .timebase import UTC, datetime, tzinfo

TYPE_CHECKING = False  # not `from typing import`: typing costs ~3 ms per wake-up
if TYPE_CHECKING:
    from collections.abc import Iterable

HEADER = {
    "zh-TW": (
        "## 工作狀態（唯一權威 · 由你自己以 working_state_set 維護）",
        "以下鍵值是你跨喚醒持續有效的工作狀態與承諾，為唯一權威的「現行值」；",
        "筆記、日誌、策略文件裡與此矛盾的數字一律是歷史值（已作廢），不得採用。"
        "要變更任何一項，請呼叫 working_state_set 並附理由。",
    ),
    "en": (
        "## Working state (sole authority · maintained by you with working_state_set)",
        "The entries below are your working state and commitments across wake-ups: "
        "the only authoritative current values;",
        "any conflicting number in notes, journals or strategy documents is a superseded "
        "historical value and must not be used. To change an entry, call working_state_set "
        "with a reason.",
    ),
    "ja": (
        "## 作業状態（唯一の権威 · working_state_set で自分で管理）",
        "以下のキーと値は、起動をまたいで有効なあなたの作業状態と約束であり、唯一の権威ある「現行値」です。",
        "メモ・日誌・戦略文書にあるこれと矛盾する数値はすべて過去の値（失効）であり、採用してはなりません。"
        "変更するときは理由を添えて working_state_set を呼び出してください。",
    ),
}

SET_TOOL = "working_state_set"  # the tool names the section cites, unless configured
GET_TOOL = "working_state_get"  # ([gitstate] set_tool / get_tool)


def header(locale: str, set_tool: str = SET_TOOL) -> tuple[str, ...]:
    """The section's heading lines, naming ``set_tool`` as the tool that changes an entry."""
    lines = HEADER[locale]
    return lines if set_tool == SET_TOOL else tuple(h.replace(SET_TOOL, set_tool)
                                                    for h in lines)


# locale -> (set, reason, expiry, open, sep, close)
_KEY_WORDS = {
    "zh-TW": ("{t} 設", "理由：", "有效至 ", "（", "；", "）"),
    "en": ("set {t}", "reason: ", "expires ", " (", "; ", ")"),
    "ja": ("{t} 設定", "理由：", "有効期限 ", "（", "；", "）"),
}
# locale -> (line head, status, next steps, evidence, blocker)
_HANDOFF_WORDS = {
    "zh-TW": ("交接註記（{t} 留）：", "狀態=", "下一步：", "證據：", "阻礙："),
    "en": ("Handoff note (left {t}): ", "status=", "next steps: ", "evidence: ", "blocker: "),
    "ja": ("引き継ぎメモ（{t} 記入）：", "状態=", "次の手順：", "根拠：", "障害："),
}

def _clock(moment: str, tz: tzinfo) -> str:
    return parse_time(moment).astimezone(tz).strftime("%m-%d %H:%M")


def key_line(key: str, entry: Entry, locale: str, tz: tzinfo) -> str:
    """One ``- key = value（set time；reason；expiry）`` line."""
    set_w, reason_w, exp_w, open_, sep, close = _KEY_WORDS[locale]
    parts = [set_w.format(t=_clock(entry.set_at, tz)), reason_w + inline(entry.reason)]
    if entry.expires_at:
        parts.append(exp_w + _clock(entry.expires_at, tz))
    value = inline(display_value(entry.value))
    return f"- {inline(key)} = {value}{open_}{sep.join(parts)}{close}"


def handoff_line(handoff: Handoff, locale: str, tz: tzinfo) -> str:
    """The handoff line, with its structured fields when a status is present."""
    head, status_w, next_w, evid_w, block_w = _HANDOFF_WORDS[locale]
    _, _, _, open_, sep, close = _KEY_WORDS[locale]
    line = head.format(t=_clock(handoff.left_at, tz)) + inline(handoff.note)
    if handoff.status:
        extra = [status_w + inline(handoff.status)]
        for word, text in ((next_w, handoff.next_steps), (evid_w, handoff.evidence),
                           (block_w, handoff.blocker)):
            if text:
                extra.append(word + inline(text))
        line += open_ + sep.join(extra) + close
    return line


_PHASE_WORDS = {
    "zh-TW": "目前階段：{phase}；允許的工具：{tools}",
    "en": "Current phase: {phase}; allowed tools: {tools}",
    "ja": "現在のフェーズ：{phase}；使用できるツール：{tools}",
}


def phase_line(phase: str, tools: list[str], locale: str) -> str:
    """The line naming the current phase and the tools it allows (typed state)."""
    shown = ", ".join(inline(t) for t in tools) or "—"
    return _PHASE_WORDS[locale].format(phase=inline(phase), tools=shown)


def ordered_live(state: State, now: datetime) -> list[tuple[str, Entry]]:
    """Live entries, newest first (ties by key): the order of the section."""
    live = state.live(now)
    return sorted(live.items(), key=lambda kv: (_neg(kv[1].set_at), kv[0]))


def _neg(stamp: str) -> float:
    return -parse_time(stamp).timestamp()


def key_lines_bytes(lines: Iterable[str]) -> int:
    """UTF-8 size of key lines as they appear in the section (each with its newline)."""
    return sum(len(line.encode("utf-8")) + 1 for line in lines)


def section_key_bytes(state: State, now: datetime) -> int:
    """The size the live key lines take, in the longest locale (the zone does not change
    it): what section_max_bytes limits at write time and what a server re-checks."""
    sizes = [_line_sizes(k, e)[0] for k, e in state.live(now).items()]
    return max(map(sum, zip(*sizes, strict=True))) if sizes else 0


@functools.lru_cache(maxsize=4096)
def _line_sizes(key: str, entry: Entry) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A key line's UTF-8 bytes (with its newline) and UTF-16 units (without), in each
    locale in HEADER's order. Entries are immutable and an unchanged key keeps its Entry,
    so a line is rendered once, not on every write."""
    lines = [key_line(key, entry, locale, UTC) for locale in HEADER]
    return (tuple(key_lines_bytes([line]) for line in lines),
            tuple(text_chars(line) for line in lines))


def phase_lines(compiled: dict[str, object] | None, state: State, now: datetime,
                locale: str) -> list[str]:
    """The allowed-tools line from a compiled schema (Schema.compiled(), or its JSON cache
    on the wake-up path): the phase key's live value, else the enum's first value."""
    tools = compiled.get("tools") if compiled else None
    if not compiled or not isinstance(tools, dict) or not tools or not compiled.get("phase_key"):
        return []
    entry = state.live(now).get(str(compiled["phase_key"]))
    phase = str(entry.value) if entry is not None else str(compiled.get("initial_phase") or "")
    return [phase_line(phase, [str(t) for t in tools.get(phase, [])], locale)]


def render(
    state: State,
    now: datetime,
    locale: str,
    tz: tzinfo,
    extra_lines: Iterable[str] = (),
    set_tool: str = SET_TOOL,
) -> str:
    """The section a wake-up receives; the empty string when there is nothing live.
    ``set_tool``: the name the model calls the set tool by in its runtime."""
    lines = [key_line(k, e, locale, tz) for k, e in ordered_live(state, now)]
    lines.extend(extra_lines)
    if state.handoff is not None:
        lines.append(handoff_line(state.handoff, locale, tz))
    if not lines:
        return ""
    return "\n".join((*header(locale, set_tool), *lines)) + "\n"


def text_chars(text: str) -> int:
    """Length as a JavaScript host counts it (UTF-16 code units): Claude Code's limit on a
    hook's additionalContext is measured so; an emoji outside the BMP counts twice.
    (Counted by the codec, not per character: this runs for every line of every write.)"""
    if text.isascii():
        return len(text)
    # a character outside the BMP is the one that takes 4 bytes in UTF-8 (lead byte F0-F4);
    # UTF-8 because its codec is built in, while UTF-16's is a module to import
    data = text.encode("utf-8", "surrogatepass")
    return len(text) + sum(data.count(lead) for lead in _ASTRAL_LEADS)


_ASTRAL_LEADS = (b"\xf0", b"\xf1", b"\xf2", b"\xf3", b"\xf4")


def section_chars(state: State, now: datetime, compiled: dict[str, object] | None,
                  set_tool: str = SET_TOOL) -> int:
    """The longest the whole section gets, in any locale (zone-independent: times have a
    fixed width): what injection_max_chars limits at write time. Equal to
    ``text_chars(render(...))``, summed from cached line sizes so a write does not render
    every key line three times."""
    sizes = [_line_sizes(k, e)[1] for k, e in state.live(now).items()]
    longest = 0
    for n, locale in enumerate(HEADER):
        lines = [size[n] for size in sizes]
        lines += [text_chars(line) for line in phase_lines(compiled, state, now, locale)]
        if state.handoff is not None:
            lines.append(_handoff_chars(state.handoff)[n])
        if lines:  # header lines and every line end in a newline
            head = header(locale, set_tool)
            size = sum(text_chars(h) for h in head)
            longest = max(longest, size + sum(lines) + len(head) + len(lines))
    return longest


def section_chars_bound(state: State, now: datetime, compiled: dict[str, object] | None,
                        set_tool: str = SET_TOOL) -> int:
    """A cheap upper bound of :func:`section_chars` (each line counted in its longest
    locale, from the cached line sizes), so that a write pays for the exact count only
    when the section comes near the limit."""
    head = max(sum(len(h.encode()) + 1 for h in header(loc, set_tool)) for loc in HEADER)
    keys = sum(max(_line_sizes(k, e)[1]) + 1 for k, e in state.live(now).items())
    phase = max((sum(len(line.encode()) + 1 for line in phase_lines(compiled, state, now, loc))
                 for loc in HEADER), default=0)
    handoff = 0
    if state.handoff is not None:
        handoff = max(_handoff_chars(state.handoff)) + 1
    return head + keys + phase + handoff


@functools.lru_cache(maxsize=64)
def _handoff_chars(handoff: Handoff) -> tuple[int, ...]:
    """The handoff line's UTF-16 units in each locale (HEADER's order), without its
    newline: a handoff stays the same over many writes."""
    return tuple(text_chars(handoff_line(handoff, locale, UTC)) for locale in HEADER)



_WITHHELD = {
    "zh-TW": "交接註記過長，未放入此段（{n} 字元）；請以 working_state_get 讀取。",
    "en": "The handoff note is too long for this injection ({n} characters); read it with "
          "working_state_get.",
    "ja": "引き継ぎメモが長すぎるためここには含めていません（{n} 文字）；"
          "working_state_get で読んでください。",
}


def fit(state: State, now: datetime, locale: str, tz: tzinfo, extra_lines: list[str],
        limit: int, set_tool: str = SET_TOOL, get_tool: str = GET_TOOL) -> tuple[str, bool]:
    """The section within ``limit`` characters, never by cutting a key line: when the whole
    section is longer (a state written before the limit, or a runtime with a smaller budget
    than config.toml's), the handoff line gives way to a short line saying where it is.
    Returns the text and whether the handoff was withheld."""
    text = render(state, now, locale, tz, extra_lines, set_tool)
    if text_chars(text) <= limit or state.handoff is None:
        return text, False
    full = handoff_line(state.handoff, locale, tz)
    notice = _WITHHELD[locale].format(n=text_chars(full)).replace(GET_TOOL, get_tool)
    return render(state.with_handoff(None), now, locale, tz, [*extra_lines, notice],
                  set_tool), True
