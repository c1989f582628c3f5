"""A stateful property test: random sequences of set, clear, handoff, revert and clock moves
against a plain-dict reference model. After every step the rendered section, get and the JSONL
projection agree with the model, and verify passes at the end of every sequence.

Profiles: the default (CI) runs 150 sequences; GITSTATE_HYPOTHESIS_PROFILE=long runs 2,000.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gitstate.api.repo import StateRepo
from gitstate.audit import integrity
from gitstate.core import rules
from gitstate.core.errors import CasMismatch, InvalidInput, Refused
from gitstate.core.model import Entry, Handoff, State, format_time
from gitstate.core.render import render
from gitstate.core.results import to_json
from gitstate.system.config import resolve_tz
from tests.helpers import Clock

pytestmark = pytest.mark.slow  # one long hypothesis run

settings.register_profile("ci", max_examples=150, stateful_step_count=12, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("long", max_examples=2000, stateful_step_count=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
PROFILE = os.environ.get("GITSTATE_HYPOTHESIS_PROFILE", "ci")

KEYS = st.sampled_from(["stop_loss.2317", "position_cap", "phase", "note.a"])
VALUES = st.one_of(st.integers(-1000, 1000), st.sampled_from(["96%", "跌破", "x y", "262"]),
                   st.booleans())


class WorkingStateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="gitstate-stateful-"))
        self.clock = Clock(datetime(2026, 8, 13, 1, 0, tzinfo=UTC))
        self.repo = StateRepo.init(self.dir / "agent", clock=self.clock)
        self.model: dict[str, Entry] = {}
        self.handoff: Handoff | None = None
        self.commits: list[tuple[str, State, State]] = []  # (id, before, after)
        self.count = 1
        self.last = self.clock.now  # commit times never go back: the newest one so far

    def teardown(self) -> None:
        # verify (object walk, history checks) once per sequence, not after every step: the
        # damage it looks for persists, and per step it was 40% of this test's time
        try:
            failed = [c for c in integrity.verify(self.repo, use_git=False) if not c.ok]
            assert not failed, failed
        finally:
            self.repo.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def _moment(self) -> datetime:
        """A commit's time: the clock, or its parent's time when the clock stepped back."""
        return max(self.clock.now, self.last)

    def _now(self) -> str:
        return format_time(self._moment())

    def _state(self) -> State:
        return State(dict(self.model), self.handoff)

    def _committed(self, commit: str, before: State) -> None:
        self.commits.append((commit, before, self._state()))
        self.count += 1
        self.last = self._moment()

    @rule(key=KEYS, value=VALUES, ttl=st.one_of(st.none(), st.sampled_from([0.5, 1, 24])),
          cas=st.booleans())
    def set(self, key: str, value: Any, ttl: float | None, cas: bool) -> None:
        before = self._state()
        current = self.model.get(key)
        # with cas: the value just read (or None, "absent"): always the right expectation
        kwargs: dict[str, Any] = {"expected": current.value if current else None} if cas else {}
        result = self.repo.set(key, value, f"set {key}", ttl_hours=ttl, **kwargs)
        expires = format_time(self._moment() + timedelta(hours=ttl)) if ttl else None
        self.model[key] = Entry(value, self._now(), f"set {key}", "runtime", expires)
        self._committed(result.commit, before)

    @rule(key=KEYS, value=VALUES)
    def stale_cas_is_refused(self, key: str, value: Any) -> None:
        current = self.model.get(key)
        stale = "never-this-value-" + str(value)
        try:
            self.repo.set(key, value, "stale", expected=stale)
        except CasMismatch as exc:
            got = exc.details["current"]
            assert (got["value"] if got else None) == (current.value if current else None)
            return
        raise AssertionError("a stale expected value was accepted")

    @rule(key=KEYS)
    def clear(self, key: str) -> None:
        before = self._state()
        if key not in self.model:
            try:
                self.repo.clear(key, "clear")
            except Refused:
                return
            raise AssertionError("clearing an absent key was accepted")
        result = self.repo.clear(key, "clear")
        del self.model[key]
        self._committed(result.commit, before)

    @rule(note=st.text(min_size=1, max_size=30).filter(lambda t: " ".join(t.split())))
    def leave_handoff(self, note: str) -> None:
        try:
            rules.check_handoff(note, None, None, None, None, plain_max_chars=1200,
                                max_bytes=16384)
        except InvalidInput:
            return  # refused input; the rules have tests of their own (test_rules, corpus)
        before = self._state()
        result = self.repo.handoff(note)
        self.handoff = Handoff(" ".join(note.split()), self._now(), "runtime")
        self._committed(result.commit, before)

    @precondition(lambda self: bool(self.commits))
    @rule(pick=st.integers(0, 1000))
    def revert(self, pick: int) -> None:
        commit, before, after = self.commits[pick % len(self.commits)]
        now_state = self._state()
        keys = sorted(before.keys.keys() | after.keys.keys())
        changed = [k for k in keys if before.keys.get(k) != after.keys.get(k)]
        handoff_changed = before.handoff != after.handoff

        def same(a: Entry | None, b: Entry | None) -> bool:
            if a is None or b is None:
                return a is b
            return (type(a.value), a.value, a.expires_at) == (type(b.value), b.value,
                                                              b.expires_at)

        changed = [k for k in changed if not same(before.keys.get(k), after.keys.get(k))]
        conflict = any(not same(now_state.keys.get(k), after.keys.get(k)) for k in changed) or (
            handoff_changed and now_state.handoff != after.handoff)
        try:
            result = self.repo.revert(commit, "revert")
        except Refused as exc:
            assert conflict or exc.rule in ("revert.empty",), exc.rule
            return
        assert not conflict
        for k in changed:
            old = before.keys.get(k)
            if old is None:
                self.model.pop(k, None)
            else:
                self.model[k] = Entry(old.value, self._now(), "revert", "runtime", old.expires_at)
        if handoff_changed:
            h = before.handoff
            self.handoff = None if h is None else Handoff(h.note, self._now(), "runtime",
                                                          h.status, h.next_steps, h.evidence,
                                                          h.blocker)
        self._committed(result.commit, now_state)

    @rule(minutes=st.sampled_from([1, 29, 61, 60 * 25, -30]))
    def advance_clock(self, minutes: int) -> None:
        self.clock.advance(minutes=minutes)

    @invariant()
    def agrees_with_the_model(self) -> None:
        state = self.repo.state()
        assert state == self._state()
        view = to_json(self.repo.get())
        for key, entry in self.model.items():
            assert view["keys"][key]["value"] == entry.value
            assert view["keys"][key]["expired"] == entry.is_expired(self.clock.now)
        assert set(view["keys"]) == set(self.model)
        tz = resolve_tz(self.repo.config.timezone)
        assert self.repo.render(locale="en") == render(self._state(), self.clock.now, "en", tz)
        history = self.repo.full_history()
        assert len(history) == self.count and history[-1]["commit"] == self.repo.head()


WorkingStateMachine.TestCase.settings = settings.get_profile(PROFILE)
TestWorkingState = WorkingStateMachine.TestCase
