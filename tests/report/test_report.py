"""The auditor's report: the demo's story on the pages, self-contained (no script, no
network, every link resolves), hostile text escaped, the fleet index, `gitstate serve`, and
a real headless Chromium reading it (screenshots, the DOM, no console errors, tables
without JavaScript)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.cli.demo import run_demo
from gitstate.history import receipts
from gitstate.report.build import write_report
from gitstate.report.html import slug
from tests.helpers import Clock, run_cli

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.links += [v for k, v in attrs if k in ("href", "src") and v]


@pytest.fixture(scope="module")
def demo_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    agent = tmp_path_factory.mktemp("demo") / "agent"
    run_demo(agent, keep=True)
    site = agent.parent / "site"
    with StateRepo(agent) as repo:
        write_report(repo, site, "trader-agent")
    return site


def _key_page(site: Path, key: str = "stop_loss.2317") -> str:
    return (site / "keys" / f"{slug(key)}.html").read_text(encoding="utf-8")


def test_the_demo_story_is_on_the_pages(demo_site: Path) -> None:
    page = _key_page(demo_site)
    text = re.sub(r"<[^>]+>", " ", page)
    assert "262" in text and "跌破即出場不猶豫" in text  # 262 set with its reason
    assert "cas.mismatch" in text and "254" in text and "-5% per the strategy document" in text
    assert "258" in text and "明日沿用：跌破 258 出場" in text  # the later change
    assert " expire " in text and "its expiry passed" in text  # the expiry
    assert 'role="img"' in page and '<desc id="chart-desc">' in page
    assert page.count('class="mark refused"') == 1 and 'class="mark expire"' in page
    assert page.count('class="mark wakeup"') == 3  # the demo's three wake-ups
    index = (demo_site / "index.html").read_text(encoding="utf-8")
    assert "verify: ok" in index and "demo/wake-up" in index


def test_the_site_is_self_contained(demo_site: Path) -> None:
    pages = list(demo_site.rglob("*.html"))
    assert len(pages) >= 6
    for page in pages:
        html = page.read_text(encoding="utf-8")
        parser = _Links()
        parser.feed(html)
        assert not parser.tags & {"script", "img", "iframe", "link", "object", "embed"}
        for link in parser.links:
            assert "://" not in link, f"{page.name} links out: {link}"
            assert (page.parent / link).resolve().is_file(), f"{page.name}: {link} missing"


def test_hostile_text_is_escaped_and_visible(repo: StateRepo, clock: Clock,
                                            tmp_path: Path) -> None:
    """Every page, the expired-key rows and the state-at pages included."""
    repo.set("note", "</td><script>alert(1)</script>", "<b>bold</b> & evil", ttl_hours=1)
    repo.set("later", "<i>x</i>", "<script>alert(2)</script>")
    repo.handoff("</pre><img src=x onerror=alert(1)>", reason="<svg onload=alert(1)>")
    receipts.record(str(repo.state_dir / ".git"), repo.render().encode(), now=clock.now,
                    head=repo.head(), runtime="<b>rt</b>", event="", locale="en", tz=None,
                    max_chars=None, run_id=None, run_head=None)
    clock.advance(hours=2)
    site = tmp_path / "site"
    write_report(repo, site, "<i>agent</i>")
    for page in site.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        parser = _Links()
        parser.feed(html)
        assert not parser.tags & {"script", "img", "b", "i"}, page.name
        assert "onerror=alert" not in html.replace("onerror=alert(1)&gt;", "")
    key = _key_page(site, "note")
    assert "&lt;/td&gt;&lt;script&gt;" in key and "&lt;b&gt;bold&lt;/b&gt; &amp; evil" in key
    instants = (site / "at" / "index.html").read_text(encoding="utf-8")
    assert "a wake-up (&lt;b&gt;rt&lt;/b&gt;)" in instants and "note expired" in instants
    assert len(list((site / "at").glob("*.html"))) == 4  # the list, now, the wake-up, expiry
    assert '<tr class="expired">' in (site / "index.html").read_text(encoding="utf-8")
    # invisible and bidi characters never reach a state (the input rules refuse them); a
    # page would show any that did as \\uXXXX
    from gitstate.report.html import esc

    assert esc("262\u202e001\u202c<") == "262\\u202e001\\u202c&lt;"


def test_the_fleet_index(tmp_path: Path) -> None:
    for name, zone in (("desk-a", "Asia/Taipei"), ("desk-b", "UTC")):
        (tmp_path / "fleet" / name).mkdir(parents=True)
        (tmp_path / "fleet" / name / "config.toml").write_text(
            f'[gitstate]\ntimezone = "{zone}"\n')
    for name in ("desk-a", "desk-b"):
        with StateRepo.init(tmp_path / "fleet" / name) as repo:
            repo.set("stop_loss.2317", 262, f"{name} rule")
    out = run_cli("report", "--html", str(tmp_path / "site"), "--fleet",
                  str(tmp_path / "fleet"))
    assert out.returncode == 0, out.stderr
    assert "pages: file://" in out.stdout and "2/2 agents" in out.stderr
    index = (tmp_path / "site" / "index.html").read_text()
    assert "desk-a" in index and "desk-b" in index
    assert index.count("+08:00") == 1 and index.count("+00:00") == 1  # each agent's zone
    for name in ("desk-a", "desk-b"):
        assert (tmp_path / "site" / "agents" / slug(name) / "index.html").is_file()


def test_serve_is_read_only_and_loopback_by_default(repo: StateRepo) -> None:
    repo.set("stop_loss.2317", 262, "rule")
    proc = subprocess.Popen([sys.executable, "-m", "gitstate", "--agent-dir",
                             str(repo.agent_dir), "serve", "--port", "0"], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        url = re.search(r"http://\S+", line)
        assert url, line
        base = url.group(0)
        with urllib.request.urlopen(base, timeout=10) as resp:
            body = resp.read().decode()
            assert resp.status == 200 and "stop_loss.2317" in body
            assert "default-src 'none'" in resp.headers["Content-Security-Policy"]
        with urllib.request.urlopen(base + f"keys/{slug('stop_loss.2317')}.html",
                                    timeout=10) as resp:
            assert "262" in resp.read().decode()
        with urllib.request.urlopen(base + "at/index.html", timeout=10) as resp:
            listed = resp.read().decode()
            assert "the report&#x27;s time" in listed and "stop_loss.2317 = 262" in listed
        stamp = re.search(r'href="\.\./at/(\w+)\.html"', listed)
        assert stamp, listed[-400:]
        with urllib.request.urlopen(base + f"at/{stamp.group(1)}.html", timeout=10) as resp:
            assert "stop_loss.2317 = 262" in resp.read().decode()
        with urllib.request.urlopen(base + "at/20260813T030300Z.html", timeout=10) as resp:
            asked = resp.read().decode()  # live, any instant: not only the listed ones
            assert "the time asked for" in asked and "2026-08-13T11:03:00+08:00" in asked
            assert "stop_loss.2317 = 262" in asked
        repo.set("stop_loss.2317", 258, "live: the next request sees it")
        with urllib.request.urlopen(base, timeout=10) as resp:
            assert "258" in resp.read().decode()
        for bad in ("../../etc/passwd", "keys/../../config.toml", "commits/zz.html",
                    "at/20261399T999999Z.html", "at/..%2f..%2fconfig.toml", "at/x.html"):
            with pytest.raises(urllib.error.HTTPError) as exc:
                urllib.request.urlopen(base + bad, timeout=10)
            assert exc.value.code == 404
        post = urllib.request.Request(base, data=b"x", method="POST")
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(post, timeout=10)
        assert exc.value.code == 405
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    exposed = run_cli("serve", "--host", "0.0.0.0", agent_dir=repo.agent_dir)
    assert exposed.returncode == 2 and "[usage.token]" in exposed.stderr


def test_serve_off_loopback_requires_the_token(repo: StateRepo) -> None:
    repo.set("k", 1, "rule")
    env = {**os.environ, "GITSTATE_REPORT_TOKEN": "s3cret-token-value"}
    proc = subprocess.Popen([sys.executable, "-m", "gitstate", "--agent-dir",
                             str(repo.agent_dir), "serve", "--host", "0.0.0.0", "--port",
                             "0"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stderr is not None
        port = re.search(r":(\d+)/", proc.stderr.readline())
        assert port
        base = f"http://127.0.0.1:{port.group(1)}/"
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(base, timeout=10)
        assert exc.value.code == 401
        wrong = urllib.request.Request(base, headers={"Authorization": "Bearer nope"})
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(wrong, timeout=10)
        good = urllib.request.Request(base, headers={
            "Authorization": "Bearer s3cret-token-value"})
        with urllib.request.urlopen(good, timeout=10) as resp:
            assert resp.status == 200
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def test_the_demo_ends_with_the_report() -> None:
    out = run_cli("demo", process=True)
    assert out.returncode == 0, out.stderr
    found = re.search(r"The auditor's report \((\d+) pages, no network needed\): "
                      r"file://(\S+)", out.stdout)
    assert found, out.stdout[-500:]
    index = Path(found.group(2))
    assert index.is_file() and "verify: ok" in index.read_text(encoding="utf-8")
    shutil.rmtree(index.parent.parent, ignore_errors=True)  # the kept agent directory


# -- a real browser ------------------------------------------------------------------------

def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", "--no-first-run", "--enable-logging=stderr",
                           "--v=0", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
def test_headless_chromium_reads_the_report(demo_site: Path, tmp_path: Path) -> None:
    commit = next(p for p in (demo_site / "commits").glob("*.html")
                  if "258" in p.read_text(encoding="utf-8"))
    targets = {"overview": demo_site / "index.html",
               "key": demo_site / "keys" / f"{slug('stop_loss.2317')}.html",
               "commit": commit, "instants": demo_site / "at" / "index.html",
               "at": demo_site / "at" / "20260813T030300Z.html"}
    for name, page in targets.items():
        shot = tmp_path / f"{name}.png"
        out = _chromium("--window-size=1280,800", f"--screenshot={shot}", page.as_uri())
        assert shot.is_file(), out.stderr[-800:]
        assert _png_size(shot) == (1280, 800)
        assert "CONSOLE" not in out.stderr and "ERR_" not in out.stderr, out.stderr[-800:]
    dom = _chromium("--dump-dom", targets["key"].as_uri()).stdout
    assert "跌破即出場不猶豫" in dom and "cas.mismatch" in dom and "明日沿用" in dom
    assert "its expiry passed" in dom and "Value of stop_loss.2317 over time" in dom
    # without JavaScript the tables are all there (there is no script to need)
    plain = _chromium("--disable-javascript", "--dump-dom",
                      targets["key"].as_uri()).stdout
    assert plain.count("<table>") == dom.count("<table>") == 3
    assert 'class="legend"' in dom and "time in Asia/Taipei, UTC+08:00" in dom
    at = _chromium("--dump-dom", targets["at"].as_uri()).stdout  # the state a wake-up saw
    assert "stop_loss.2317 = 262" in at and "render --at 2026-08-13T11:03:00+08:00" in at
    listed = _chromium("--dump-dom", targets["instants"].as_uri()).stdout
    assert listed.count("a wake-up (demo/wake-up)") == 3


# -- the output directory: nothing written inside one gitstate did not just make --------

def _site_agent(tmp_path: Path) -> Path:
    agent = tmp_path / "agent"
    with StateRepo.init(agent) as repo:
        repo.set("stop_loss.2317", 262, "break below, exit")
    return agent


def _report(agent: Path, out: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return run_cli("report", "--html", str(out), *more, agent_dir=agent)


def _untouched(elsewhere: Path, victim: Path) -> None:
    assert list(elsewhere.iterdir()) == [victim]
    assert victim.read_bytes() == b"precious\n"


@pytest.fixture
def elsewhere(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    victim = folder / "victim"
    victim.write_bytes(b"precious\n")
    return folder, victim


def test_a_link_planted_in_the_output_directory_is_refused(
        tmp_path: Path, elsewhere: tuple[Path, Path]) -> None:
    """OUT/keys -> elsewhere, and a planted OUT/.index.html.<pid>.tmp -> victim for every
    pid a report could have: refused (report.out_not_ours) before a page is written."""
    folder, victim = elsewhere
    agent = _site_agent(tmp_path)
    out = tmp_path / "site"
    out.mkdir()
    (out / "keys").symlink_to(folder)
    refused = _report(agent, out)
    assert refused.returncode == 2 and "[report.out_not_ours]" in refused.stderr
    assert "'keys'" in refused.stderr and "Traceback" not in refused.stderr
    _untouched(folder, victim)
    (out / "keys").unlink()
    for pid in range(os.getpid() - 50, os.getpid() + 200):
        (out / f".index.html.{pid}.tmp").symlink_to(victim)
    refused = _report(agent, out)
    assert refused.returncode == 2 and "[report.out_not_ours]" in refused.stderr
    _untouched(folder, victim)
    assert not (out / "index.html").exists()


def test_a_site_written_before_is_replaced_whole_never_written_through(
        tmp_path: Path, elsewhere: tuple[Path, Path]) -> None:
    folder, victim = elsewhere
    agent = _site_agent(tmp_path)
    out = tmp_path / "site"
    assert _report(agent, out).returncode == 0
    first = (out / "index.html").stat().st_ino
    again = _report(agent, out, "--force")  # its own site: replaced, a fresh directory
    assert again.returncode == 0, again.stderr
    assert (out / "index.html").stat().st_ino != first
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".site.")]  # no leftovers
    page = next((out / "keys").iterdir())
    page.unlink()
    page.symlink_to(victim)  # a page of the old site swapped for a link
    refused = _report(agent, out, "--force")
    assert refused.returncode == 2 and "[report.out_not_ours]" in refused.stderr
    _untouched(folder, victim)


def test_an_output_directory_that_is_a_symlink_is_refused(
        tmp_path: Path, elsewhere: tuple[Path, Path]) -> None:
    folder, victim = elsewhere
    agent = _site_agent(tmp_path)
    out = tmp_path / "site"
    out.symlink_to(folder)
    refused = _report(agent, out)
    assert refused.returncode == 2 and "[report.out_not_dir]" in refused.stderr
    _untouched(folder, victim)
    assert out.is_symlink()
    empty = tmp_path / "empty"
    empty.mkdir()
    written = _report(agent, empty)  # an empty directory is taken
    assert written.returncode == 0 and (empty / "index.html").is_file()


def test_a_site_written_before_is_kept_unless_forced(tmp_path: Path) -> None:
    """report --html over a report written before refuses (report.out_exists, exit 2,
    naming --force) and leaves the old site as it was; with --force it is replaced."""
    agent = _site_agent(tmp_path)
    out = tmp_path / "site"
    assert _report(agent, out).returncode == 0
    index = out / "index.html"
    before, inode = index.read_bytes(), index.stat().st_ino
    refused = _report(agent, out)
    assert refused.returncode == 2 and "[report.out_exists]" in refused.stderr
    assert "--force" in refused.stderr and "Traceback" not in refused.stderr
    assert index.read_bytes() == before and index.stat().st_ino == inode
    forced = _report(agent, out, "--force")
    assert forced.returncode == 0, forced.stderr
    assert index.stat().st_ino != inode
    fleet = run_cli("report", "--html", str(out), "--fleet", str(tmp_path))
    assert fleet.returncode == 2 and "[report.out_exists]" in fleet.stderr
