"""A key's timeline as an inline SVG step chart (for html.py's key pages). Pure.

The x axis spans the key's own events (its first to its last change, refusal or wake-up,
with a margin of 4% each side, at least a second), not the report's time: a day of changes
made months ago fills the chart. Its ticks fall on round wall-clock times in the agent's
zone (``zone``), labelled to the unit they step by, with the zone named in the axis title.
Numbers are plotted as a step line, other values as labelled bands; a value's label is
drawn only where its step is wide enough for it (every value is in the mark's hover title
and the tables), and everything is clipped to the frame. A legend names each mark shape
that appears.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

from ..core.localtime import local_text
from ..core.model import parse_time
from ..core.textsafe import visible

W, H = 1100, 360
LEFT, RIGHT, TOP, BOTTOM = 78, 24, 44, 96
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22")
# event kind -> (shape, colour, legend text)
MARKS = {"set": ("circle", "#1f77b4", "set"), "revert": ("diamond", "#7b1fa2", "revert"),
         "adopt": ("diamond", "#00796b", "adopted hand edit"),
         "clear": ("cross", "#555", "clear"), "expire": ("triangle", "#b36b00", "expiry"),
         "init": ("circle", "#999", "init"),
         "refused": ("cross", "#d32f2f", "refused attempt (at the value it tried)")}
CHAR_PX = 7.0  # a generous width of one character at font-size 12
MINUTE, HOUR, DAY = 60, 3600, 86400
STEPS = (1, 5, 15, 30, MINUTE, 5 * MINUTE, 15 * MINUTE, 30 * MINUTE, HOUR, 3 * HOUR, 6 * HOUR,
         12 * HOUR, DAY, 2 * DAY, 7 * DAY)
MONTHS = (1, 3, 6, 12, 24, 60, 120)
MAX_TICKS = 9


def esc(value: object) -> str:
    return html.escape(visible(str(value)), quote=True)


def _ts(text: str) -> float:
    return parse_time(text).timestamp()


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def zone_label(zone: tzinfo, moment: datetime) -> str:
    """``Asia/Taipei, UTC+08:00``: the zone's name (when it has one) and its offset."""
    local = moment.astimezone(zone)
    raw = local.strftime("%z") or "+0000"
    offset = f"{raw[:3]}:{raw[3:5]}"
    name = getattr(zone, "key", None) or local.tzname() or ""
    return f"{name}, UTC{offset}" if name and name != "UTC" else f"UTC{offset}"


def span(times: list[float]) -> tuple[float, float]:
    """The x range for these instants: their span with 4% each side (at least a second;
    half an hour each side of a single instant)."""
    t0, t1 = min(times), max(times)
    margin = max((t1 - t0) * 0.04, 1.0) if t1 > t0 else 1800.0
    return t0 - margin, t1 + margin


def ticks(a: float, b: float, zone: tzinfo) -> list[tuple[float, str, str]]:
    """Round wall-clock instants in [a, b] in ``zone``: (timestamp, label, context), the
    context (the date or year) given on the first tick and wherever it changes."""
    out: list[tuple[float, str, str]] = []
    start = datetime.fromtimestamp(a, UTC).astimezone(zone)
    midnight = start.replace(hour=0, minute=0, second=0, microsecond=0)
    step = next((s for s in STEPS if (b - a) / s <= MAX_TICKS), None)
    if step is not None:
        k = int((start - midnight).total_seconds() // step)
        while len(out) <= 4 * MAX_TICKS:
            moment = midnight + timedelta(seconds=k * step)
            k += 1
            t = moment.timestamp()
            if t > b:
                break
            if t >= a:
                out.append((t, moment.strftime("%H:%M:%S") if step < MINUTE else
                            moment.strftime("%H:%M") if step < DAY else
                            moment.strftime("%m-%d"),
                            moment.strftime("%Y-%m-%d") if step < DAY else
                            moment.strftime("%Y")))
        return out
    months = next((m for m in MONTHS if (b - a) / (m * 30.44 * DAY) <= MAX_TICKS), 240)
    first = midnight.replace(day=1)
    index = first.year * 12 + first.month - 1
    index -= index % months
    while len(out) <= 4 * MAX_TICKS:
        moment = first.replace(year=index // 12, month=index % 12 + 1)
        index += months
        t = moment.timestamp()
        if t > b:
            break
        if t >= a:
            out.append((t, moment.strftime("%Y-%m") if months < 12 else moment.strftime("%Y"),
                        ""))
    return out


def _text(x: float, y: float, text: str, size: int = 11, anchor: str = "start",
          extra: str = "") -> str:
    width = len(text) * size * 0.58
    if anchor == "middle" and x - width / 2 < 2:  # keep it inside the frame
        anchor = "start"
    elif anchor == "middle" and x + width / 2 > W - 2:
        anchor = "end"
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}"'
            f"{extra}>{esc(text)}</text>")


