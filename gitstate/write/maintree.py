"""Main's re-derivable companions: the working tree, the JSONL projection and the schema
cache, kept in step with the branch.

The write engine calls :meth:`MainTree.recover` under the lock before each write on main
and :meth:`MainTree.after_commit` after the ref moved; sync calls :meth:`refresh` after it
moved main itself. A killed writer's leftovers are repaired; a hand edit of
working_state.json is moved aside (kept under ``.git``), never silently lost, and left in
place for ``adopt``.
"""

from __future__ import annotations

import contextlib
import json
from datetime import UTC, datetime
from pathlib import Path

from ..core.errors import HistoryRewritten, InvalidInput, StoreError
from ..core.layout import HAND_EDITS_DIR, SCHEMA_CACHE_FILE, SCHEMA_FILE, STATE_FILE, TREE_FILES
from ..core.results import DiscardResult
from ..core.schema import compiled_json
from ..history.projection import record
from ..history.reader import StateReader
from ..store import atomic_write
from ..system import faults, safefile
from .planners import Base, Plan


class MainTree:
    def __init__(self, reader: StateReader) -> None:
        self.reader = reader
        self.store = reader.store
        self.projection = reader.projection
        self.state_dir = reader.state_dir

    def repair_on_open(self) -> None:
        """On open, when no write is running: catch the projection up and repair what a
        killed write left in the working tree (hand edits are left alone, for `adopt`; a
        rewritten history is left for `verify` to report, never silently accepted)."""
        head = self.reader.head()
        try:
            if self.projection.last_commit() == head and \
                    self.store.worktree_matches_stamp(head):
                return
        except StoreError:
            return  # a damaged object: leave everything as it is for `verify` to name
        with self.store.try_lock() as locked, contextlib.suppress(StoreError):
            if not locked:
                return
            head = self.reader.head()  # a write may have landed before the lock was ours
            with contextlib.suppress(HistoryRewritten, OSError):
                self.projection.catch_up(self.store, head)
            status = self.store.worktree_status(head)
            # A leftover is repaired; a clean tree with a missing or stale stamp (lost in a
            # crash, or written by an older version) gets its stamp back, or every wake-up
            # would pay for the slow path until the next write.
            if not status.hand_edited and not self.store.worktree_matches_stamp(head):
                with contextlib.suppress(OSError):
                    self.keep_damaged(status.damaged)
                    self.store.checkout(head)
                    self.store.remove_temp_files()
                    self.write_schema_cache(head)

    def recover(self, adopting: bool) -> list[str]:
        """Lock held: repair a killed writer's leftovers; keep hand edits aside."""
        head = self.reader.head()
        warnings: list[str] = []
        clean = self.store.worktree_matches_stamp(head)
        status = None if clean else self.store.worktree_status(head)
        if adopting:
            if status is None or not status.hand_edited:
                raise InvalidInput("working_state.json has no hand edit to adopt",
                                   rule="adopt.nothing")
        elif status is not None:
            if status.hand_edited:
                saved = self.save_hand_edits(status.hand_edited)
                warnings += [f"{name} had been edited by hand; the edit was kept at {path} "
                             "and the file restored to HEAD" for name, path in saved]
            if status.damaged:
                self.keep_damaged(status.damaged)
            if not status.clean:
                self.store.checkout(head)
                self.store.remove_temp_files()
                self.write_schema_cache(head)
        self.projection.catch_up(self.store, head)
        return warnings

    def edited(self) -> bytes:
        """The hand-edited working_state.json (for adopt)."""
        return (self.state_dir / STATE_FILE).read_bytes()

    def discard(self) -> DiscardResult:
        """Lock held: move the hand edits aside and restore the files of HEAD."""
        head = self.reader.head()
        edited = self.store.worktree_status(head).hand_edited
        if not edited:
            raise InvalidInput(f"{STATE_FILE} has no hand edit to discard: it already "
                               "holds HEAD's state", rule="adopt.nothing")
        saved = self.save_hand_edits(edited)
        self.store.checkout(head)
        return DiscardResult(kept=[str(p) for _, p in saved])

    def save_hand_edits(self, names: tuple[str, ...]) -> list[tuple[str, Path]]:
        keep = self.state_dir / ".git" / HAND_EDITS_DIR
        keep.mkdir(exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
        saved = []
        for name in names:
            dst = keep / f"{stamp}-{name}"
            (self.state_dir / name).replace(dst)
            saved.append((name, dst))
        return saved

    def keep_damaged(self, names: tuple[str, ...]) -> None:
        """A crash-damaged working file is restored from HEAD; a non-empty one is copied
        aside first (nothing is lost, even what is probably garbage)."""
        keep = self.state_dir / ".git" / HAND_EDITS_DIR
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%f")
        for name in names:
            with contextlib.suppress(OSError):
                data = safefile.read_regular(self.state_dir / name, TREE_FILES.get(name, 1 << 20))
                if data.strip(b"\0 \t\r\n"):
                    keep.mkdir(exist_ok=True)
                    safefile.write_atomic(keep / f"{stamp}-damaged-{name}", data)

    def after_commit(self, commit: str, plan: Plan, base: Base) -> None:
        """The post-commit step on main: files, schema cache, one projection line."""
        data = plan.files.get(STATE_FILE)  # serialized once, by the engine
        self.store.checkout(commit, {STATE_FILE: data if data is not None
                                     else plan.state.to_bytes()})
        if plan.schema_changed:  # otherwise the cache is still HEAD's
            self.write_schema_cache(commit)
        faults.hit("worktree")
        info = self.store.last_commit
        if info is None or info.id != commit or \
                not self.projection.append_after(base.commit, [record(info)]):
            self.projection.catch_up(self.store, commit)

    def refresh(self, head: str) -> None:
        """After main moved by sync: the working tree, schema cache and projection follow."""
        self.store.checkout(head)
        self.write_schema_cache(head)
        self.projection.catch_up(self.store, head)

    def write_schema_cache(self, commit: str) -> None:
        """Cache what the render fast path needs from the schema, keyed by its blob id."""
        blob = self.store.file_ids(commit).get(SCHEMA_FILE)
        path = self.state_dir / ".git" / SCHEMA_CACHE_FILE
        if blob is None:
            path.unlink(missing_ok=True)
            return
        schema = self.reader.schema_at(commit)
        assert schema is not None
        data = json.dumps({"blob": blob, **json.loads(compiled_json(schema))}).encode()
        atomic_write(path, data, fsync=False)
