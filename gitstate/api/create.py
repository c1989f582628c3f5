"""Creating and opening a state repository: ``StateRepo.init``'s directory, first commit
and refusal to write into a repository or directory that is not gitstate's; the store of
an opening; the projection rebuilt from git."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from ..core.errors import NotInitialized, Refused, StoreError, disk_full
from ..core.layout import STATE_DIR, STATE_FILE, WRITTEN_DIRS, stray_files
from ..core.model import EMPTY
from ..core.trailers import Change
from ..history.projection import Projection
from ..store import GitStore, ref_names
from ..store.transport import limits_for
from ..system import clock as clockbase
from ..system import locking, safefile, sshsig
from ..system.config import Config
from ..write.engine import identity, tz_offset


def state_dir_of(agent_dir: Path) -> Path:
    """``<agent_dir>/state``, refused unless it holds a repository and no directory gitstate
    writes into is a link."""
    state_dir = agent_dir / STATE_DIR
    if not (state_dir / ".git").is_dir():
        raise NotInitialized(f"{agent_dir} has no gitstate repository (no "
                             f"{state_dir}/.git); run `gitstate init` first")
    safefile.real_dirs(agent_dir, WRITTEN_DIRS)  # no directory of ours is a link
    return state_dir


def open_store(state_dir: Path, config: Config,
               signing_key: str | os.PathLike[str] | None) -> GitStore:
    """The store of one opening: its durability, transfer limits and commit signer."""
    store = GitStore(state_dir)
    store.set_durability(config.durability)
    store.limits = limits_for(config)
    store.signer = sshsig.signer(  # every commit of this opening (docs/remote.md)
        signing_key or os.environ.get("GITSTATE_SIGNING_KEY") or config.signing_key)
    if store.head() is None:
        store.close()
        raise NotInitialized(f"{state_dir} has no commit on main; run `gitstate init`")
    return store


def rebuild_history(projection: Projection, store: GitStore, head: str) -> int:
    """The projection rewritten from git alone (the write lock held); on an error the old
    file stays in place, so nothing was lost."""
    try:
        return projection.rebuild(store, head)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise disk_full("the history was not rebuilt; the file is as it was") from exc
        raise StoreError(f"the history could not be rebuilt ({exc.strerror or exc}); "
                         "the previous file was left as it was", rule="store.io") from exc


def init(agent_dir: Path, config: Config, actor: str,
         clock: Callable[[], datetime] | None) -> None:
    """``<agent_dir>/state`` with its first commit, made once under the directory lock; an
    error leaves nothing that a second ``init`` would not finish."""
    state_dir = agent_dir / STATE_DIR
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        with locking.directory(state_dir):
            _create(state_dir, config, actor, clock or clockbase.TrustedClock(state_dir / ".git"))
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise disk_full(f"cannot create {state_dir}; nothing usable was left") from exc
        raise StoreError(f"cannot create {state_dir} ({exc.strerror or exc}); nothing "
                         "usable was left behind: run `gitstate init` again once fixed",
                         rule=getattr(exc, "rule", None) or "store.io") from exc


def _create(state_dir: Path, config: Config, actor: str,
            clock: Callable[[], datetime]) -> None:
    """The repository and its first commit (directory lock held)."""
    from ..remote.githooks import install

    _refuse_foreign(state_dir)
    store = GitStore.create(state_dir)
    try:
        install(store.git_dir)
        with store.lock():
            if store.head() is not None:
                return
            with store.writing():
                when = clock()
                change = Change(op="init", reason="Initialize gitstate working state",
                                actor=actor)
                commit = store.commit(None, {STATE_FILE: EMPTY.to_bytes()}, change.message(),
                                      identity(config), int(when.timestamp()),
                                      tz_offset(config, when))
                if commit is not None:
                    store.checkout(commit)
                    Projection(state_dir).catch_up(store, commit)
    finally:
        store.close()


def _refuse_foreign(state_dir: Path) -> None:
    """init writes only into a new or empty directory or repository, or gitstate's own
    (whose main holds working_state.json); anything else is refused before it is touched."""
    refs = ref_names(state_dir / ".git") if (state_dir / ".git").is_dir() else []
    if refs:
        store = GitStore(state_dir)
        try:
            head = store.head()
            if head is not None and store.read_file(head, STATE_FILE) is not None:
                return
        finally:
            store.close()
        what = f"a git repository with history of its own ({', '.join(refs[:3])})"
    else:
        stray = stray_files(state_dir)
        if not stray:
            return
        what = f"a directory holding files that are not gitstate's ({', '.join(stray[:3])})"
    raise Refused(f"{state_dir} is {what}; gitstate keeps an agent's state in a repository "
                  "of its own and wrote nothing: give a new or empty agent directory "
                  f"(--agent-dir DIR), or move {state_dir} aside", rule="init.not_gitstate")