def chart(key: str, tl: dict[str, Any], now: datetime, zone: tzinfo = UTC) -> str:
    """The step chart: value over time, marks for each change, refusals and wake-ups."""
    events, refused, wakeups = tl["events"], tl["refused"], tl["wakeups"]
    times = [_ts(e["time"]) for e in events] + [_ts(r["time"]) for r in refused] + \
        [_ts(r["time"]) for r in wakeups]
    a, b = span(times or [now.timestamp()])
    base = H - BOTTOM

    def x(t: float) -> float:
        return LEFT + (t - a) / (b - a) * (W - LEFT - RIGHT)

    def when(stamp: str) -> str:
        return local_text(stamp, zone)

    numbers = [float(e["value"]) for e in events if _number(e["value"])]
    numbers += [float(r["attempted"]) for r in refused if _number(r.get("attempted"))]
    low, high = (min(numbers), max(numbers)) if numbers else (0.0, 1.0)
    pad = (high - low) * 0.12 or 1.0  # room above and below the extremes
    lo, hi = low - pad, high + pad

    def y(v: float) -> float:
        return TOP + (hi - v) / (hi - lo) * (base - TOP)

    parts: list[str] = []
    labels = sorted({str(e["value"]) for e in events if e["value"] is not None})
    colour = {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(labels)}
    label_end = -1.0
    for i, ev in enumerate(events):  # the value held until the next event
        if ev["value"] is None or ev["op"] in ("clear", "expire"):
            continue
        end = _ts(events[i + 1]["time"]) if i + 1 < len(events) else min(now.timestamp(), b)
        x0, x1 = x(_ts(ev["time"])), max(x(end), x(_ts(ev["time"])))
        text = str(ev["value"])[:24]
        room = x1 - x0 if i + 1 < len(events) else W - RIGHT - x0  # the last: to the edge
        fits = room >= len(text) * CHAR_PX + 6 and x0 + 3 >= label_end
        tip = esc(f"{ev['value']} from {when(ev['time'])}: {ev['reason']}")
        if _number(ev["value"]):
            yy = y(float(ev["value"]))
            parts.append(f'<line x1="{x0:.1f}" y1="{yy:.1f}" x2="{x1:.1f}" y2="{yy:.1f}" '
                         f'stroke="#1f77b4" stroke-width="3"><title>{tip}</title></line>')
            if fits:
                parts.append(_text(x0 + 3, yy - 7, text, 12))
        else:
            parts.append(f'<rect x="{x0:.1f}" y="{TOP + 40}" width="{max(x1 - x0, 2):.1f}" '
                         f'height="60" fill="{colour[str(ev["value"])]}" opacity="0.35">'
                         f"<title>{tip}</title></rect>")
            if fits:
                parts.append(_text(x0 + 4, TOP + 74, text, 12))
        if fits:
            label_end = x0 + 3 + len(text) * CHAR_PX
    dense = len(events) + len(refused) > (W - LEFT - RIGHT) / 8
    kinds: list[str] = []
    held: Any = None  # an expiry or a clear is marked at the value it ended
    for ev in events:
        kinds.append(ev["op"] if ev["op"] in MARKS else "set")
        shape, fill, _ = MARKS[kinds[-1]]
        shown = held if ev["op"] in ("clear", "expire") else ev["value"]
        held = None if ev["op"] in ("clear", "expire") else ev["value"]
        cy = y(float(shown)) if _number(shown) else TOP + 20
        tip = f"{ev['op']} {ev['value'] if ev['value'] is not None else ''} at " \
              f"{when(ev['time'])} by {ev['actor'] or '-'}: {ev['reason']}"
        parts.append(_mark(shape, x(_ts(ev["time"])), cy, fill, tip, ev["op"], dense))
    for r in refused:
        kinds.append("refused")
        att = r.get("attempted")
        cy = y(float(att)) if _number(att) else TOP + 10
        tip = f"refused {r.get('op')} {att} at {when(r['time'])} [{r['rule']}] by " \
              f"{r.get('actor') or r.get('writer')}: {r.get('reason')}"
        parts.append(_mark("cross", x(_ts(r["time"])), cy, "#d32f2f", tip, "refused", dense))
    few = len(labels) <= len(PALETTE)
    for r in wakeups:
        cx = x(_ts(r["time"]))
        fill = "#bbb" if r["value"] is None else colour.get(str(r["value"]), "#bbb") if few \
            else "#1f77b4"
        tip = f"wake-up {when(r['time'])} ({r['runtime']}) received {r['value'] or 'no value'}"
        parts.append(f'<rect class="mark wakeup" x="{cx - 1.5:.1f}" y="{base + 40}" '
                     f'width="3" height="16" fill="{fill}"><title>{esc(tip)}</title></rect>')
    summary = (f"{len(events)} changes, {len(refused)} refused attempts and {len(wakeups)} "
               f"wake-ups of {key}, from {when(_iso(a))} to {when(_iso(b))}; the tables "
               "below list each.")
    return (f'<svg role="img" aria-labelledby="chart-title chart-desc" viewBox="0 0 {W} {H}"'
            f' width="100%"><title id="chart-title">Value of {esc(key)} over time</title>'
            f'<desc id="chart-desc">{esc(summary)}</desc>'
            f'<clipPath id="frame"><rect x="{LEFT - 10}" y="0" width="{W - LEFT - RIGHT + 20}"'
            f' height="{H}"/></clipPath>'
            f"{_axes(a, b, zone, numbers, y, low, high, x)}"
            f"{_legend(kinds, bool(wakeups), few)}{_received(labels, colour, few, bool(wakeups))}"
            f'<g clip-path="url(#frame)">{"".join(parts)}</g></svg>')


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _axes(a: float, b: float, zone: tzinfo, numbers: list[float], y: Any, low: float,
          high: float, x: Any) -> str:
    """The time axis with its ticks and zone, and the values on the y axis."""
    base = H - BOTTOM
    out = [f'<line x1="{LEFT}" y1="{base}" x2="{W - RIGHT}" y2="{base}" stroke="#888"/>']
    context = ""
    for t, label, ctx in ticks(a, b, zone):
        tx = x(t)
        out.append(f'<line class="tick" x1="{tx:.1f}" y1="{TOP}" x2="{tx:.1f}" y2="{base + 4}"'
                   f' stroke="#e3e6ea"/>')
        out.append(_text(tx, base + 16, label, 11, "middle"))
        if ctx and ctx != context:
            out.append(_text(tx, base + 30, ctx, 11, "middle", ' fill="#6b7580"'))
            context = ctx
    out.append(_text(W - RIGHT, H - 6, f"time in {zone_label(zone, _dt(b))}", 11, "end",
                     ' fill="#6b7580"'))
    out.append(_text(4, base + 53, "wake-ups", 11))
    distinct = sorted(set(numbers))
    shown = distinct if len(distinct) <= 6 else [  # few values: each; else five steps
        float(f"{low + (high - low) * k / 4:.3g}") for k in range(5)]
    for v in shown:
        out.append(_text(LEFT - 8, y(v) + 4, f"{v:g}"[:10], 11, "end"))
    return "".join(out)


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def _legend(kinds: list[str], wakeups: bool, coloured: bool) -> str:
    """The shapes that appear, each named, in one row above the plot."""
    items = [k for k in MARKS if k in set(kinds)]
    out, cx = ['<g class="legend">'], float(LEFT)
    for kind in items:
        shape, fill, text = MARKS[kind]
        out.append(_mark(shape, cx + 5, 18, fill, text, "key", False))
        out.append(_text(cx + 14, 22, text, 11))
        cx += 24 + len(text) * 6.0
    if wakeups:
        out.append(f'<rect x="{cx + 3:.1f}" y="11" width="3" height="14" fill="#1f77b4"/>')
        out.append(_text(cx + 12, 22, "wake-up (coloured by the value it received)"
                         if coloured else "wake-up", 11))
    out.append("</g>")
    return "".join(out)


