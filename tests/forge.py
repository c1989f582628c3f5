"""Commits made the way an attacker would: with dulwich, straight into a repository's object
store, bypassing every gitstate check. Used by the hostile-remote and plain-git tests."""

from __future__ import annotations

from pathlib import Path

from dulwich.objects import Blob, Commit, Tree
from dulwich.repo import Repo

from gitstate.core.model import EMPTY, State
from gitstate.core.trailers import Change
from gitstate.history.replay import apply_change

MODE = 0o100644


class Forge:
    """Writes crafted commits on ``refs/heads/main`` of the repository at ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def head(self) -> str | None:
        with Repo(str(self.path)) as repo:
            try:
                return repo.refs[b"refs/heads/main"].decode()
            except KeyError:
                return None

    def state(self, commit: str | None = None) -> State:
        commit = commit or self.head()
        if commit is None:
            return EMPTY
        with Repo(str(self.path)) as repo:
            tree = repo[repo[commit.encode()].tree]  # type: ignore[attr-defined]
            _, sha = tree[b"working_state.json"]
            return State.from_bytes(repo[sha].as_raw_string())

    def time(self, commit: str | None = None) -> int:
        commit = commit or self.head()
        assert commit is not None
        with Repo(str(self.path)) as repo:
            return int(repo[commit.encode()].commit_time)  # type: ignore[attr-defined]

    def commit(self, change: Change | None = None, *, when: int | None = None,
               state: State | bytes | None = None, message: bytes | None = None,
               extra: dict[bytes, tuple[int, bytes]] | None = None,
               drop: tuple[bytes, ...] = (), parents: list[str] | None = None,
               author_time: int | None = None, move: bool = True) -> str:
        """A commit on main's head: ``change``'s trailers as the message and, unless
        ``state`` is given, exactly the state its replay yields (so only the attack under
        test is wrong); ``extra`` adds raw tree entries (name -> (mode, bytes))."""
        base = self.head()
        when = when if when is not None else (self.time(base) + 60 if base else 1_786_000_000)
        if state is None:
            assert change is not None
            state = apply_change(self.state(base), change, when)
        data = state if isinstance(state, bytes) else state.to_bytes()
        if message is None:
            assert change is not None
            message = change.message()
        with Repo(str(self.path)) as repo:
            store = repo.object_store
            tree = Tree()
            if base is not None:
                for entry in repo[repo[base.encode()].tree].iteritems():  # type: ignore[attr-defined]
                    tree.add(entry.path, entry.mode, entry.sha)
            blob = Blob.from_string(data)
            store.add_object(blob)
            tree.add(b"working_state.json", MODE, blob.id)
            for name, (mode, content) in (extra or {}).items():
                if mode == 0o040000:  # a subtree holding one file
                    inner_blob = Blob.from_string(content)
                    store.add_object(inner_blob)
                    inner = Tree()
                    inner.add(b"config", MODE, inner_blob.id)
                    store.add_object(inner)
                    tree.add(name, mode, inner.id)
                    continue
                extra_blob = Blob.from_string(content)
                store.add_object(extra_blob)
                tree.add(name, mode, extra_blob.id)
            for name in drop:
                del tree[name]
            store.add_object(tree)
            commit = Commit()
            commit.tree = tree.id
            commit.parents = [p.encode() for p in parents] if parents is not None else (
                [base.encode()] if base else [])
            commit.author = commit.committer = b"mallory <m@example.invalid>"
            commit.commit_time = when
            commit.author_time = author_time if author_time is not None else when
            commit.author_timezone = commit.commit_timezone = 0
            commit.encoding = b"UTF-8"
            commit.message = message
            store.add_object(commit)
            if move:
                repo.refs[b"refs/heads/main"] = commit.id
            return commit.id.decode()
