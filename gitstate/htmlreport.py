"""The auditor's pages: report data in, self-contained HTML out. Pure.

Every page is one file with its style inline: no script, no font, no image, no network, so
it works from file:// and every table reads without JavaScript. A key's timeline is an
inline SVG step chart (numbers plotted; other values as labelled bands), with its marks'
details as SVG ``<title>`` (shown on hover), a text alternative (``role="img"`` with a
title and a description) and the same events in a table under it. Every untrusted text
(keys, values, reasons, actors, notes) is escaped, and its hidden characters shown as
``\\uXXXX`` (textsafe.visible), so nothing in a state can add markup or hide text.
"""

from __future__ import annotations

import hashlib
import html
from datetime import UTC, datetime
from typing import Any

from .model import parse_time
from .textsafe import visible

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI","Noto Sans CJK TC","WenQuanYi Zen Hei",
sans-serif;margin:0;color:#1d2329;
background:#f6f7f9}header{background:#1d2329;color:#fff;padding:12px 24px}
header a{color:#9cc9ff}main{padding:16px 24px;max-width:1200px}h1{font-size:20px;margin:0}
h2{font-size:16px;margin:24px 0 8px}table{border-collapse:collapse;width:100%;background:#fff}
th,td{border:1px solid #d9dde3;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5}code{font:12px ui-monospace,monospace}.ok{color:#127a2e}
.bad{color:#b3261e}.badge{display:inline-block;padding:2px 8px;border-radius:10px;
font-weight:600}.badge.ok{background:#dff3e4}.badge.bad{background:#fbe0de}
pre{background:#fff;border:1px solid #d9dde3;padding:8px;white-space:pre-wrap}
.cols{display:grid;grid-template-columns:1fr 1fr;gap:16px}svg{background:#fff;
border:1px solid #d9dde3}.muted{color:#6b7580}
"""
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22")


def esc(value: object) -> str:
    return html.escape(visible(str(value)), quote=True)


def esc_lines(text: str) -> str:
    """Multi-line text (a reason, a section): each line escaped, the line breaks kept."""
    return "\n".join(esc(line) for line in text.split("\n"))


def slug(key: str) -> str:
    """A file name for a key: its safe characters and a hash (keys may hold anything)."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_"
                   for c in key)[:60].strip(".") or "key"
    return f"{safe}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def page(title: str, body: str, crumbs: str = "") -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>"
            f"<header><h1>{esc(title)}</h1>{crumbs}</header><main>{body}</main></body>"
            "</html>\n")


def _table(headers: list[str], rows: list[list[str]], empty: str = "none") -> str:
    if not rows:
        return f'<p class="muted">{esc(empty)}</p>'
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _value(v: Any) -> str:
    import json

    return "—" if v is None else esc(v if isinstance(v, str) else json.dumps(
        v, ensure_ascii=False, sort_keys=True))


def overview_page(data: dict[str, Any], keys: list[str], prefix: str = "") -> str:
    badge = ('<span class="badge ok">verify: ok</span>' if data["ok"] else
             '<span class="badge bad">verify: ' + esc(", ".join(
                 c["check"] for c in data["checks"] if not c["ok"])) + "</span>")
    live = _table(["key", "value", "set", "reason", "actor", "expires"], [
        [f'<a href="{prefix}keys/{slug(e["key"])}.html">{esc(e["key"])}</a>',
         _value(e["value"]), esc(e["set_at"]), esc(e["reason"]), esc(e["actor"]),
         esc(e["expires_at"] or "—")] for e in data["live"]], "no live keys")
    ho = data["handoff"]
    handoff = '<p class="muted">no handoff note</p>' if ho is None else (
        f"<p>{esc(ho['note'])}</p><p class=\"muted\">left {esc(ho['left_at'])}"
        + (f"; status {esc(ho['status'])}" if ho.get("status") else "") + "</p>")
    wakeups = _table(["time", "runtime", "commit", "bytes", "sha256", "run"], [
        [esc(r["time"]), esc(r["runtime"] + ("/" + r["event"] if r["event"] else "")),
         _commit_link(r["head"], prefix), esc(r["bytes"]), f"<code>{esc(r['sha256'][:16])}"
         "</code>", esc(r["run_id"] or "—")] for r in data["wakeups"]],
        "no wake-up receipts yet (each `gitstate hook` records one)")
    commits = _table(["time", "commit", "op", "key", "actor", "reason"], [
        [esc(c["time"]), _commit_link(c["commit"], prefix), esc(c["op"]),
         esc(c.get("key") or ""), esc(c.get("actor") or ""), esc(c["reason"])]
        for c in data["commits"]])
    checks = _table(["check", "result", "detail"], [
        [esc(c["check"]), '<span class="ok">ok</span>' if c["ok"] else
         '<span class="bad">FAIL</span>', esc(c["detail"])] for c in data["checks"]])
    all_keys = ", ".join(f'<a href="{prefix}keys/{slug(k)}.html">{esc(k)}</a>'
                         for k in keys) or "none"
    body = (f"<p>{badge} HEAD <code>{esc(data['head'][:12])}</code>, built "
            f"{esc(data['now'][:19])}</p><h2>Live keys</h2>{live}<h2>Handoff</h2>{handoff}"
            f"<h2>Every key's timeline</h2><p>{all_keys}</p><h2>Recent wake-ups</h2>"
            f"{wakeups}<h2>Recent commits</h2>{commits}<h2>Verify</h2>{checks}")
    return page(f"gitstate: {data['agent']}", body)


def _commit_link(commit: str | None, prefix: str) -> str:
    if not commit:
        return "—"
    return f'<a href="{prefix}commits/{esc(commit)}.html"><code>{esc(commit[:12])}</code></a>'


def _ts(text: str) -> float:
    return parse_time(text).timestamp()


def chart(key: str, tl: dict[str, Any], now: datetime) -> str:
    """The step chart: value over time, marks for each change, refusals and wake-ups."""
    w, h, left, right, top, bottom = 1100, 300, 70, 20, 20, 60
    events, refused, wakeups = tl["events"], tl["refused"], tl["wakeups"]
    times = [_ts(e["time"]) for e in events] + [_ts(r["time"]) for r in refused] + \
        [_ts(r["time"]) for r in wakeups] + [now.timestamp()]
    t0, t1 = min(times), max(times)
    span = (t1 - t0) or 1.0

    def x(t: float) -> float:
        return left + (t - t0) / span * (w - left - right)

    numbers = [e["value"] for e in events if isinstance(e["value"], int | float)
               and not isinstance(e["value"], bool)]
    numbers += [r["attempted"] for r in refused if isinstance(r.get("attempted"), int | float)
                and not isinstance(r.get("attempted"), bool)]
    low, high = (min(numbers), max(numbers)) if numbers else (0.0, 1.0)
    pad = (high - low) * 0.12 or 1.0  # room above and below the extremes
    lo, hi = low - pad, high + pad

    def y(v: float) -> float:
        return top + (hi - v) / (hi - lo) * (h - top - bottom)

    parts: list[str] = []
    labels = sorted({str(e["value"]) for e in events if e["value"] is not None})
    colour = {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(labels)}
    for i, ev in enumerate(events):  # the value held until the next event
        if ev["value"] is None or ev["op"] in ("clear", "expire"):
            continue
        end = _ts(events[i + 1]["time"]) if i + 1 < len(events) else now.timestamp()
        x0, x1 = x(_ts(ev["time"])), x(end)
        tip = f"{ev['value']} from {ev['time']}: {ev['reason']}"
        if isinstance(ev["value"], int | float) and not isinstance(ev["value"], bool):
            yy = y(float(ev["value"]))
            parts.append(f'<line x1="{x0:.1f}" y1="{yy:.1f}" x2="{x1:.1f}" y2="{yy:.1f}" '
                         f'stroke="#1f77b4" stroke-width="3"><title>{esc(tip)}</title></line>'
                         f'<text x="{x0 + 3:.1f}" y="{yy - 6:.1f}" font-size="12">'
                         f"{esc(ev['value'])}</text>")
        else:
            parts.append(f'<rect x="{x0:.1f}" y="{top + 40}" width="{max(x1 - x0, 2):.1f}" '
                         f'height="60" fill="{colour[str(ev["value"])]}" opacity="0.35">'
                         f'<title>{esc(tip)}</title></rect><text x="{x0 + 4:.1f}" '
                         f'y="{top + 74}" font-size="12">{esc(str(ev["value"])[:40])}</text>')
    marks = {"set": ("circle", "#1f77b4"), "clear": ("cross", "#555"),
             "expire": ("triangle", "#b36b00"), "revert": ("diamond", "#7b1fa2"),
             "adopt": ("diamond", "#00796b"), "init": ("circle", "#999")}
    for ev in events:
        shape, fill = marks.get(ev["op"], ("circle", "#999"))
        cx = x(_ts(ev["time"]))
        cy = y(float(ev["value"])) if isinstance(ev["value"], int | float) and not \
            isinstance(ev["value"], bool) else top + 20
        tip = f"{ev['op']} {ev['value'] if ev['value'] is not None else ''} at {ev['time']}" \
              f" by {ev['actor'] or '-'}: {ev['reason']}"
        parts.append(_mark(shape, cx, cy, fill, tip, ev["op"]))
    for r in refused:
        cx = x(_ts(r["time"]))
        att = r.get("attempted")
        cy = y(float(att)) if isinstance(att, int | float) and not isinstance(att, bool) \
            else top + 10
        tip = f"refused {r.get('op')} {att} at {r['time']} [{r['rule']}] by " \
              f"{r.get('actor') or r.get('writer')}: {r.get('reason')}"
        parts.append(_mark("cross", cx, cy, "#d32f2f", tip, "refused"))
    for r in wakeups:
        cx = x(_ts(r["time"]))
        fill = colour.get(str(r["value"]), "#bbb") if r["value"] is not None else "#bbb"
        tip = f"wake-up {r['time']} ({r['runtime']}) received {r['value'] or 'no value'}"
        parts.append(f'<rect class="mark wakeup" x="{cx - 1.5:.1f}" y="{h - bottom + 8}" '
                     f'width="3" height="16" fill="{fill}"><title>{esc(tip)}</title></rect>')
    axis = (f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" '
            f'stroke="#888"/><text x="{left}" y="{h - 8}" font-size="11">'
            f"{esc(datetime.fromtimestamp(t0, UTC).isoformat()[:16])}</text><text x="
            f'"{w - right}" y="{h - 8}" font-size="11" text-anchor="end">'
            f"{esc(datetime.fromtimestamp(t1, UTC).isoformat()[:16])}</text>"
            f'<text x="4" y="{h - bottom + 20}" font-size="11">wake-ups</text>')
    if numbers:
        axis += (f'<text x="4" y="{y(high) + 4:.1f}" font-size="11">{high:g}</text>'
                 f'<text x="4" y="{y(low) + 4:.1f}" font-size="11">{low:g}</text>')
    legend = "".join(
        f'<rect x="{left + 160 + i * 110}" y="{h - 30}" width="10" height="10" '
        f'fill="{colour[v]}"/><text x="{left + 174 + i * 110}" y="{h - 21}" '
        f'font-size="11">{esc(v[:14])}</text>' for i, v in enumerate(labels[:8]))
    if legend:
        legend = (f'<text x="{left + 60}" y="{h - 21}" font-size="11">received:</text>'
                  + legend)
    summary = (f"{len(events)} changes, {len(refused)} refused attempts and {len(wakeups)} "
               f"wake-ups of {key}; the table below lists each.")
    return (f'<svg role="img" aria-labelledby="chart-title chart-desc" viewBox="0 0 {w} {h}"'
            f' width="100%"><title id="chart-title">Value of {esc(key)} over time</title>'
            f'<desc id="chart-desc">{esc(summary)}</desc>{axis}{legend}{"".join(parts)}</svg>')


def _mark(shape: str, cx: float, cy: float, fill: str, tip: str, kind: str) -> str:
    t = f"<title>{esc(tip)}</title>"
    cls = f'class="mark {kind}"'
    if shape == "circle":
        return f'<circle {cls} cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{fill}">{t}</circle>'
    if shape == "triangle":
        return (f'<polygon {cls} points="{cx:.1f},{cy - 6:.1f} {cx - 6:.1f},{cy + 5:.1f} '
                f'{cx + 6:.1f},{cy + 5:.1f}" fill="{fill}">{t}</polygon>')
    if shape == "diamond":
        return (f'<polygon {cls} points="{cx:.1f},{cy - 6:.1f} {cx + 6:.1f},{cy:.1f} '
                f'{cx:.1f},{cy + 6:.1f} {cx - 6:.1f},{cy:.1f}" fill="{fill}">{t}</polygon>')
    return (f'<path {cls} d="M{cx - 5:.1f},{cy - 5:.1f}L{cx + 5:.1f},{cy + 5:.1f}M'
            f'{cx + 5:.1f},{cy - 5:.1f}L{cx - 5:.1f},{cy + 5:.1f}" stroke="{fill}" '
            f'stroke-width="2.5">{t}</path>')


def key_page(agent: str, key: str, tl: dict[str, Any], now: datetime) -> str:
    events = _table(["time", "event", "value", "actor", "reason", "commit"], [
        [esc(e["time"]), esc(e["op"]), _value(e["value"]), esc(e["actor"] or "—"),
         esc(e["reason"]), _commit_link(e["commit"], "../")] for e in tl["events"]])
    refused = _table(["time", "rule", "attempted", "expected", "HEAD held", "actor",
                      "reason"], [
        [esc(r["time"]), esc(r["rule"]), _value(r.get("attempted")),
         _value((r.get("expected") or {}).get("value") if isinstance(r.get("expected"), dict)
                else r.get("expected")), _value(r.get("head_value")),
         esc(r.get("actor") or r.get("writer") or "—"), esc(r.get("reason") or "")]
        for r in tl["refused"]], "no refused attempts")
    wakeups = _table(["time", "runtime", "received", "commit"], [
        [esc(r["time"]), esc(r["runtime"]), _value(r["value"]),
         _commit_link(r["head"], "../")] for r in tl["wakeups"]], "no wake-up receipts")
    left = tl.get("left_out") or {}
    note = "" if not any(left.values()) else (
        f'<p class="muted">The newest entries are shown; {left.get("events", 0)} older '
        f'changes, {left.get("refused", 0)} refusals and {left.get("wakeups", 0)} wake-ups '
        f"are left out: <code>gitstate log --key {esc(key)}</code> and "
        "<code>gitstate log --refused</code> list them all.</p>")
    body = (f"{note}{chart(key, tl, now)}<h2>Changes</h2>{events}<h2>Refused attempts</h2>"
            f"{refused}<h2>Wake-ups and the value each received</h2>{wakeups}")
    crumbs = '<a href="../index.html">overview</a>'
    return page(f"{agent}: {key}", body, crumbs)


def commit_page(agent: str, data: dict[str, Any]) -> str:
    changes = data["changes"]
    rows = [[esc(k), _value(v["old"]["value"]), _value(v["new"]["value"])]
            for k, v in sorted((changes.get("changed") or {}).items())]
    rows += [[esc(k) + " (expiry)", esc(v["old"] or "none"), esc(v["new"] or "none")]
             for k, v in sorted((changes.get("expiry_changed") or {}).items())]
    rows += [[esc(k), "—", _value(v.get("value") if isinstance(v, dict) else v)]
             for k, v in sorted((changes.get("added") or {}).items())]
    rows += [[esc(k), _value(v.get("value") if isinstance(v, dict) else v), "cleared"]
             for k, v in sorted((changes.get("removed") or {}).items())]
    if changes.get("handoff"):
        ho = changes["handoff"]
        rows.append(["handoff", _value((ho["old"] or {}).get("note")),
                     _value((ho["new"] or {}).get("note"))])
    trailers = _table(["trailer", "value"], [[esc(t[0]), esc(t[1])]
                                             for t in data.get("trailers") or []])
    body = (f"<p><code>{esc(data['commit'])}</code> {esc(data['time'])} by "
            f"{esc(data.get('actor') or '—')}: {esc(data['op'])}</p>"
            f"<h2>Reason</h2><pre>{esc_lines(data['reason'])}</pre><h2>Key-level change</h2>"
            f"{_table(['key', 'before', 'after'], rows, 'no key changed')}"
            f'<h2>The section as injected</h2><div class="cols"><div><h3>before</h3><pre>'
            f"{esc_lines(data['section_before']) or '(empty)'}</pre></div><div><h3>after</h3>"
            f"<pre>{esc_lines(data['section_after']) or '(empty)'}</pre></div></div>"
            f"<h2>Trailers</h2>{trailers}")
    return page(f"{agent}: commit {data['commit'][:12]}", body,
                '<a href="../index.html">overview</a>')


def fleet_page(rows: list[dict[str, Any]]) -> str:
    table = _table(["agent", "verify", "live keys", "last change", "expiring soon"], [
        [f'<a href="agents/{esc(slug(r["agent"]))}/index.html">{esc(r["agent"])}</a>',
         '<span class="ok">ok</span>' if r.get("verify") == "ok" else
         f'<span class="bad">{esc(r.get("verify") or r.get("error") or "?")}</span>',
         esc(r.get("live_keys", "—")), esc((r.get("last_change") or {}).get("time", "—")),
         esc(", ".join(r.get("expiring") or []) or "—")] for r in rows], "no agents")
    return page("gitstate: fleet", f"<p>{len(rows)} agents</p>{table}")
