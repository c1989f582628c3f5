"""Reading the repository's objects: files, trees and commits at a commit, object sizes
from their headers, and first-parent history walks.

A miss lists the pack directory again and retries (a concurrent repack moves objects, a
long-lived process outlives packs), a damaged or missing object is a StoreError naming it,
and in strict mode (a fetch's quarantine, a pushed update in the server's hook) every
object is read by its header first and parsed by git fsck's rules before dulwich parses it.
The few most recent commits' parents and file ids are kept: commits are immutable.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

from dulwich.objects import Blob, Commit, ObjectID, ShaFile, Tree
from dulwich.repo import Repo

from ..core import layout
from ..core.errors import StoreError
from . import rawobj
from .objheader import HeaderError, Headers, read_strict

ObjT = TypeVar("ObjT", bound=ShaFile)


@dataclass(frozen=True)
class CommitInfo:
    """What a history walk yields per commit."""

    id: str
    parents: tuple[str, ...]
    time: int
    message: bytes
    author: str


class ObjectReads:
    """Object reads of one repository (``RepoBase`` sets the state declared here)."""

    repo: Repo
    strict: bool  # foreign objects: sizes from headers first, trees and commits by fsck's rules
    last_commit: CommitInfo | None
    _last_commit_time: int
    # commit id -> (parent ids, file name -> blob id), for the most recent commits
    _known: dict[str, tuple[tuple[str, ...], dict[str, str]]]
    _object_dirs: list[str]
    _headers: Headers | None

    def headers(self) -> Headers:
        """Header reads (sizes, bounded loose reads) over this store's object directories."""
        if self._headers is None:
            oid = self.repo.object_store.object_format.oid_length
            self._headers = Headers(self._object_dirs, oid)
        return self._headers

    def close_headers(self) -> None:
        if self._headers is not None:
            self._headers.close()
            self._headers = None

    def read_file(self, commit: str, name: str) -> bytes | None:
        """A file's bytes at ``commit``, or None when it is not in that tree."""
        tree = self._tree(commit)
        try:
            _, sha = tree[name.encode()]
        except KeyError:
            return None
        return self._read_as(sha, Blob, f"blob of {name} at {commit}").as_raw_string()

    def file_ids(self, commit: str) -> dict[str, str]:
        """File name -> blob id at ``commit``."""
        known = self._known.get(commit)
        if known is not None:
            return dict(known[1])
        # a name that is not UTF-8 cannot be one of ours; ``tree_entries`` reports it
        ids = {e.path.decode("utf-8", "replace"): e.sha.decode()
               for e in self._tree(commit).iteritems()}
        self._remember(commit, tuple(p.decode() for p in self._commit(commit).parents), ids)
        return dict(ids)

    def tree_entries(self, commit: str) -> list[tuple[bytes, int, str]]:
        """The (name, mode, object id) entries of ``commit``'s tree as its raw bytes hold
        them, in order, for checking a commit gitstate did not make: parsed by git fsck's
        rules (``rawobj.tree_entries``: duplicates, order, modes, names), a StoreError
        naming the rule for a tree git would refuse."""
        tree = self._tree(commit)  # dulwich keeps the raw bytes it parsed
        return rawobj.tree_entries(tree.as_raw_string(), len(tree.id) // 2)

    def object_size(self, sha: str) -> int:
        """The size of an object's content (a blob's byte count), read from its loose or
        pack header (a delta's from the delta's header): nothing of it is inflated."""
        for attempt in range(2):
            try:
                return self.headers().size(sha)[1]
            except KeyError as exc:
                self.refresh_objects()  # a pack written since: list them again
                if attempt:
                    raise StoreError(f"object {sha} is missing from the object store",
                                     rule="store.missing_object") from exc
            except HeaderError as exc:
                raise StoreError(f"object {sha} is damaged: {exc}",
                                 rule="store.corrupt_object") from exc
        raise AssertionError("unreachable")

    def commit_times(self, commit: str) -> tuple[int, int]:
        """(author time, committer time) of ``commit``."""
        last = self.last_commit
        if last is not None and last.id == commit:
            return last.time, self._last_commit_time
        obj = self._commit(commit)
        return obj.author_time, obj.commit_time

    def parents(self, commit: str) -> tuple[str, ...]:
        known = self._known.get(commit)
        if known is not None:
            return known[0]
        return tuple(p.decode() for p in self._commit(commit).parents)

    def _remember(self, commit: str, parents: tuple[str, ...], ids: dict[str, str]) -> None:
        if len(self._known) >= 512:  # a checkpointer writes many threads in turn
            self._known.pop(next(iter(self._known)))
        self._known[commit] = (parents, ids)

    def commit_info(self, commit: str) -> CommitInfo:
        obj = self._commit(commit)
        return CommitInfo(
            id=commit,
            parents=tuple(p.decode() for p in obj.parents),
            time=obj.commit_time,
            message=obj.message,
            author=obj.author.decode("utf-8", "replace"),
        )

    def walk(self, head: str, stop: str | None = None) -> Iterator[CommitInfo]:
        """First-parent history from ``head`` back to (excluding) ``stop``, newest first."""
        current: str | None = head
        while current and current != stop:
            info = self.commit_info(current)
            yield info
            current = info.parents[0] if info.parents else None

    def refresh_objects(self) -> None:
        """List the pack directory again: a long-lived process outlives packs, misses new ones."""
        self.close_headers()
        self.repo.object_store.packs  # noqa: B018  # lists the directory: adds, drops

    def _get(self, sha: ObjectID) -> ShaFile:
        """Read an object. dulwich looks in packs, then loose: a concurrent repack can move
        a loose object into a new pack between the two looks, and another process may have
        added a pack since, so a miss lists the pack directory again and retries, as git does."""
        if self.strict:
            return self._get_strict(sha)
        for attempt in range(3):
            try:
                return self.repo.object_store[sha]
            except KeyError:
                self.refresh_objects()
                time.sleep(0.005 * attempt)
        return self.repo.object_store[sha]

    def _get_strict(self, sha: ObjectID) -> ShaFile:
        """A foreign object, read by ``objheader.read_strict``: its size from its header
        against ``layout.OBJECT_MAX_BYTES`` before anything is inflated, trees and
        commits parsed by git fsck's rules (``rawobj``) before dulwich parses them."""
        try:
            type_num, raw = read_strict(self.headers(), self.repo.object_store.get_raw,
                                        sha.decode(), layout.OBJECT_MAX_BYTES)
        except HeaderError as exc:
            raise StoreError(f"object {sha.decode()} is damaged: {exc}",
                             rule="store.corrupt_object") from exc
        if type_num == 2:
            rawobj.tree_entries(raw, len(sha) // 2)
        elif type_num == 1:
            rawobj.check_commit(raw)
        return ShaFile.from_raw_string(type_num, raw, sha)

    def _commit(self, commit: str) -> Commit:
        return self._read_as(ObjectID(commit.encode()), Commit, f"commit {commit}")

    def _tree(self, commit: str) -> Tree:
        return self._read_as(self._commit(commit).tree, Tree, f"tree of {commit}")

    def _read_as(self, sha: ObjectID, kind: type[ObjT], what: str) -> ObjT:
        """An object of the expected type, or a StoreError naming the damaged object."""
        try:
            obj = self._get(sha)
        except KeyError as exc:
            raise StoreError(f"{what} ({sha.decode()}) is missing from the object store",
                             rule="store.missing_object") from exc
        except StoreError:
            raise
        except Exception as exc:  # zlib / header / format errors: a damaged object file
            raise StoreError(f"{what} ({sha.decode()}) is corrupt ({exc}); run "
                             "`gitstate verify`", rule="store.corrupt_object") from exc
        if not isinstance(obj, kind):
            raise StoreError(f"{what} ({sha.decode()}) is not a {kind.__name__.lower()}",
                             rule="store.corrupt_object")
        return obj

    def is_ancestor(self, ancestor: str, commit: str) -> bool:
        """Whether ``ancestor`` is on ``commit``'s first-parent chain (gitstate histories
        are linear)."""
        return any(info.id == ancestor for info in self.walk(commit))
