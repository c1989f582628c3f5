"""Property: any call either succeeds with exactly one commit or fails cleanly with none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitstate.api.repo import UNSET, StateRepo
from gitstate.core.errors import GitStateError
from gitstate.core.model import STATE_FILE
from tests.helpers import Clock

keys = st.one_of(
    st.sampled_from(["stop_loss.2317", "position_cap", "Stop_Loss.2317", "phase", "k"]),
    st.from_regex(r"[a-z][a-z0-9._-]{0,12}", fullmatch=True),
    st.text(max_size=12),
)
texts = st.one_of(st.text(max_size=30), st.sampled_from(["", " ", "a\nb", "## x", "\u2028"]))
values = st.one_of(texts, st.integers(), st.floats(), st.booleans(), st.none(),
                   st.lists(st.integers(), max_size=2))
ttls = st.one_of(st.none(), st.floats(), st.integers(-5, 10**6))
expects = st.one_of(st.just(UNSET), st.none(), values)
statuses = st.one_of(st.none(), st.sampled_from(["continue", "complete", "blocked", "x"]))
opt_texts = st.one_of(st.none(), texts)

calls = st.one_of(
    st.tuples(st.just("set"), keys, values, texts, ttls, expects),
    st.tuples(st.just("clear"), keys, texts, expects),
    st.tuples(st.just("handoff"), opt_texts, statuses, opt_texts, opt_texts, opt_texts),
    st.tuples(st.just("get")),
    st.tuples(st.just("render")),
)


def _apply(repo: StateRepo, call: tuple[Any, ...]) -> bool:
    """Run one call; True when it was a write."""
    name = call[0]
    if name == "set":
        repo.set(call[1], call[2], call[3], ttl_hours=call[4], expected=call[5])
    elif name == "clear":
        repo.clear(call[1], call[2], expected=call[3])
    elif name == "handoff":
        repo.handoff(call[1], status=call[2], next_steps=call[3], evidence=call[4],
                     blocker=call[5])
    elif name == "get":
        repo.get()
        return False
    else:
        repo.render()
        return False
    return True


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(calls, min_size=1, max_size=12))
def test_every_call_is_one_commit_or_none(tmp_path: Path, clock: Clock,
                                          sequence: list[tuple[Any, ...]]) -> None:
    """Random calls of every operation: one commit on success, nothing on refusal."""
    agent = tmp_path / f"a{id(sequence)}"
    with StateRepo.init(agent, clock=clock) as repo:
        for call in sequence:
            head = repo.head()
            count = sum(1 for _ in repo.store.walk(head))
            data = (repo.state_dir / STATE_FILE).read_bytes()
            try:
                wrote = _apply(repo, call)
            except GitStateError:
                assert repo.head() == head
                assert (repo.state_dir / STATE_FILE).read_bytes() == data
                continue
            if wrote:
                assert sum(1 for _ in repo.store.walk(repo.head())) == count + 1
                assert repo.store.commit_info(repo.head()).parents == (head,)
            else:
                assert repo.head() == head
            clock.advance(minutes=7)