def _received(labels: list[str], colour: dict[str, str], few: bool, wakeups: bool) -> str:
    if not wakeups or not labels:
        return ""
    if not few:
        return _text(LEFT, H - 22, f"wake-ups: {len(labels)} distinct values, too many to "
                     "colour; hover a tick (or see the table) for the value it received", 11)
    out, cx = [_text(LEFT, H - 22, "received:", 11)], LEFT + 62.0
    for v in labels:
        text = v[:14]
        out.append(f'<rect x="{cx:.1f}" y="{H - 31}" width="10" height="10" '
                   f'fill="{colour[v]}"/>{_text(cx + 14, H - 22, text, 11)}')
        cx += 30 + len(text) * 6.4
    out.append(f'<rect x="{cx:.1f}" y="{H - 31}" width="10" height="10" fill="#bbb"/>'
               f'{_text(cx + 14, H - 22, "no value (expired or unset)", 11)}')
    return "".join(out)


def _mark(shape: str, cx: float, cy: float, fill: str, tip: str, kind: str,
          small: bool) -> str:
    t = f"<title>{esc(tip)}</title>"
    cls = f'class="mark {kind}"'
    s = 3.0 if small else 5.0
    if shape == "circle":
        return f'<circle {cls} cx="{cx:.1f}" cy="{cy:.1f}" r="{s:g}" fill="{fill}">{t}</circle>'
    if shape == "triangle":
        return (f'<polygon {cls} points="{cx:.1f},{cy - s - 1:.1f} {cx - s - 1:.1f},'
                f'{cy + s:.1f} {cx + s + 1:.1f},{cy + s:.1f}" fill="{fill}">{t}</polygon>')
    if shape == "diamond":
        return (f'<polygon {cls} points="{cx:.1f},{cy - s - 1:.1f} {cx + s + 1:.1f},{cy:.1f} '
                f'{cx:.1f},{cy + s + 1:.1f} {cx - s - 1:.1f},{cy:.1f}" fill="{fill}">{t}'
                "</polygon>")
    return (f'<path {cls} d="M{cx - s:.1f},{cy - s:.1f}L{cx + s:.1f},{cy + s:.1f}M'
            f'{cx + s:.1f},{cy - s:.1f}L{cx - s:.1f},{cy + s:.1f}" stroke="{fill}" '
            f'stroke-width="2.5">{t}</path>')
