"""Test-only fault injection: die, or wait, at a named point of the write path.

Set ``GITSTATE_TEST_FAULT`` to one of :data:`POINTS` in a writer's environment and the process
exits abruptly (like SIGKILL: no cleanup, no finally) when it reaches that point. Set
``GITSTATE_TEST_PAUSE`` to ``<point>:<folder>`` instead and the process stops there (a
barrier): it creates ``<folder>/paused`` and waits until ``<folder>/resume`` exists, so a
test can run something else (a gc, another writer) at exactly that moment and then let the
write go on. Unset, each costs one string comparison per point. The reliability tests use
them to prove that a write is all or nothing at every step and that maintenance never
destroys a write in flight (docs/reliability.md).
"""

from __future__ import annotations

import os
import time

# the write path's phases, in order (docs/reliability.md, "The write path's phases"):
# before the ref's rename nothing is committed; from "ref.renamed" on, the write is
POINTS = (
    "ref.locked", "pack.tmp_pack", "pack.tmp_idx", "ref.written", "pack.idx_renamed",
    "pack.pack_renamed", "objects", "ref.renamed", "ref", "checkout.file", "checkout.index",
    "worktree", "projection",
    # consolidation, after the write returned and the lock was released
    "merge.tmp_pack", "merge.tmp_idx", "merge.idx_renamed", "merge.pack_renamed",
    "merge.written", "merge.removed",
)
# sync (gitstate/remote/sync.py, gitstate/runs/sync.py): where push and pull can be killed
# between moving one ref and the next (docs/remote.md, "A push or pull that was killed")
SYNC_POINTS = (
    "pull.main_moved", "pull.runs_moved", "push.remote_moved", "push.rebased",
    "push.runs_sent",
)
COMMITTED = frozenset(POINTS[POINTS.index("ref.renamed"):])
_ACTIVE = os.environ.get("GITSTATE_TEST_FAULT")
_PAUSE, _, _PAUSE_DIR = os.environ.get("GITSTATE_TEST_PAUSE", "").partition(":")


def hit(point: str) -> None:
    """Exit at once if the fault for ``point`` is armed; wait if its pause is."""
    if point == _ACTIVE:
        os._exit(137)
    if point == _PAUSE:
        _wait(point)


def armed(point: str) -> bool:
    return point == _ACTIVE


def _wait(point: str) -> None:
    """Stop at ``point`` once: announce it, then wait for the test to let go."""
    global _PAUSE
    _PAUSE = ""  # once per process: the writes after it run through
    from . import safefile

    safefile.write_atomic(os.path.join(_PAUSE_DIR, "paused"), point.encode())
    while not os.path.exists(os.path.join(_PAUSE_DIR, "resume")):
        time.sleep(0.005)
