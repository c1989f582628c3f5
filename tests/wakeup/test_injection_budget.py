"""No wake-up receives an injection its runtime would cut: the whole section (keys, phase,
handoff; in its longest locale) is held within [gitstate] injection_max_chars at write time,
10,000 characters by default (what Claude Code keeps of a hook's additionalContext), and a
runtime with a smaller budget gets every key line and a pointer instead of the handoff."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitstate.api.repo import StateRepo
from gitstate.core.errors import InjectionTooLarge
from gitstate.core.model import Entry, Handoff, State
from gitstate.core.render import HEADER, section_chars, section_chars_bound, text_chars

ROOT = Path(__file__).resolve().parents[2]


def _hook(agent: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitstate", "--agent-dir", str(agent), "hook",
                           *args], input=stdin, capture_output=True, text=True, timeout=60,
                          check=False, cwd=ROOT)


def _agent(tmp_path: Path, extra: str = "") -> Path:
    agent = tmp_path / "agent"
    agent.mkdir()
    (agent / "config.toml").write_text(
        f'[gitstate]\ntimezone = "Asia/Taipei"\n{extra}\n'
        "[memory]\nworking_state_handoff_max_bytes = 65536\n")
    return agent


def _keys(repo: StateRepo, n: int = 22) -> None:
    for i in range(n):
        repo.set(f"stop_loss.{2300 + i}", 250 + i, f"rule {i} from the morning plan")


def _size(repo: StateRepo) -> int:
    schema = repo.schema()
    return section_chars(repo.state(), repo.now(), schema.compiled() if schema else None)


def _handoff_to(repo: StateRepo, target: int, char: str) -> int:
    """Leave a structured handoff that brings the section to exactly ``target`` characters
    (the size is linear in the evidence's length); returns the evidence length."""
    repo.handoff("closing the session", status="complete", evidence=char)
    length = 1 + target - _size(repo)
    repo.handoff("closing the session", status="complete", evidence=char * length)
    assert _size(repo) == target
    return length


@pytest.mark.parametrize("char", ["x", "倉"], ids=["ascii", "cjk"])
def test_a_section_at_the_limit_is_delivered_whole(tmp_path: Path, char: str) -> None:
    """At exactly 10,000 characters every hook delivers the whole section, in every locale,
    for SessionStart and UserPromptSubmit; one character more is refused at write time."""
    agent = _agent(tmp_path)
    with StateRepo.init(agent) as repo:
        _keys(repo)
        length = _handoff_to(repo, 10_000, char)
        head = repo.head()
        with pytest.raises(InjectionTooLarge) as err:
            repo.handoff("closing the session", status="complete",
                         evidence=char * (length + 1))
        assert err.value.details == {"size": 10_001, "limit": 10_000}
        assert "Shorten the handoff by at least 1 characters" in err.value.message
        assert repo.head() == head
        with pytest.raises(InjectionTooLarge):
            repo.set("one_more", 1, "a key line more")
        keys = sorted(repo.state().keys)
    longest = 0
    for locale in HEADER:
        for event, stdin in (("SessionStart", ""), ("UserPromptSubmit",
                             json.dumps({"hook_event_name": "UserPromptSubmit"}))):
            args = ["claude-code", "--locale", locale] + (["--event", event] if not stdin
                                                           else [])
            out = _hook(agent, *args, stdin=stdin)
            assert out.returncode == 0 and not out.stderr, out.stderr
            payload = json.loads(out.stdout)["hookSpecificOutput"]
            assert payload["hookEventName"] == event
            context = payload["additionalContext"]
            assert text_chars(context) <= 10_000
            assert all(f"- {k} = " in context for k in keys)
            assert char * length in context  # the handoff is there, whole
            longest = max(longest, text_chars(context))
    assert longest == 10_000


def test_the_issue_state_is_refused_not_cut(tmp_path: Path) -> None:
    """22 keys and an 11 kB structured handoff (13,662 characters once rendered, as seen in
    a real session) no longer get written, so never reach a wake-up as a preview."""
    agent = _agent(tmp_path)
    with StateRepo.init(agent) as repo:
        _keys(repo)
        with pytest.raises(InjectionTooLarge) as err:
            repo.handoff("wrap-up", status="continue", next_steps="step. " * 1900)
        assert err.value.details["size"] > 10_000
        assert repo.state().handoff is None


def test_a_runtime_with_a_smaller_budget_keeps_every_key_line(tmp_path: Path) -> None:
    """The gateway hook with its own budget (--max-chars 4000) on a 9,000-character section:
    every key line, the handoff replaced by a pointer, and
    a warning on stderr; the same for a Claude Code hook whose config allows more."""
    agent = _agent(tmp_path, "injection_max_chars = 20000")
    with StateRepo.init(agent) as repo:
        _keys(repo)
        _handoff_to(repo, 9_000, "y")
        keys = sorted(repo.state().keys)
    out = _hook(agent, "plain", "--max-chars", "4000", "--locale", "en")
    assert out.returncode == 0
    assert text_chars(out.stdout) <= 4000
    assert all(f"- {k} = " in out.stdout for k in keys)
    assert "read it with working_state_get" in out.stdout and "yyyy" not in out.stdout
    assert "handoff line was left out" in out.stderr
    via_script = subprocess.run(["sh", str(ROOT / "hooks" / "gateway" / "gitstate-section"),
                                 "--max-chars", "4000"], capture_output=True, text=True,
                                env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
                                     "GITSTATE_AGENT_DIR": str(agent)}, timeout=60,
                                check=False)
    assert via_script.returncode == 0 and text_chars(via_script.stdout) <= 4000, via_script
    assert all(f"- {k} = " in via_script.stdout for k in keys)
    # config allows 20,000 here, but Claude Code keeps 10,000: its hook never sends more
    with StateRepo(agent) as repo:
        _handoff_to(repo, 15_000, "z")
    out = _hook(agent, "claude-code", "--event", "SessionStart")
    context = json.loads(out.stdout)["hookSpecificOutput"]["additionalContext"]
    assert text_chars(context) <= 10_000 and all(f"- {k} = " in context for k in keys)


