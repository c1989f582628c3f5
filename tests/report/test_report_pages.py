"""What the report's pages say: the key chart spans the key's own events and its labels
stay in the frame and apart, a legend names the marks, every time is in the agent's zone
with its offset, the state at chosen instants (as `render --at` prints it), the overview's
old -> new, refused attempts and expired keys, and a CJK font named in every font stack."""

from __future__ import annotations

import html
import itertools
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.cli.demo import run_demo
from gitstate.history import receipts
from gitstate.report.build import write_report
from gitstate.report.chart import span, ticks
from gitstate.report.html import STYLE, slug
from tests.helpers import Clock, run_cli

W = 1100  # the chart's viewBox width
CJK = ("Noto Sans CJK", "WenQuanYi Zen Hei")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    agent = tmp_path_factory.mktemp("demo") / "agent"
    run_demo(agent, keep=True)
    site = agent.parent / "site"
    with StateRepo(agent) as repo:
        write_report(repo, site, "trader-agent")
    return agent, site


class _Svg(HTMLParser):
    """The chart's text labels (x, y, size, anchor, text) and its marks' centres."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[tuple[float, float, float, str, str]] = []
        self.marks: list[tuple[str, float, float]] = []
        self._text: dict[str, str] | None = None
        self._svg = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self._svg = self._svg or tag == "svg"
        if self._svg and tag == "text":
            self._text = {**a, "data": ""}
        if tag == "circle" and a.get("class", "").startswith("mark "):
            self.marks.append((a["class"], float(a["cx"]), float(a["cy"])))
        if tag == "polygon" and a.get("class", "").startswith("mark "):  # its centre
            points = [tuple(map(float, p.split(","))) for p in a["points"].split()]
            self.marks.append((a["class"], sum(p[0] for p in points) / len(points),
                               (min(p[1] for p in points) + max(p[1] for p in points)) / 2))

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text["data"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "text" and self._text is not None:
            t = self._text
            self.texts.append((float(t["x"]), float(t["y"]), float(t.get("font-size", 12)),
                               t.get("text-anchor", "start"), t["data"]))
            self._text = None
        if tag == "svg":
            self._svg = False


def _svg(page: str) -> _Svg:
    parser = _Svg()
    parser.feed(page)
    return parser


def _extent(x: float, size: float, anchor: str, text: str) -> tuple[float, float]:
    width = len(text) * size * 0.55  # at least this wide in any sans font
    return {"start": (x, x + width), "end": (x - width, x),
            "middle": (x - width / 2, x + width / 2)}[anchor]


def _key_page(site: Path, key: str) -> str:
    return (site / "keys" / f"{slug(key)}.html").read_text(encoding="utf-8")


def test_the_chart_spans_the_key_events_not_the_report_time(repo: StateRepo,
                                                            clock: Clock, tmp_path: Path
                                                            ) -> None:
    """A day of changes reported 90 days later fills the chart (it took 1% of it)."""
    for value in (262, 258, 255, 250):
        repo.set("stop_loss.2317", value, "the day's rule", ttl_hours=1 if value == 250 else None)
        clock.advance(hours=2)
    clock.advance(days=90)
    write_report(repo, tmp_path / "site", "desk")
    svg = _svg(_key_page(tmp_path / "site", "stop_loss.2317"))
    xs = [cx for cls, cx, _ in svg.marks if cls in ("mark set", "mark expire")]
    assert len(xs) == 5
    assert max(xs) - min(xs) > 0.8 * W, xs
    low = max(cy for cls, cx, cy in svg.marks if cls == "mark set")  # 250, the lowest
    expiry = [cy for cls, _, cy in svg.marks if cls == "mark expire"]
    assert len(expiry) == 1 and abs(expiry[0] - low) < 2  # marked at the value it ended
    labels = {t[4] for t in svg.texts}
    assert {"262", "258", "255", "250"} <= labels  # each step wide enough for its value
    assert "10:00" in labels and "2026-08-13" in labels  # ticks in local wall-clock time
    assert any("Asia/Taipei, UTC+08:00" in t[4] for t in svg.texts)


def test_a_dense_chart_keeps_its_labels_in_the_frame_and_apart(repo: StateRepo,
                                                               clock: Clock,
                                                               tmp_path: Path) -> None:
    """150 changes and 30 wake-ups of one key: no label reaches past the frame and no two
    value labels overlap; the wake-ups' legend does not list 150 colours."""
    for i in range(150):
        repo.set("rule.0", i * 10, f"change {i}")
        clock.advance(seconds=30)
        if i % 5 == 4:
            receipts.record(str(repo.state_dir / ".git"), repo.render().encode(),
                            now=clock.now, head=repo.head(), runtime="plain", event="",
                            locale="en", tz=None, max_chars=None, run_id=None, run_head=None)
    write_report(repo, tmp_path / "site", "desk")
    svg = _svg(_key_page(tmp_path / "site", "rule.0"))
    for x, _, size, anchor, text in svg.texts:
        low, high = _extent(x, size, anchor, text)
        assert low >= 0 and high <= W, (x, anchor, text)
    values = sorted((x, y, size, text) for x, y, size, anchor, text in svg.texts
                    if size == 12 and re.fullmatch(r"\d+", text))
    assert values, "no value label at all"
    for (x1, _, size, text), (x2, _, _, _) in itertools.pairwise(values):
        assert x1 + len(text) * size * 0.55 <= x2, (text, x1, x2)
    assert sum("received" not in t[4] and t[4].isdigit() and t[2] == 11 for t in svg.texts) \
        <= 6  # the y axis names at most a few values; no legend of 150 colours


