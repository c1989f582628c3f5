"""The read model: states, schemas and history as of any commit, without the write lock.

``StateReader`` caches the state and schema of the commits it has read (keyed by commit
and blob id, so the cache can never be stale) and answers history from the JSONL
projection, catching it up in memory when git is ahead of it. The write engine and the
facade share one reader.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ..core.errors import HistoryRewritten, NotInitialized, StoreError
from ..core.layout import SCHEMA_FILE, STATE_FILE
from ..core.model import EMPTY, State
from ..core.records import ChangeRecord
from ..core.schema import Schema
from ..core.schemafile import parse_schema
from ..store import CommitInfo, GitStore
from .projection import Mark, Projection, record


class StateReader:
    def __init__(self, state_dir: Path, store: GitStore, projection: Projection) -> None:
        self.state_dir = state_dir
        self.store = store
        self.projection = projection
        self._state: tuple[str, State] | None = None
        self._schemas: dict[str, Schema | None] = {}

    def head(self) -> str:
        head = self.store.head()
        if head is None:
            raise NotInitialized(f"{self.state_dir} has no commit on main")
        return head

    def state_at(self, commit: str) -> State:
        if self._state and self._state[0] == commit:
            return self._state[1]
        data = self.store.read_file(commit, STATE_FILE)
        try:
            state = State.from_bytes(data) if data is not None else EMPTY
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"{STATE_FILE} at {commit[:12]} is not valid: {exc}",
                             rule="store.bad_state") from exc
        self._state = (commit, state)
        return state

    def remember(self, commit: str, state: State) -> None:
        """A state the caller just committed: the next read of ``commit`` is free."""
        self._state = (commit, state)

    def around(self, commit: str) -> tuple[CommitInfo, State, State]:
        """``commit``'s info and the states before and after it (what a revert undoes)."""
        info = self.store.commit_info(commit)
        before = self.state_at(info.parents[0]) if info.parents else EMPTY
        return info, before, self.state_at(commit)

    def schema_at(self, commit: str) -> Schema | None:
        """The schema committed at ``commit``, or None when the repository has none."""
        blob = self.store.file_ids(commit).get(SCHEMA_FILE)
        if blob is None:
            return None
        if blob not in self._schemas:
            data = self.store.read_file(commit, SCHEMA_FILE) or b""
            self._schemas[blob] = parse_schema(data.decode("utf-8"))
        return self._schemas[blob]

    def worktree_warnings(self) -> list[str]:
        # Without the lock, a write landing mid-check leaves a file of a newer commit that
        # looks like a hand edit. A writer moves the ref before it writes the file, so a
        # HEAD that did not move across the check makes the answer true.
        for _ in range(5):
            head = self.head()
            status = self.store.worktree_status(head)
            if not status.hand_edited or self.head() == head:
                break
        invalid = dict(status.invalid)
        return [
            f"[worktree.invalid_hand_edit] {self.state_dir / name} was edited by hand and is "
            f"no valid state ({invalid[name]}); HEAD's state is used and "
            "the file is not injected. Fix it and commit it with `gitstate adopt --reason "
            "...`, or restore HEAD's file with `gitstate adopt --discard`."
            if name in invalid else
            f"[worktree.hand_edit] {self.state_dir / name} was edited by hand and differs "
            "from HEAD; it is not injected. Commit it with `gitstate adopt --reason ...` or "
            "restore it with `gitstate adopt --discard`."
            for name in status.hand_edited
        ]

    # -- history ------------------------------------------------------------------------

    def snapshot(self) -> tuple[Mark, str]:
        """The projection's mark, then HEAD, in that order (see ``Mark``): without the
        lock, a write landing between the two reads must not look like a rewrite."""
        mark = self.projection.mark()
        return mark, self.head()

    def recent(self, head: str, n: int, mark: Mark) -> tuple[list[ChangeRecord], list[str]]:
        """The newest ``n`` changes up to ``head``, and the warning when the branch was
        rewritten (get still answers, from git; verify and writes refuse)."""
        try:
            pending = self.projection.missing(self.store, head, mark.last)
        except HistoryRewritten as exc:
            return [record(info) for info, _ in zip(self.store.walk(head), range(n),
                                                    strict=False)], [exc.message]
        newest = list(reversed(pending))[:n]
        if len(newest) < n:
            newest += self.projection.tail(n - len(newest), mark.end)
        return newest, []

    def history_iter(self, contains: bytes | None = None) -> Iterator[ChangeRecord]:
        """Every change newest first: commits the projection lacks, then the projection."""
        mark, head = self.snapshot()
        pending = self.projection.missing(self.store, head, mark.last)
        yield from reversed(pending)
        yield from self.projection.newest_first(contains, mark.end)

    def history_from(self, commit: str, n: int) -> list[ChangeRecord]:
        """The newest ``n`` changes as of ``commit`` (``get --at``)."""
        out: list[ChangeRecord] = []
        for rec in self.history_iter():
            if out or rec["commit"] == commit:
                out.append(rec)
                if len(out) >= n:
                    break
        return out

    def full_history(self) -> list[ChangeRecord]:
        """Every change, oldest first."""
        mark, head = self.snapshot()
        return self.projection.all(mark.end) + \
            self.projection.missing(self.store, head, mark.last)
