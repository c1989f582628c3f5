"""The wake-ups that read through the store: whenever the working tree cannot be trusted
as HEAD, a wake-up names a run, or a receipt's wake-up is rendered again.

``fastpath.py`` renders the section from the working tree when the stamp proves it is
HEAD's; this module is what it falls back on, and the only part of the wake-up that
imports the store (through ``api``) or the run ledger: a plain wake-up whose proof holds
never loads it (tests/wakeup/test_fastpath.py counts the modules it imports).
"""

from __future__ import annotations

import os

from ..core.layout import STATE_DIR
from ..core.render import fit, phase_lines, render
from ..core.timebase import datetime
from ..system.config import Config, resolve_tz
from ..system.safefile import read_regular


def section_from_store(agent_dir: str | os.PathLike[str], config: Config, moment: datetime,
                       locale: str, max_chars: int | None, set_tool: str | None,
                       get_tool: str | None) -> tuple[str, list[str], str, str | None]:
    """(the section within ``max_chars``, warnings, the whole section, HEAD), read from
    HEAD through dulwich: the slow, exact path when the stamp does not prove the working
    tree (a write in flight, a killed write's leftovers, a hand edit, a packed ref)."""
    from ..api.repo import StateRepo

    with StateRepo(os.fspath(agent_dir), config=config) as repo:
        head = repo.head()
        text = repo.render(now=moment, locale=locale, max_chars=max_chars, commit=head,
                           set_tool=set_tool, get_tool=get_tool)
        warnings = repo.worktree_warnings()
        full = repo.render(now=moment, locale=locale, commit=head,
                           set_tool=set_tool) if max_chars else text
    return text, warnings, full, head


def run_block(agent_dir: str | os.PathLike[str], run_id: str, *, locale: str,
              now: datetime, config: Config) -> tuple[str, str]:
    """A run's ``<state>`` block (gitstate/runs/render.py) for a wake-up that names a run
    (``--run`` or GITSTATE_RUN): from the cache the ledger writes beside the run's ref when
    the ref still names its commit, else through the store."""
    from pathlib import Path  # only here: pathlib stays off the plain wake-up path

    from ..runs.format import PREFIX
    from ..runs.ledger import cached
    from ..runs.model import next_action
    from ..runs.render import render_run
    from ..runs.validate import check_run_id

    check_run_id(run_id)
    git_dir = Path(agent_dir) / STATE_DIR / ".git"
    try:
        # never through a symlink, never a FIFO or device, never unbounded (safefile)
        head: str | None = read_regular(os.path.join(git_dir, PREFIX, run_id), 256).decode(
            "ascii").strip()
    except (OSError, UnicodeDecodeError):
        head = None
    run = cached(git_dir, run_id, head) if head else None
    if run is None or head is None:
        from ..api.repo import StateRepo

        with StateRepo(os.fspath(agent_dir), config=config) as repo:
            view = repo.runs.read(run_id)
        run, head = {"goal": view.goal.to_dict(), "state": view.state}, view.head
    text = render_run(run, next_action(run, now), locale, resolve_tz(config.timezone))
    return text, head


def rendered_again(agent_dir: str | os.PathLike[str],
                   receipt: dict[str, object]) -> tuple[str, str]:
    """(the section, the run's block) a receipt's wake-up received, rendered again from its
    commit, moment, locale, zone, budget and run (``gitstate render --receipt`` wraps them
    with ``fastpath.compose`` as the receipt's runtime received them)."""
    from ..api.repo import StateRepo
    from ..core.model import parse_time

    moment = parse_time(str(receipt["time"]))
    locale = str(receipt["locale"])
    tz = resolve_tz(str(receipt["tz"]) if receipt["tz"] else None)
    budget = receipt["max_chars"] if isinstance(receipt["max_chars"], int) else None
    with StateRepo(os.fspath(agent_dir)) as repo:
        text, block = "", ""
        if receipt["head"]:
            commit = str(receipt["head"])
            state, schema = repo.state_at(commit), repo.schema_at(commit)
            extra = phase_lines(schema.compiled() if schema else None, state, moment, locale)
            tools = repo.config.set_tool, repo.config.get_tool
            text = fit(state, moment, locale, tz, extra, budget, *tools)[0] if budget else \
                render(state, moment, locale, tz, extra, tools[0])
        if receipt["run_id"] and receipt["run_head"]:
            from ..runs.model import next_action
            from ..runs.render import render_run

            view = repo.runs.read(str(receipt["run_id"]), str(receipt["run_head"]))
            run = {"goal": view.goal.to_dict(), "state": view.state}
            block = render_run(run, next_action(run, moment), locale, tz)
    return text, block
