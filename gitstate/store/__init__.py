"""The git store: the only package that talks to dulwich.

It owns the state repository on disk: creating it, the kernel write lock, building and
durably writing commits, the compare-and-swap of a ref, checking the working tree out,
fetching and pushing, packing, and walking history. It knows nothing about keys or rules:
callers hand it file contents and a message.

Write protocol (see docs/design.md, "The write path"), all under ``flock(.git/gitstate.lock)``:

1. ``<ref>.lock`` is taken and the ref compared with the base (``commits``); the commit's
   new objects are written as one small pack and its index (``packwrite``), flushed
   together with the lock file's new id as the durability mode says (``durability``);
2. the lock is renamed over the ref: this is the commit point;
3. the working tree file, the index entry and the stamp ``<commit> <blob>`` (what the render
   fast path checks) are replaced by ``fs.swap_write``, never flushed.

A crash before 2 leaves only objects no ref names; a crash after 2 leaves a working tree
that equals the parent commit's file (or, after a pull that moved main several commits, the
file the stamp names), which :meth:`GitStore.worktree_status` recognises as a leftover
(repaired silently) rather than a hand edit (reported, never injected).

``base`` opens the repository and holds the lock, with reading objects and history
(``objects``) and refs (``refs``); ``worktree``, ``transport`` (fetch), ``pushes`` and
``packs`` add the working tree, remotes and packing on top of it.

May import: core, system.
"""

from __future__ import annotations

from .base import BRANCH, ZERO, WorktreeStatus
from .commits import CommitOps
from .fs import atomic_write, git_blob_id, ref_names
from .objects import CommitInfo
from .packs import PackOps
from .pushes import PushOps
from .trees import TreeOps
from .worktree import WorktreeOps

__all__ = ["BRANCH", "ZERO", "CommitInfo", "GitStore", "WorktreeStatus", "atomic_write",
           "git_blob_id", "ref_names"]


class GitStore(WorktreeOps, PushOps, PackOps, TreeOps, CommitOps):
    """One state repository (``<agent dir>/state``, or a bare server repository)."""
