"""``repo.remote``: push and pull of the whole agent (main, run ledgers, refusal journals,
LangGraph threads when asked) over main's remote, and where main stands against it.

Built on first use: an opening that only reads never makes the remote's committer. With
``sync = "remote-first"`` the engine commits through it, so the facade builds it at open.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..core.results import SyncResult, SyncStatus
    from ..history.reader import StateReader
    from ..remote.sync import Remote
    from ..store import GitStore
    from ..system.config import Config
    from ..threads.sync import Threads
    from ..write.engine import WriteEngine
    from ..write.maintree import MainTree


class RemoteSide:
    """Main's remote, for one opened repository."""

    def __init__(self, store: GitStore, reader: StateReader, engine: WriteEngine,
                 tree: MainTree, config: Config) -> None:
        from ..remote.sync import Remote

        self.store, self.reader, self.engine, self.config = store, reader, engine, config
        self.main: Remote = Remote(engine, tree)  # main's push, pull and committer

    def url(self) -> str | None:
        return self.store.remote_url()

    def push(self) -> SyncResult:
        """Publish local commits (gitstate/remote/sync.py): a lease, and re-application when
        the remote moved on; then the run ledgers and the refusal journal."""
        from ..history import refusals
        from ..runs import sync as runsync

        result = self.main.push()
        # the network is waited on without the write lock; the tracking refs move under it
        result.runs = runsync.push(self.store, self.main.url(), self.engine.locked)
        journal = refusals.push(self.store, self.main.url(), self.engine.locked)
        if journal:
            result.runs["refusals_not_pushed"] = journal
        return result

    def pull(self) -> SyncResult:
        """Fast-forward from the remote; a diverged or rewritten remote is refused. The
        run ledgers come too, each replayed before it is taken (gitstate/runs/sync.py)."""
        from ..accept.trust import Trust
        from ..history import refusals
        from ..runs import sync as runsync

        result = self.main.pull()
        schema = self.reader.schema_at(self.reader.head())
        # each fetch waits on the network without the write lock, then takes it to check
        result.runs = runsync.pull(self.store, self.main.url(),
                                   dict(schema.run_writers) if schema else {},
                                   lock=self.engine.locked, trust=Trust.of(self.config))
        result.runs["refusal_journals"] = refusals.pull(self.store, self.main.url(),
                                                        lock=self.engine.locked)
        return result

    def status(self) -> SyncStatus:
        """Where main stands against the commit last seen on the remote (no network)."""
        return self.main.status()

    def push_threads(self, threads: Threads = True) -> dict[str, Any]:
        """Push LangGraph threads (ids, or True for all): what moved, as push reports runs."""
        from ..threads.sync import push

        return push(self.store, self.main.url(), threads, self.engine.locked)

    def pull_threads(self, threads: Threads = True) -> dict[str, Any]:
        """Pull LangGraph threads, each checked by the acceptance rule before it is taken."""
        from ..threads.sync import pull

        return pull(self.store, self.main.url(), threads, self.engine.locked)