def test_a_legend_names_each_mark_shape(demo: tuple[Path, Path]) -> None:
    page = _key_page(demo[1], "stop_loss.2317")
    legend = page[page.index('<g class="legend">'):]
    legend = legend[:legend.index("</g>")]
    for name in ("set", "expiry", "refused attempt", "wake-up"):
        assert f">{name}" in legend, name
    assert "circle" in legend and "polygon" in legend and "path" in legend


def test_every_time_is_in_the_agent_zone_with_its_offset(demo: tuple[Path, Path]) -> None:
    """The demo's zone is Asia/Taipei: no page shows a UTC time (a commit's trailers show
    the stored text after the local time)."""
    _, site = demo
    for page in site.rglob("*.html"):
        text = re.sub(r'<span class="muted">\(stored as [^)]*\)</span>', "",
                      page.read_text(encoding="utf-8"))
        assert not re.search(r"\d{2}:\d{2}(:\d{2})?Z", text), page.name
        assert "+08:00" in text, page.name
    index = (site / "index.html").read_text(encoding="utf-8")
    assert "Asia/Taipei, UTC+08:00" in index
    assert "2026-08-13T11:03:00+08:00" in index  # the first wake-up, local
    key = _key_page(site, "stop_loss.2317")
    assert "2026-08-13T09:04:00+08:00" in key and "2026-08-13T13:30:00+08:00" in key


def _pre(page: str) -> str:
    return html.unescape(re.search(r"<pre>(.*?)</pre>", page, re.S).group(1))  # type: ignore[union-attr]


def test_the_state_at_each_wake_up_is_a_page(demo: tuple[Path, Path]) -> None:
    """at/index.html lists the wake-ups, the expiry and the report's time; the 11:03 page
    shows 262 and the section exactly as `render --at 2026-08-13T11:03` prints it; at
    14:00 the stop-loss had expired."""
    agent, site = demo
    index = (site / "at" / "index.html").read_text(encoding="utf-8")
    assert index.count("a wake-up (demo/wake-up)") == 3 and "stop_loss.2317 expired" in index
    assert "render --at" in index and "the report&#x27;s time" in index
    assert "stop_loss.2317 = 262" in index
    morning = (site / "at" / "20260813T030300Z.html").read_text(encoding="utf-8")
    printed = run_cli("render", "--at", "2026-08-13T11:03", agent_dir=agent)
    assert printed.returncode == 0, printed.stderr
    assert _pre(morning).rstrip("\n") == printed.stdout.rstrip("\n")
    assert "262" in _pre(morning) and "跌破即出場不猶豫" in morning
    assert "gitstate render --at 2026-08-13T11:03:00+08:00" in morning
    later = (site / "at" / "20260813T060000Z.html").read_text(encoding="utf-8")
    row = re.search(r'<tr class="expired">(.*?)</tr>', later, re.S)
    assert row and "stop_loss.2317" in row.group(1) and "expired" in row.group(1)
    assert "stop_loss.2317" not in _pre(later)
    overview = (site / "index.html").read_text(encoding="utf-8")
    assert 'href="at/20260813T030300Z.html"' in overview and 'href="at/index.html"' in overview


