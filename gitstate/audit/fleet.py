"""`gitstate fleet`: one row per agent directory under a root.

The walk enters no .git directory and no agent's state/ (:func:`agent_dirs`). A clean
agent's quick row is read from plain files, as a wake-up reads the state, without opening
the repository (:func:`quick_row`); any other agent is opened (:func:`opened_row`), and a
test holds both rows equal.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..core.errors import GitStateError
from ..core.model import format_time
from ..core.records import ChangeRecord
from ..core.timebase import UTC, datetime
from ..system import gitcli
from . import integrity


def agent_dirs(root: Path) -> list[Path]:
    """The agent directories under ``root`` (each holds state/.git), sorted. The walk never
    enters a .git directory nor an agent's state/, and follows no symbolic link, so its
    cost grows with the directories around the agents, not with their histories."""
    found = []
    for folder, subdirs, _ in os.walk(root):
        if os.path.isdir(os.path.join(folder, "state", ".git")):
            found.append(Path(folder))
            subdirs[:] = [d for d in subdirs if d not in (".git", "state")]
        else:
            subdirs[:] = [d for d in subdirs if d != ".git"]
    return sorted(found)


def fleet(root: Path, expiring_hours: float = 4.0, progress: Any = None,
          full: bool = True) -> list[dict[str, Any]]:
    """One row per agent directory under ``root`` (:func:`agent_dirs`). ``full``: every
    verify check (reads each agent's every object and commit); else :func:`quick_checks`,
    whose cost per agent does not grow with its history."""

    agents = agent_dirs(root)
    rows = []
    for agent in (progress(agents) if progress else agents):
        row: dict[str, Any] = {"agent": str(agent.relative_to(root))}
        try:
            fast = None if full else quick_row(agent, expiring_hours)
            row.update(fast if fast is not None else opened_row(agent, expiring_hours, full))
        except GitStateError as exc:
            row.update({"error": f"[{exc.rule}] {exc.message}"})
        rows.append(row)
    return rows


def opened_row(agent: Path, expiring_hours: float, full: bool) -> dict[str, Any]:
    from ..api.repo import StateRepo

    with StateRepo(agent) as repo:
        now = repo.now()
        st = repo.remote.status()
        checks = integrity.verify(repo, use_git=False) if full else integrity.quick_checks(repo)
        mark, head = repo.reader.snapshot()
        last = repo.reader.recent(head, 1, mark)[0][0]
        return _row(repo.state().live(now), last, now, expiring_hours, checks,
                    st.ahead, st.behind, st.remote_url, full)


def _row(live: dict[str, Any], last: ChangeRecord, now: datetime, expiring_hours: float,
         checks: list[integrity.Check], ahead: int | None, behind: int, remote: str | None,
         full: bool) -> dict[str, Any]:
    soon = format_time(datetime.fromtimestamp(now.timestamp() + expiring_hours * 3600, UTC))
    failed = [c.name for c in checks if not c.ok]
    return {"live_keys": len(live),
            "last_change": {"time": last["time"], "actor": last["actor"],
                            "reason": last["reason"].splitlines()[0]},
            "expiring": sorted(k for k, e in live.items()
                               if e.expires_at and e.expires_at <= soon),
            "verify": "ok" if not failed else "FAIL " + ",".join(failed),
            "checks": "all" if full else "quick",
            "ahead": ahead, "behind": behind, "remote": remote}


def quick_row(agent: Path, expiring_hours: float) -> dict[str, Any] | None:
    """The quick row from plain files, read as a wake-up reads the state, when they prove
    it exact: the stamp names HEAD and the working file is its blob (the working tree check
    holds), the projection's newest line is HEAD (nothing to catch up, no rewritten tip),
    and the remote, if any, was last seen at HEAD (0 ahead, 0 behind). None: anything else,
    for :func:`opened_row` to open the repository (dulwich costs about 1.5 ms an agent, most
    of a fleet's time)."""
    from ..core.layout import REMOTE_REF, STATE_DIR
    from ..history.projection import Projection
    from ..system.config import load_config
    from ..wakeup.fastpath import head_and_state_fast, read_ref

    load_config(agent)  # a broken config.toml is the row's error, as on the slow path
    state_dir = agent / STATE_DIR
    fast = head_and_state_fast(state_dir)
    projection = Projection(state_dir)
    if fast is None or projection.last_commit() != fast[1]:
        return None
    (state, head), last = fast, projection.tail(1)
    try:
        config_text = integrity.git_config_text(state_dir)
    except OSError:
        return None
    urls = [v for sec, sub, key, v in gitcli.config_entries(config_text)
            if (sec, sub, key) == ("remote", "origin", "url")]
    seen = read_ref(str(state_dir / ".git"), REMOTE_REF)
    if len(urls) > 1 or any(c in "".join(urls) for c in "\\\"") or \
            (seen is not None and seen != head) or not last:
        return None  # a url only git's own parser reads right, or commits to count
    checks = [integrity.maintenance_check(state_dir), integrity.git_config_check(state_dir),
              integrity.stray_check(state_dir)]
    now = datetime.now(UTC).replace(microsecond=0)
    return _row(state.live(now), last[0], now, expiring_hours, checks,
                None if not urls else 0, 0, urls[0] if urls else None, False)
