"""Test-only fault injection: die at a named point of the write path.

Set ``GITSTATE_TEST_FAULT`` to one of :data:`POINTS` in a writer's environment and the process
exits abruptly (like SIGKILL: no cleanup, no finally) when it reaches that point. Unset, this
costs one string comparison per point. The reliability tests use it to prove that a write is
all or nothing at every step (docs/reliability.md).
"""

from __future__ import annotations

import os

# the write path's phases, in order (docs/reliability.md, "The write path's phases"):
# before the ref's rename nothing is committed; from "ref.renamed" on, the write is
POINTS = (
    "ref.locked", "pack.tmp_pack", "pack.tmp_idx", "ref.written", "pack.pack_renamed",
    "pack.idx_renamed", "objects", "ref.renamed", "ref", "checkout.file", "checkout.index",
    "worktree", "projection",
    # consolidation, after the write returned and the lock was released
    "merge.tmp_pack", "merge.tmp_idx", "merge.pack_renamed", "merge.idx_renamed",
    "merge.written", "merge.removed",
)
# sync (gitstate/sync.py, runsync.py): where push and pull can be killed between moving one
# ref and the next (docs/remote.md, "A push or pull that was killed")
SYNC_POINTS = (
    "pull.main_moved", "pull.runs_moved", "push.remote_moved", "push.rebased",
    "push.runs_sent",
)
COMMITTED = frozenset(POINTS[POINTS.index("ref.renamed"):])
_ACTIVE = os.environ.get("GITSTATE_TEST_FAULT")


def hit(point: str) -> None:
    """Exit at once if the fault for ``point`` is armed."""
    if point == _ACTIVE:
        os._exit(137)


def armed(point: str) -> bool:
    return point == _ACTIVE
