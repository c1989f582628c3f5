"""The auditor's pages: report data in, self-contained HTML out. Pure.

Every page is one file with its style inline: no script, no font, no image, no network, so
it works from file:// and every table reads without JavaScript. A key's timeline is an
inline SVG step chart (gitstate/report/chart.py) with the same events in tables under it.
Every time is shown in the agent's zone with its offset (``Site.zone``, as the CLI prints
them), and the style names CJK fonts before the generic families, so reasons in Chinese or
Japanese do not show as boxes where the default font lacks them. Every untrusted text
(keys, values, reasons, actors, notes) is escaped, and its hidden characters shown as
``\\uXXXX`` (textsafe.visible), so nothing in a state can add markup or hide text.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any

from ..core.localtime import local_text
from .chart import chart, zone_label
from .chart import esc as esc  # the pages' one escaping, re-exported

CJK = ('"Noto Sans CJK TC","Noto Sans CJK SC","Noto Sans CJK JP","Noto Sans TC",'
       '"Source Han Sans TC","WenQuanYi Zen Hei","PingFang TC","Microsoft JhengHei",'
       '"Hiragino Sans","Droid Sans Fallback"')
SANS = f'system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans",{CJK},sans-serif'
MONO = ('ui-monospace,"DejaVu Sans Mono",Menlo,Consolas,"Noto Sans Mono CJK TC",'
        f'"WenQuanYi Zen Hei Mono",{CJK},monospace')
STYLE = f"""
body{{font:14px/1.45 {SANS};margin:0;color:#1d2329;background:#f6f7f9}}
svg text{{font-family:{SANS}}}pre,code{{font-family:{MONO}}}
header{{background:#1d2329;color:#fff;padding:12px 24px}}
header a{{color:#9cc9ff;margin-right:12px}}main{{padding:16px 24px;max-width:1200px}}
h1{{font-size:20px;margin:0}}h2{{font-size:16px;margin:24px 0 8px}}
table{{border-collapse:collapse;width:100%;background:#fff}}
th,td{{border:1px solid #d9dde3;padding:4px 8px;text-align:left;vertical-align:top}}
th{{background:#eef1f5}}code{{font-size:12px}}.ok{{color:#127a2e}}
.bad{{color:#b3261e}}.badge{{display:inline-block;padding:2px 8px;border-radius:10px;
font-weight:600}}.badge.ok{{background:#dff3e4}}.badge.bad{{background:#fbe0de}}
pre{{background:#fff;border:1px solid #d9dde3;padding:8px;white-space:pre-wrap}}
.cols{{display:grid;grid-template-columns:1fr 1fr;gap:16px}}svg{{background:#fff;
border:1px solid #d9dde3}}.muted{{color:#6b7580}}tr.expired td{{color:#6b7580;
background:#f6f7f9}}.nowrap{{white-space:nowrap}}
"""


@dataclass(frozen=True)
class Site:
    """What every page of one agent's site shares: its name, the zone its times are shown
    in, the report's time, and which commits and instants have a page (links only to those,
    so every link resolves)."""

    agent: str
    zone: tzinfo = UTC
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    commits: frozenset[str] = frozenset()
    instants: frozenset[str] = frozenset()

    def when(self, stamp: str | None) -> str:
        """A stored time, escaped, in the agent's zone with its offset."""
        return f'<span class="nowrap">{esc(local_text(stamp, self.zone))}</span>' \
            if stamp else "—"

    def now_text(self) -> str:
        return self.now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def zone_note(self) -> str:
        return f"times in {esc(zone_label(self.zone, self.now))}"

    def commit(self, commit: str | None, prefix: str) -> str:
        if not commit:
            return "—"
        code = f"<code>{esc(commit[:12])}</code>"
        return f'<a href="{prefix}commits/{esc(commit)}.html">{code}</a>' \
            if commit in self.commits else code

    def at(self, stamp: str, label: str, prefix: str) -> str:
        return f'<a href="{prefix}at/{esc(stamp)}.html">{label}</a>' \
            if stamp in self.instants else label


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


def _attempted(r: dict[str, Any]) -> str:
    return _value(r.get("attempted"))


def _change(c: dict[str, Any]) -> str:
    """A commit's old → new, as far as one column can say it."""
    if c.get("key"):
        new = "cleared" if c["op"] == "clear" else _value(c.get("new"))
        return f"{_value(c.get('old'))} → {new}"
    adopted = (c.get("adopt") or {}).get("keys") or {}
    if adopted:
        return esc(f"{len(adopted)} keys adopted")
    return "—"


def _keys_table(site: Site, rows: list[dict[str, Any]], prefix: str, when: str) -> str:
    """Every key with its value; an expired one kept, greyed and marked expired."""
    body = []
    for e in rows:
        expires = site.when(e["expires_at"])
        if e["expired"]:
            expires = f'<span class="badge bad">expired</span> {expires}'
        body.append((e["expired"], [
            f'<a href="{prefix}keys/{slug(e["key"])}.html">{esc(e["key"])}</a>',
            _value(e["value"]), site.when(e["set_at"]), esc(e["reason"]), esc(e["actor"]),
            expires]))
    if not body:
        return f'<p class="muted">no keys {esc(when)}</p>'
    head = "".join(f"<th>{h}</th>" for h in ("key", "value", "set", "reason", "actor",
                                            "expires"))
    trs = "".join(("<tr class=\"expired\">" if gone else "<tr>")
                  + "".join(f"<td>{c}</td>" for c in cells) + "</tr>" for gone, cells in body)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{trs}</tbody></table>"


def _refused_table(site: Site, rows: list[dict[str, Any]], prefix: str,
                   with_key: bool) -> str:
    headers = ["time", "rule", *(["key"] if with_key else []), "attempted", "expected",
               "HEAD held", "actor", "reason"]
    return _table(headers, [
        [site.when(r["time"]), esc(r["rule"]),
         *([f'<a href="{prefix}keys/{slug(str(r["key"]))}.html">{esc(r["key"])}</a>'
            if r.get("key") else "—"] if with_key else []),
         _attempted(r), _value((r.get("expected") or {}).get("value")
                               if isinstance(r.get("expected"), dict) else r.get("expected")),
         _value(r.get("head_value")), esc(r.get("actor") or r.get("writer") or "—"),
         esc(r.get("reason") or "")] for r in rows],
        "no refused attempts (the refusal journal is empty)" if with_key else
        "no refused attempt of this key")


def _handoff(site: Site, ho: dict[str, Any] | None) -> str:
    return '<p class="muted">no handoff note</p>' if ho is None else (
        f"<p>{esc(ho['note'])}</p><p class=\"muted\">left {site.when(ho['left_at'])}"
        + (f"; status {esc(ho['status'])}" if ho.get("status") else "") + "</p>")


def _crumbs(prefix: str) -> str:
    return (f'<a href="{prefix}index.html">overview</a>'
            f'<a href="{prefix}at/index.html">state at a time</a>')


def overview_page(site: Site, data: dict[str, Any], keys: list[str],
                  prefix: str = "") -> str:
    from .data import stamp

    badge = ('<span class="badge ok">verify: ok</span>' if data["ok"] else
             '<span class="badge bad">verify: ' + esc(", ".join(
                 c["check"] for c in data["checks"] if not c["ok"])) + "</span>")
    wakeups = _table(["time (state then)", "runtime", "commit", "bytes", "sha256", "run"], [
        [site.at(stamp(r["time"]), site.when(r["time"]), prefix),
         esc(r["runtime"] + ("/" + r["event"] if r["event"] else "")),
         site.commit(r["head"], prefix), esc(r["bytes"]), f"<code>{esc(r['sha256'][:16])}"
         "</code>", esc(r["run_id"] or "—")] for r in data["wakeups"]],
        "no wake-up receipts yet (each `gitstate hook` records one)")
    commits = _table(["time", "commit", "op", "key", "old → new", "actor", "reason"], [
        [site.when(c["time"]), site.commit(c["commit"], prefix), esc(c["op"]),
         esc(c.get("key") or ""), _change(c), esc(c.get("actor") or ""), esc(c["reason"])]
        for c in data["commits"]])
    checks = _table(["check", "result", "detail"], [
        [esc(c["check"]), '<span class="ok">ok</span>' if c["ok"] else
         '<span class="bad">FAIL</span>', esc(c["detail"])] for c in data["checks"]])
    all_keys = ", ".join(f'<a href="{prefix}keys/{slug(k)}.html">{esc(k)}</a>'
                         for k in keys) or "none"
    body = (f"<p>{badge} HEAD <code>{esc(data['head'][:12])}</code>, built "
            f"{site.when(data['now'])}; {site.zone_note()}</p>"
            f"<h2>Keys</h2>{_keys_table(site, data['live'], prefix, 'set')}"
            f"<h2>Recent refused attempts</h2>"
            f"{_refused_table(site, data['refused'], prefix, True)}"
            f"<h2>Recent commits</h2>{commits}"
            f"<h2>Handoff</h2>{_handoff(site, data['handoff'])}"
            f"<h2>Recent wake-ups</h2>{wakeups}"
            f"<h2>Every key's timeline</h2><p>{all_keys}</p><h2>Verify</h2>{checks}")
    return page(f"gitstate: {site.agent}", body, _crumbs(prefix))


def key_page(site: Site, key: str, tl: dict[str, Any]) -> str:
    from .data import stamp

    events = _table(["time", "event", "value", "actor", "reason", "commit"], [
        [site.when(e["time"]), esc(e["op"]), _value(e["value"]), esc(e["actor"] or "—"),
         esc(e["reason"]), site.commit(e["commit"], "../")] for e in tl["events"]])
    refused = _refused_table(site, tl["refused"], "../", False)
    wakeups = _table(["time (state then)", "runtime", "received", "commit"], [
        [site.at(stamp(r["time"]), site.when(r["time"]), "../"), esc(r["runtime"]),
         _value(r["value"]), site.commit(r["head"], "../")] for r in tl["wakeups"]],
        "no wake-up receipts")
    left = tl.get("left_out") or {}
    note = "" if not any(left.values()) else (
        f'<p class="muted">The newest entries are shown; {left.get("events", 0)} older '
        f'changes, {left.get("refused", 0)} refusals and {left.get("wakeups", 0)} wake-ups '
        f"are left out: <code>gitstate log --key {esc(key)}</code> and "
        "<code>gitstate log --refused</code> list them all.</p>")
    caption = (f'<p class="muted">The chart spans this key\'s own events, first to last, '
               f"with a margin; {site.zone_note()}. The last value holds until the report's "
               f"time, {site.when(site.now_text())}, or its expiry.</p>")
    body = (f"{note}{chart(key, tl, site.now, site.zone)}{caption}<h2>Changes</h2>{events}"
            f"<h2>Refused attempts</h2>{refused}"
            f"<h2>Wake-ups and the value each received</h2>{wakeups}")
    return page(f"{site.agent}: {key}", body, _crumbs("../"))


def commit_page(site: Site, data: dict[str, Any]) -> str:
    changes = data["changes"]
    rows = [[esc(k), _value(v["old"]["value"]), _value(v["new"]["value"])]
            for k, v in sorted((changes.get("changed") or {}).items())]
    rows += [[esc(k) + " (expiry)", site.when(v["old"]) if v["old"] else "none",
              site.when(v["new"]) if v["new"] else "none"]
             for k, v in sorted((changes.get("expiry_changed") or {}).items())]
    rows += [[esc(k), "—", _value(v.get("value") if isinstance(v, dict) else v)]
             for k, v in sorted((changes.get("added") or {}).items())]
    rows += [[esc(k), _value(v.get("value") if isinstance(v, dict) else v), "cleared"]
             for k, v in sorted((changes.get("removed") or {}).items())]
    if changes.get("handoff"):
        ho = changes["handoff"]
        rows.append(["handoff", _value((ho["old"] or {}).get("note")),
                     _value((ho["new"] or {}).get("note"))])
    trailers = _table(["trailer", "value"], [[esc(t[0]), _trailer(site, t[1])]
                                             for t in data.get("trailers") or []])
    body = (f"<p><code>{esc(data['commit'])}</code> {site.when(data['time'])} by "
            f"{esc(data.get('actor') or '—')}: {esc(data['op'])}</p>"
            f"<h2>Reason</h2><pre>{esc_lines(data['reason'])}</pre><h2>Key-level change</h2>"
            f"{_table(['key', 'before', 'after'], rows, 'no key changed')}"
            f'<h2>The section as injected</h2><div class="cols"><div><h3>before</h3><pre>'
            f"{esc_lines(data['section_before']) or '(empty)'}</pre></div><div><h3>after</h3>"
            f"<pre>{esc_lines(data['section_after']) or '(empty)'}</pre></div></div>"
            f"<h2>Trailers</h2>{trailers}")
    return page(f"{site.agent}: commit {data['commit'][:12]}", body, _crumbs("../"))


def _trailer(site: Site, text: str) -> str:
    """A trailer's value; a stored time shown in the agent's zone, the stored text after."""
    shown = local_text(text, site.zone)
    if not text.endswith("Z") or shown == text:
        return esc(text)
    return f'{site.when(text)} <span class="muted">(stored as {esc(text)})</span>'


AT_HELP = ("What a wake-up at that instant was given: the commit that was HEAD then, each "
           "key's value with whether its expiry had passed, and the section as "
           "<code>gitstate render --at</code> prints it. The report has a page for its own "
           "time, each recent wake-up and each expiry; for any other instant run "
           "<code>gitstate render --at 2026-08-13T11:03</code> (a time without an offset is "
           "read in the agent's zone) or <code>gitstate get --at</code>.")


def _held(data: dict[str, Any]) -> str:
    """The live keys of a "state at" as one short line."""
    import json

    live = [f"{k['key']} = {k['value'] if isinstance(k['value'], str) else json.dumps(k['value'])}"
            for k in data["keys"] if not k["expired"]]
    text = ", ".join(live) or "no live key"
    return esc(text if len(text) <= 120 else text[:119] + "…")


def at_index_page(site: Site, states: list[dict[str, Any]]) -> str:
    """Every instant with a page: when, why, the HEAD then and the keys a wake-up saw."""
    table = _table(["time", "what happened then", "HEAD then", "live keys then"], [
        [site.at(i["stamp"], site.when(i["time"]), "../"), esc(i["why"]),
         site.commit(i["commit"], "../"), _held(i)] for i in states])
    body = f"<p>{AT_HELP}</p><p class=\"muted\">{site.zone_note()}</p>{table}"
    return page(f"{site.agent}: the state at a time", body, _crumbs("../"))


def at_page(site: Site, data: dict[str, Any]) -> str:
    command = f"gitstate render --at {local_text(data['time'], site.zone)}"
    if data["commit"] is None:
        state = '<p class="muted">no state existed yet at this time</p>'
    else:
        state = (f"<h2>Keys</h2>{_keys_table(site, data['keys'], '../', 'then')}"
                 f"<h2>Handoff</h2>{_handoff(site, data['handoff'])}"
                 f"<h2>The section, as <code>{esc(command)}</code> prints it</h2>"
                 f"<pre>{esc_lines(data['section']) or '(empty)'}</pre>")
    body = (f"<p>{site.when(data['time'])}: {esc(data['why'])}. HEAD then "
            f"{site.commit(data['commit'], '../')}; {site.zone_note()}.</p>{state}"
            f'<p class="muted">{AT_HELP} <a href="index.html">Every instant with a '
            "page</a>.</p>")
    return page(f"{site.agent}: state at {local_text(data['time'], site.zone)}", body,
                _crumbs("../"))


def fleet_page(rows: list[dict[str, Any]], zones: dict[str, tzinfo] | None = None) -> str:
    zones = zones or {}

    def last(r: dict[str, Any]) -> str:
        stamp = (r.get("last_change") or {}).get("time")
        return Site(r["agent"], zones.get(r["agent"], UTC)).when(stamp)

    table = _table(["agent", "verify", "live keys", "last change (the agent's zone)",
                    "expiring soon"], [
        [f'<a href="agents/{esc(slug(r["agent"]))}/index.html">{esc(r["agent"])}</a>',
         '<span class="ok">ok</span>' if r.get("verify") == "ok" else
         f'<span class="bad">{esc(r.get("verify") or r.get("error") or "?")}</span>',
         esc(r.get("live_keys", "—")), last(r),
         esc(", ".join(r.get("expiring") or []) or "—")] for r in rows], "no agents")
    return page("gitstate: fleet", f"<p>{len(rows)} agents</p>{table}")