def test_the_overview_has_old_to_new_and_refused_attempts(demo: tuple[Path, Path]) -> None:
    index = (demo[1] / "index.html").read_text(encoding="utf-8")
    assert "<th>old → new</th>" in index and "262 → 258" in index and "— → 262" in index
    refused = index[index.index("Recent refused attempts"):]
    refused = refused[:refused.index("</table>")]
    assert "cas.mismatch" in refused and "254" in refused and "262" in refused
    assert f'href="keys/{slug("stop_loss.2317")}.html"' in refused
    assert "-5% per the strategy document" in refused


def test_expired_keys_stay_on_the_overview_marked(repo: StateRepo, clock: Clock,
                                                  tmp_path: Path) -> None:
    repo.set("stop_loss.2317", 262, "today only", ttl_hours=1)
    repo.set("position_cap", "96%", "standing")
    clock.advance(hours=3)
    write_report(repo, tmp_path / "site", "desk")
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    row = re.search(r'<tr class="expired">(.*?)</tr>', index, re.S)
    assert row and "stop_loss.2317" in row.group(1) and "262" in row.group(1)
    assert '<span class="badge bad">expired</span>' in row.group(1)
    assert "2026-08-13T10:04:00+08:00" in row.group(1)  # when it expired, local
    assert index.count('<tr class="expired">') == 1 and "position_cap" in index


def test_every_font_stack_names_a_cjk_font() -> None:
    """Body, SVG text, pre and code each name a CJK family before the generic one, so a
    reason in Chinese does not show as boxes where the default font lacks the glyphs."""
    stacks = re.findall(r"([^{}]+)\{[^}]*font(?:-family)?:([^;}]*)", STYLE)
    covered = set()
    for selectors, value in stacks:
        if "," not in value:
            continue  # a size alone
        assert any(name in value for name in CJK), (selectors, value)
        generic = max(value.rfind("sans-serif"), value.rfind("monospace"))
        assert all(value.find(name) < generic for name in CJK if name in value)
        covered |= {s.strip() for s in selectors.split(",")}
    assert {"body", "svg text", "pre", "code"} <= covered, covered


@pytest.mark.parametrize(("seconds", "pattern", "first"), [
    (3, r"13:53:4\d", "13:53:42"),  # changes seconds apart: ticks by the second
    (5 * 3600, r"\d\d:00", "10:00"),  # hours, on the hour
    (40 * 86400, r"\d\d-\d\d", None),  # weeks (day labels), not forty days
    (3 * 365 * 86400, r"20\d\d-(01|07)", "2026-07"),  # half years
])
def test_the_time_axis_ticks_at_round_local_times(seconds: int, pattern: str,
                                                  first: str | None) -> None:
    """Round wall-clock instants in the zone, at most nine, evenly apart, labelled to their
    unit, the date (or year) given on the first tick."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    zone = ZoneInfo("Asia/Taipei")
    start = datetime(2026, 8, 13, 13 if seconds < 60 else 9, 53, 43, tzinfo=zone).timestamp()
    a, b = span([start, start + seconds])
    assert a < start and b > start + seconds and (b - a) < seconds * 1.1 + 2
    found = ticks(a, b, zone)
    assert 2 <= len(found) <= 9 and all(a <= t <= b for t, _, _ in found)
    assert all(re.fullmatch(pattern, label) for _, label, _ in found), found
    assert first is None or found[0][1] == first, found
    gaps = {round(t2 - t1) for (t1, _, _), (t2, _, _) in itertools.pairwise(found)}
    assert len(gaps) == 1 or seconds > 365 * 86400, gaps  # months differ in length
    if seconds < 365 * 86400:
        assert found[0][2] in ("2026-08-13", "2026"), found  # the context on the first