def test_budget_counts_what_a_javascript_host_counts() -> None:
    """Characters outside the BMP (emoji) count twice, as in a JavaScript string."""
    assert text_chars("262") == 3 and text_chars("倉") == 1 and text_chars("📈") == 2


TEXT = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(entries=st.lists(st.tuples(st.from_regex(r"[a-z][a-z0-9._]{0,20}", fullmatch=True),
                                  st.one_of(TEXT, st.integers(), st.floats(allow_nan=False,
                                            allow_infinity=False), st.booleans()), TEXT),
                        max_size=32),
       note=st.one_of(st.none(), TEXT))
def test_the_cheap_bound_never_undercounts(entries: list[tuple[str, object, str]],
                                           note: str | None) -> None:
    """A write skips the exact count only when the cheap bound is within the limit: the bound
    must never be below the real size, whatever the texts (CJK, emoji, controls)."""
    now = datetime(2026, 8, 13, 2, tzinfo=UTC)
    keys = {k: Entry(v, "2026-08-13T01:00:00Z", r, "agent",  # type: ignore[arg-type]
                     "2026-08-14T01:00:00Z" if i % 2 else None)
            for i, (k, v, r) in enumerate(entries)}
    handoff = Handoff(note, "2026-08-13T01:00:00Z", "agent", status="continue",
                      next_steps=note) if note else None
    state = State(keys, handoff)
    assert section_chars(state, now, None) <= section_chars_bound(state, now, None)


@pytest.mark.parametrize("text", ["", "stop_loss = 262", "跌破 262 出場", "😀 x", "a\U0010ffff",
                                  "\ud800 lone", "é\u200b\u202e"])
def test_text_chars_counts_utf16_units(text: str) -> None:
    assert text_chars(text) == sum(2 if ord(ch) > 0xFFFF else 1 for ch in text)
