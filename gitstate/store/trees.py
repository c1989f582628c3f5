"""Nested trees, for refs whose commits hold directories (LangGraph checkpoint threads).

Main's commits are flat (two files); a checkpoint thread's commit holds the checkpoint,
its channel values and every blob of the thread by channel and version. ``tree_commit``
applies a set of path changes to a base commit's tree, rebuilding only the trees on the
changed paths (every other subtree, and so every blob not changed, is the same object as
in the base), writes the new objects as one pack, and moves the ref by compare-and-swap,
like a commit on main.
"""

from __future__ import annotations

from dulwich.objects import Blob, Commit, ObjectID, Tree

from ..core.layout import FILE_MODE
from ..system import faults
from . import packwrite
from .commits import CommitOps

DIR_MODE = 0o040000


class BlobRef(str):
    """An existing blob's id, given in place of new contents (a value unchanged since an
    earlier commit is the same object, not a copy)."""


Change = bytes | BlobRef | None  # new contents, an existing blob, or delete


class TreeOps(CommitOps):
    """Commits of nested trees on any ref, and reading them back by path."""

    def tree_commit(self, ref: str, base: str | None, changes: dict[str, Change],
                    message: bytes, identity: bytes, when: int, *,
                    parent: str | None = None) -> str | None:
        """Apply ``changes`` (path -> contents, BlobRef or None) to ``base``'s tree; commit
        with ``parent`` (default ``base``) as its parent and move ``ref`` from ``base``.
        Returns the commit, or None when the ref moved."""
        objects: list[Blob | Tree | Commit] = []
        root = self._tree(base).id if base is not None else None
        tree_id = self._apply(root, changes, objects)
        commit = Commit()
        commit.tree = ObjectID(tree_id.encode())
        up = parent if parent is not None else base
        commit.parents = [ObjectID(up.encode())] if up else []
        commit.author = commit.committer = identity
        commit.author_time = commit.commit_time = when
        commit.author_timezone = commit.commit_timezone = 0
        commit.encoding = b"UTF-8"
        commit.message = message
        objects.append(commit)
        name, pack, index = packwrite.build(objects, self.repo.object_store.object_format)
        packwrite.write(self.pack_dir, name, pack, index, self.flush)
        faults.hit("objects")
        new_id = commit.id.decode()
        return new_id if self.move_ref(ref, base, new_id) else None

    def _apply(self, tree_id: str | ObjectID | None, changes: dict[str, Change],
               objects: list[Blob | Tree | Commit]) -> str:
        tree = Tree()
        if tree_id is not None:
            for entry in self._read_as(ObjectID(str(tree_id).encode()) if isinstance(
                    tree_id, str) else tree_id, Tree, "tree").iteritems():
                tree.add(entry.path, entry.mode, entry.sha)
        below: dict[str, dict[str, Change]] = {}
        for path, change in changes.items():
            head, sep, rest = path.partition("/")
            if sep:
                below.setdefault(head, {})[rest] = change
                continue
            if change is None:
                if head.encode() in tree:
                    del tree[head.encode()]
            elif isinstance(change, BlobRef):
                tree.add(head.encode(), FILE_MODE, ObjectID(change.encode()))
            else:
                blob = Blob.from_string(change)
                objects.append(blob)
                tree.add(head.encode(), FILE_MODE, blob.id)
        for head, sub in below.items():
            existing = None
            if head.encode() in tree:
                mode, sha = tree[head.encode()]
                existing = sha if mode == DIR_MODE else None
            new_sub = self._apply(existing, sub, objects)
            if new_sub == _EMPTY_TREE:
                if head.encode() in tree:
                    del tree[head.encode()]
            else:
                tree.add(head.encode(), DIR_MODE, ObjectID(new_sub.encode()))
        objects.append(tree)
        return tree.id.decode()

    def tree_paths(self, commit: str, paths: list[str]) -> dict[str, str]:
        """path -> blob id for those of ``paths`` that are files in ``commit``'s tree (the
        commit and each tree on the way read once)."""
        trees: dict[str, Tree] = {"": self._tree(commit)}
        out = {}
        for path in paths:
            parts = path.split("/")
            at, tree = "", trees[""]
            for part in parts[:-1]:
                at += part + "/"
                if at not in trees:
                    try:
                        mode, sha = tree[part.encode()]
                    except KeyError:
                        break
                    if mode != DIR_MODE:
                        break
                    trees[at] = self._read_as(sha, Tree, f"tree {at}")
                tree = trees[at]
            else:
                try:
                    mode, sha = tree[parts[-1].encode()]
                except KeyError:
                    continue
                if mode != DIR_MODE:
                    out[path] = sha.decode()
        return out

    def tree_files(self, commit: str, prefix: str = "") -> dict[str, str]:
        """Path -> blob id of every file at or below ``prefix`` in ``commit``'s tree."""
        tree = self._tree(commit)
        for part in [p for p in prefix.split("/") if p]:
            try:
                mode, sha = tree[part.encode()]
            except KeyError:
                return {}
            if mode != DIR_MODE:
                return {}
            tree = self._read_as(sha, Tree, f"tree {prefix}")
        out: dict[str, str] = {}
        self._walk_tree(tree, "", out)
        return out

    def _walk_tree(self, tree: Tree, at: str, out: dict[str, str]) -> None:
        for entry in tree.iteritems():
            path = at + entry.path.decode("utf-8", "replace")
            if entry.mode == DIR_MODE:
                self._walk_tree(self._read_as(entry.sha, Tree, f"tree {path}"), path + "/",
                                out)
            else:
                out[path] = entry.sha.decode()

    def blob(self, sha: str) -> bytes:
        return self._read_as(ObjectID(sha.encode()), Blob, f"blob {sha}").as_raw_string()


_EMPTY_TREE = Tree().id.decode()
