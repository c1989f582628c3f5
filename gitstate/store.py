"""The git store: the only module that talks to dulwich.

It owns the state repository on disk: creating it, the kernel write lock, building and
durably writing commits, the compare-and-swap of ``refs/heads/main``, checking the working
tree out, and walking history. It knows nothing about keys or rules: callers hand it file
contents and a message.

Write protocol (see docs/design.md, "The write path"), all under ``flock(.git/gitstate.lock)``:

1. blob, tree and commit objects are written with fsync (``fsync_object_files``);
2. the ref moves by ``set_if_equals(base, new)``: this is the commit point;
3. the working tree file is replaced atomically (unique temp name, fsync, rename), the index
   entry updated, and a stamp ``<commit> <blob>`` written for the render fast path.

A crash before 2 leaves only unreachable objects; a crash after 2 leaves a working tree
that equals the parent commit's file, which :meth:`GitStore.worktree_status` recognises as
a leftover (repaired silently) rather than a hand edit (reported, never injected).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from dulwich.errors import NotGitRepository
from dulwich.file import FileLocked
from dulwich.index import index_entry_from_stat, write_index_dict
from dulwich.objects import Blob, Commit, ObjectID, ShaFile, Tree
from dulwich.refs import Ref
from dulwich.repo import Repo

from . import faults, gitcli, layout, locking, safefile
from .errors import NotInitialized, StoreError
from .layout import (
    FETCHED_REF,
    FILE_MODE,
    INCOMING_PREFIX,
    LOCK_FILE,
    REMOTE_REF,
    SCHEMA_FILE,
    STAMP_FILE,
    STATE_FILE,
    TREE_FILES,
    WRITING_FILE,
)

BRANCH = Ref(layout.BRANCH.encode())
ZERO = ObjectID(b"0" * 40)
T = TypeVar("T")
ObjT = TypeVar("ObjT", bound=ShaFile)


def git_blob_id(data: bytes) -> str:
    """The git blob id of ``data`` (what the render fast path computes with hashlib)."""
    return Blob.from_string(data).id.decode()


@dataclass(frozen=True)
class CommitInfo:
    """What a history walk yields per commit."""

    id: str
    parents: tuple[str, ...]
    time: int
    message: bytes
    author: str


@dataclass(frozen=True)
class WorktreeStatus:
    """How the working tree relates to HEAD."""

    clean: bool
    leftover: bool  # a killed write's remains: repair silently
    hand_edited: tuple[str, ...]  # files edited by hand: report, never inject


class GitStore:
    """One state repository (``<agent dir>/state``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # a working repository keeps .git; a bare one (a server) is the git dir itself
        self.git_dir = path / ".git" if (path / ".git").exists() else path
        try:
            self.repo = Repo(str(path))
        except NotGitRepository as exc:
            raise NotInitialized(
                f"{path} is not a gitstate repository; run `gitstate init` first",
            ) from exc
        # dulwich leaves loose objects un-fsynced by default (invariant 4).
        self.repo.object_store.fsync_object_files = True
        # commit id -> (parent ids, file name -> blob id): commits are immutable, so the few
        # most recent ones are kept to spare re-reading objects on every write.
        self._known: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {}
        self.last_commit: CommitInfo | None = None
        self._last_commit_time = 0
        self.last_objects: list[str] = []

    def use_quarantine(self, object_dir: str) -> None:
        """In a pre-receive hook, the pushed objects wait in git's quarantine directory
        (GIT_OBJECT_DIRECTORY): read from it first, then from the repository."""
        from dulwich.object_store import DiskObjectStore, OverlayObjectStore

        overlay = OverlayObjectStore([DiskObjectStore(object_dir), self.repo.object_store])
        self.repo.object_store = overlay  # type: ignore[assignment]

    # -- creation -------------------------------------------------------------------------

    @classmethod
    def create(cls, path: Path) -> GitStore:
        """Open the repository at ``path``, creating it (on branch main, no commit yet) when
        it is absent, or when an earlier create was interrupted before it wrote anything
        worth keeping (no object, no ref). Call it with the directory locked."""
        path.mkdir(parents=True, exist_ok=True)
        git_dir = path / ".git"
        if git_dir.exists():
            try:
                if not (git_dir / "HEAD").is_file() or not (git_dir / "config").is_file():
                    raise NotInitialized(f"{git_dir} is incomplete")  # git init writes them last
                store = cls(path)
            except NotInitialized:
                if _holds_data(git_dir):
                    raise NotInitialized(
                        f"{git_dir} is not a usable git repository but holds objects or "
                        "refs; move it aside or repair it with git, then run `gitstate "
                        "init` again") from None
                shutil.rmtree(git_dir)  # an interrupted create: nothing in it to lose
            else:
                store._exclude_projection()
                return store
        Repo.init(str(path), default_branch=b"main").close()
        store = cls(path)
        store._exclude_projection()
        return store

    def _exclude_projection(self) -> None:
        exclude = self.git_dir / "info" / "exclude"
        exclude.parent.mkdir(exist_ok=True)
        lines = "/working_state_history.jsonl\n/.*.tmp\n"
        try:
            if lines in safefile.read_regular(exclude, 1 << 20).decode("utf-8", "replace"):
                return
        except FileNotFoundError:
            pass
        with exclude.open("a", encoding="utf-8") as f:
            f.write("# gitstate: projections and temporary files, never committed\n" + lines)

    def close(self) -> None:
        self.repo.close()

    # -- locking --------------------------------------------------------------------------

    @contextlib.contextmanager
    def try_lock(self) -> Iterator[bool]:
        """The write lock if it is free right now; yields whether it was taken."""
        with locking.attempt(self.git_dir / LOCK_FILE) as taken:
            yield taken

    @contextlib.contextmanager
    def lock(self, timeout: float = 60.0) -> Iterator[None]:
        """The kernel write lock: released by the kernel when its holder dies."""
        with locking.exclusive(self.git_dir / LOCK_FILE, timeout):
            yield

    @contextlib.contextmanager
    def writing(self) -> Iterator[bool]:
        """Mark a write in progress (call with the lock held). Yields True when the marker
        was already there, i.e. the previous writer died mid-write: its ``*.lock`` and
        temporary files are then swept, since with the kernel lock held none is live."""
        marker = self.git_dir / WRITING_FILE
        crashed = marker.exists()
        if crashed:
            self.sweep_stale_locks()
        else:
            marker.touch()
        try:
            yield crashed
        finally:  # a refusal or an error is a clean end; only a dead process skips this
            with contextlib.suppress(FileNotFoundError):
                marker.unlink()

    def sweep_stale_locks(self) -> list[Path]:
        """Remove every dulwich ``*.lock`` and our temporary files (lock held)."""
        removed = []
        for stale in self.git_dir.glob(INCOMING_PREFIX + "*"):  # a fetch that was killed
            shutil.rmtree(stale, ignore_errors=True)
            removed.append(stale)
        for path in [*self.git_dir.rglob("*.lock"), *self.git_dir.glob(".*.tmp"),
                     *self.path.glob(".*.tmp")]:
            if path.name == LOCK_FILE:
                continue
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
        return removed

    def _stale_lock_safe(self, action: Callable[[], T]) -> T:
        """Run a dulwich write; a ``*.lock`` it trips over is stale, since we hold the
        kernel lock, so remove it and try again."""
        for _ in range(8):
            try:
                return action()
            except FileLocked as exc:
                lock = exc.lockfilename
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(lock)
        return action()

    # -- reading --------------------------------------------------------------------------

    def head(self) -> str | None:
        try:
            return self.repo.refs[BRANCH].decode()
        except KeyError:
            return None

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
        """The raw (name, mode, blob id) entries of ``commit``'s tree, for checking a
        commit gitstate did not make."""
        return [(e.path, e.mode, e.sha.decode()) for e in self._tree(commit).iteritems()]

    def object_size(self, sha: str) -> int:
        """The size of an object's content (a blob's byte count)."""
        try:
            _, data = self.repo.object_store.get_raw(ObjectID(sha.encode()))
        except KeyError as exc:
            raise StoreError(f"object {sha} is missing from the object store",
                             rule="store.missing_object") from exc
        return len(data)

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
        if len(self._known) >= 8:
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

    def _get(self, sha: ObjectID) -> ShaFile:
        """Read an object. dulwich looks in packs, then loose: a concurrent repack can move
        a loose object into a new pack between the two looks, so a miss is retried (the
        retry rescans the pack directory), as git's own readers do."""
        for attempt in range(3):
            try:
                return self.repo.object_store[sha]
            except KeyError:
                time.sleep(0.005 * attempt)
        return self.repo.object_store[sha]

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
        except Exception as exc:  # zlib / header / format errors: a damaged object file
            raise StoreError(f"{what} ({sha.decode()}) is corrupt ({exc}); run "
                             "`gitstate verify`", rule="store.corrupt_object") from exc
        if not isinstance(obj, kind):
            raise StoreError(f"{what} ({sha.decode()}) is not a {kind.__name__.lower()}",
                             rule="store.corrupt_object")
        return obj

    # -- writing --------------------------------------------------------------------------

    def commit(
        self,
        base: str | None,
        files: dict[str, bytes | None],
        message: bytes,
        identity: bytes,
        when: int,
        tz_offset: int = 0,
    ) -> str | None:
        """Write a commit of ``files`` (None deletes) on top of ``base`` and move main to it
        if main still equals ``base``. Returns the new id, or None when main moved."""
        new_id = self.make_commit(base, files, message, identity, when, tz_offset)
        faults.hit("objects")  # objects durable, ref not moved yet
        if not self.move_ref(BRANCH.decode(), base, new_id):
            return None
        faults.hit("ref")  # committed; working tree and projection not refreshed yet
        return new_id

    def make_commit(self, base: str | None, files: dict[str, bytes | None], message: bytes,
                    identity: bytes, when: int, tz_offset: int = 0,
                    author_time: int | None = None) -> str:
        """Write (durably) the objects of a commit on ``base``; no ref moves."""
        tree = Tree()
        if base is not None:
            for name, blob_id in self.file_ids(base).items():
                tree.add(name.encode(), FILE_MODE, ObjectID(blob_id.encode()))
        new_objects: list[Blob | Tree | Commit] = []
        for name, data in files.items():
            if data is None:
                with contextlib.suppress(KeyError):
                    del tree[name.encode()]
                continue
            blob = Blob.from_string(data)
            new_objects.append(blob)
            tree.add(name.encode(), FILE_MODE, blob.id)
        commit = Commit()
        commit.tree = tree.id
        commit.parents = [ObjectID(base.encode())] if base else []
        commit.author = commit.committer = identity
        commit.author_time = author_time if author_time is not None else when
        commit.commit_time = when
        commit.author_timezone = commit.commit_timezone = tz_offset
        commit.encoding = b"UTF-8"
        commit.message = message
        new_objects += [tree, commit]
        fan_out = {str(self.git_dir / "objects" / o.id[:2].decode()) for o in new_objects}
        created = _created_dirs(fan_out)
        for obj in new_objects:
            self._stale_lock_safe(lambda o=obj: self._add_object(o))  # type: ignore[misc]
        self._fsync_dirs(fan_out | created)
        new_id = commit.id.decode()
        self._remember(new_id, (base,) if base else (),
                       {e.path.decode(): e.sha.decode() for e in tree.iteritems()})
        self.last_commit = CommitInfo(new_id, (base,) if base else (), commit.author_time,
                                      message, identity.decode("utf-8", "replace"))
        self._last_commit_time = when
        self.last_objects = [o.id.decode() for o in new_objects]
        return new_id

    def move_ref(self, name: str, old: str | None, new: str | None) -> bool:
        """Compare-and-swap any ref (None: absent / delete); durable when it returns."""
        ref = Ref(name.encode())
        old_id = ObjectID(old.encode()) if old else ZERO
        if new is None:
            return bool(self._stale_lock_safe(
                lambda: self.repo.refs.remove_if_equals(ref, old_id)))
        ref_dir = os.path.dirname(self.git_dir / name)
        created = _created_dirs({ref_dir})
        moved = self._stale_lock_safe(
            lambda: self.repo.refs.set_if_equals(ref, old_id, ObjectID(new.encode())))
        if moved:
            self._fsync_dirs({ref_dir} | created)
        return bool(moved)

    def ref(self, name: str) -> str | None:
        try:
            return self.repo.refs[Ref(name.encode())].decode()
        except KeyError:
            return None

    def is_ancestor(self, ancestor: str, commit: str) -> bool:
        """Whether ``ancestor`` is on ``commit``'s first-parent chain (gitstate histories
        are linear)."""
        return any(info.id == ancestor for info in self.walk(commit))

    # -- remotes ----------------------------------------------------------------------------

    def remote_url(self) -> str | None:
        config = self.repo.get_config()
        try:
            return config.get((b"remote", b"origin"), b"url").decode()
        except KeyError:
            return None

    def set_remote_url(self, url: str | None) -> None:
        config = self.repo.get_config()
        if url is None:
            with contextlib.suppress(KeyError):
                del config[(b"remote", b"origin")]
        else:
            config.set((b"remote", b"origin"), b"url", url.encode())
            config.set((b"remote", b"origin"), b"fetch",
                       b"+refs/heads/main:refs/remotes/origin/main")
        config.write_to_path()

    def _client(self, url: str) -> tuple[Any, str | bytes]:
        """A dulwich client for ``url``, configured only by the ``http`` settings of git's
        config files (the CA to trust, TLS verification, a proxy URL) — never by a setting
        that names a program (``core.sshCommand``, ``core.gitProxy``): the ssh command comes
        from ``GIT_SSH_COMMAND`` in the environment, else plain ``ssh``."""
        from dulwich.client import get_transport_and_path
        from dulwich.config import ConfigDict

        safe = ConfigDict()
        stack = self.repo.get_config_stack()
        for backend in reversed(stack.backends):  # lowest priority first: later ones win
            for section in backend.sections():
                if section and section[0].lower() == b"http":
                    for name, value in backend.items(section):
                        safe.set(section, name, value)
        extra: dict[str, Any] = {}
        if url.startswith(("ssh://", "git+ssh://")):
            extra["ssh_command"] = os.environ.get("GIT_SSH_COMMAND") or "ssh"
        client, path = get_transport_and_path(url, config=safe, **extra)
        return client, path

    def fetch(self, url: str, check: Callable[[GitStore, str], None] | None = None
              ) -> str | None:
        """Fetch the remote's main; returns its id (None: the remote has no main).

        The objects arrive in a quarantine (a temporary object directory that can read this
        repository's objects, as git's receive-pack does): ``check(quarantined_store,
        remote_id)`` sees them and raises to refuse, in which case none of them enters this
        repository. Only once it returns are they moved into the object store.

        A repository on this machine that git itself has packed with a reachability bitmap
        can trip dulwich's reader (a pack it listed is gone by the time it reads the
        bitmap); that case is fetched again with the git CLI, in its clean environment."""
        with self._quarantine() as incoming:
            client, path = self._client(url)
            try:
                result = client.fetch(path.encode() if isinstance(path, str) else path,
                                      incoming.repo)
                remote_ref = result.refs.get(BRANCH)
                remote = remote_ref.decode() if remote_ref else None
            except Exception:
                if not _is_local(url) or gitcli.git_binary() is None:
                    raise
                remote = incoming._fetch_with_git(url)
            if remote is not None:
                if check is not None:
                    check(incoming, remote)
                self._take_objects(incoming)
            return remote

    @contextlib.contextmanager
    def _quarantine(self) -> Iterator[GitStore]:
        """A bare repository inside .git whose object store reads ours through alternates,
        with our refs (so a fetch negotiates what we have); removed on the way out. Callers
        hold the write lock, so a quarantine already there was left by a killed fetch."""
        for stale in self.git_dir.glob(INCOMING_PREFIX + "*"):
            shutil.rmtree(stale, ignore_errors=True)
        path = self.git_dir / f"{INCOMING_PREFIX}{os.getpid()}-{os.urandom(4).hex()}"
        Repo.init_bare(str(path), mkdir=True, default_branch=b"main").close()
        (path / "objects" / "info").mkdir(parents=True, exist_ok=True)
        (path / "objects" / "info" / "alternates").write_text(
            str((self.git_dir / "objects").resolve()) + "\n", encoding="utf-8")
        try:
            incoming = GitStore(path)
            incoming.repo.object_store.fsync_object_files = True
            for name in (BRANCH.decode(), REMOTE_REF):
                current = self.ref(name)
                if current is not None:
                    incoming.repo.refs[Ref(name.encode())] = ObjectID(current.encode())
            try:
                yield incoming
            finally:
                incoming.close()
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def _take_objects(self, incoming: GitStore) -> None:
        """Move a checked quarantine's packs and loose objects into the object store, each
        file complete before its name appears (a pack before its index), then fsync."""
        source = incoming.git_dir / "objects"
        target = self.git_dir / "objects"
        touched: set[str] = set()
        pack_dir = source / "pack"
        for pack in sorted(pack_dir.glob("pack-*.pack")) if pack_dir.is_dir() else []:
            for suffix in (".pack", ".idx"):
                src = pack.with_suffix(suffix)
                dst = target / "pack" / src.name
                if src.exists() and not dst.exists():
                    _fsync_file(src)
                    os.replace(src, dst)
                    touched.add(str(dst.parent))
        for fan_out in source.iterdir():
            if len(fan_out.name) != 2 or not fan_out.is_dir():
                continue
            for obj in fan_out.iterdir():
                dst = target / fan_out.name / obj.name
                if not dst.exists():
                    created = _created_dirs({str(dst.parent)})
                    dst.parent.mkdir(exist_ok=True)
                    _fsync_file(obj)
                    os.replace(obj, dst)
                    touched |= {str(dst.parent)} | created
        self._fsync_dirs(touched)

    def _fetch_with_git(self, url: str) -> str | None:
        scratch = FETCHED_REF
        out = gitcli.run(self.path, ["fetch", "--no-tags", "--no-write-fetch-head", "-q",
                                     "--", url, f"+{BRANCH.decode()}:{scratch}"], timeout=600)
        if out.returncode != 0:
            if "couldn't find remote ref" in out.stderr:
                return None
            raise StoreError(f"git fetch failed: {out.stderr.strip()[:300]}",
                             rule="remote.unreachable")
        fetched = self.ref(scratch)
        with contextlib.suppress(Exception):
            self.repo.refs.remove_if_equals(Ref(scratch.encode()), None)
        return fetched

    def push(self, url: str, lease: str | None, new: str) -> bool:
        """Move the remote's main from ``lease`` to ``new``, only if it still is ``lease``
        (the server's receive-pack checks the old value too). False when it moved on."""
        client, path = self._client(url)
        expected = ObjectID(lease.encode()) if lease else None
        seen: dict[str, bool] = {"moved": False}

        def update_refs(refs: dict[Ref, ObjectID]) -> dict[Ref, ObjectID]:
            current = refs.get(BRANCH)
            if current in (None, ZERO):
                current = None
            if current != expected:
                seen["moved"] = True
                return {}
            return {BRANCH: ObjectID(new.encode())}

        def pack(have: Any, want: Any, *, ofs_delta: bool = False,
                 progress: Any = None) -> Any:
            return self.repo.object_store.generate_pack_data(have, want, ofs_delta=ofs_delta)

        result = client.send_pack(path.encode() if isinstance(path, str) else path,
                                  update_refs, pack)
        if seen["moved"]:
            return False
        status = (result.ref_status or {}).get(BRANCH)
        if status is None:
            return True
        if "hook" in status or "denied" in status:
            raise StoreError(f"the remote refused the push: {status}", rule="remote.refused")
        return False  # the ref moved between the advertisement and the update: a lost race

    def _add_object(self, obj: Blob | Tree | Commit) -> None:
        # A concurrent `git prune-packed` removes empty fan-out directories, possibly between
        # dulwich's mkdir and its open of `<sha>.lock`: try again, the mkdir comes first.
        for _ in range(5):
            try:
                self.repo.object_store.add_object(obj)
                return
            except FileNotFoundError:
                continue
        self.repo.object_store.add_object(obj)

    @staticmethod
    def _fsync_dirs(dirs: set[str]) -> None:
        """A new directory entry (object file, renamed ref) is durable only once its
        directory is fsynced. (A fan-out directory that vanished was emptied by a concurrent
        prune-packed: its objects are in a pack, which the packer made durable.)"""
        for d in dirs:
            try:
                fd = os.open(d, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def checkout(self, commit: str, contents: dict[str, bytes] | None = None) -> None:
        """Make the working tree, the index and the stamp equal ``commit``. ``contents``
        may hold file bytes the caller already has, to spare reading them back."""
        ids = self.file_ids(commit)
        unknown = sorted(set(ids) - TREE_FILES.keys())
        if unknown:  # never reached through the checks of foreign commits; kept as a wall
            raise StoreError(f"commit {commit[:12]} holds files gitstate does not know "
                             f"({', '.join(repr(n) for n in unknown[:5])}); nothing was "
                             "checked out", rule="tree.unknown_name")
        entries = {}
        for name, blob_id in ids.items():
            target = self.path / name
            if _file_blob_id(target) != blob_id:
                data = (contents or {}).get(name) or self.read_file(commit, name)
                assert data is not None
                atomic_write(target, data)
            entries[name.encode()] = index_entry_from_stat(
                os.stat(target), ObjectID(blob_id.encode()), FILE_MODE)
        parents = self.parents(commit)
        for name in (self.file_ids(parents[0]) if parents else {}).keys() - ids.keys():
            with contextlib.suppress(FileNotFoundError):
                (self.path / name).unlink()  # a file this commit deleted
        # The index only makes `git status` agree; it is a cache of HEAD, so it is written
        # without fsync (dulwich's Index.write always fsyncs).
        buf = io.BytesIO()
        write_index_dict(buf, entries, version=2)
        raw = buf.getvalue()
        atomic_write(self.git_dir / "index", raw + hashlib.sha1(raw).digest(), fsync=False)
        stamp = layout.format_stamp(commit, ids.get(STATE_FILE, ""), ids.get(SCHEMA_FILE))
        atomic_write(self.git_dir / STAMP_FILE, stamp, fsync=False)

    def worktree_matches_stamp(self, commit: str) -> bool:
        """The cheap check (the render fast path's): the stamp names ``commit`` and the
        working tree file hashes to the stamped blob."""
        try:
            stamp = layout.parse_stamp(safefile.read_regular(self.git_dir / STAMP_FILE, 256))
        except OSError:
            return False
        if stamp is None:
            return False
        stamp_commit, blob, schema_blob = stamp
        ids = self.file_ids(commit)
        if stamp_commit != commit or ids.get(STATE_FILE) != blob or \
                ids.get(SCHEMA_FILE, "-") != schema_blob or \
                not set(ids) <= {STATE_FILE, SCHEMA_FILE}:
            return False
        return all(_file_blob_id(self.path / name) == blob_id for name, blob_id in ids.items())

    def worktree_status(self, commit: str) -> WorktreeStatus:
        """Compare the working tree with ``commit``; tell leftovers from hand edits."""
        ids = self.file_ids(commit)
        parent_ids: dict[str, str] = {}
        parents = self.parents(commit)
        if parents:
            parent_ids = self.file_ids(parents[0])
        differing = []
        leftover = False
        for name, blob_id in ids.items():
            actual = _file_blob_id(self.path / name)
            if actual == blob_id:
                continue
            if actual is None or actual == parent_ids.get(name):
                leftover = True  # missing, or still the previous commit's file
            else:
                differing.append(name)
        for name in parent_ids.keys() - ids.keys():
            if (self.path / name).exists():
                leftover = True
        stray = [p for p in self.path.glob(".*.tmp")]
        leftover = leftover or bool(stray)
        return WorktreeStatus(not differing and not leftover, leftover, tuple(differing))

    def remove_temp_files(self) -> None:
        for p in self.path.glob(".*.tmp"):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()

    # -- maintenance ----------------------------------------------------------------------

    def loose_estimate(self, objects: list[str]) -> int:
        """Estimated loose objects from the fan-out directories a write just touched (already
        in the page cache): 256 x their mean size. Three directories keep the estimate within
        about a sixth of the truth around the threshold, without listing all 256."""
        dirs = {sha[:2] for sha in objects}
        total = 0
        for d in dirs:
            with contextlib.suppress(FileNotFoundError):
                total += len(os.listdir(self.git_dir / "objects" / d))
        return 256 * total // max(len(dirs), 1)

    def gc(self, prune_hours: float = 1.0) -> dict[str, int]:
        """Pack loose objects without taking the write lock.

        Packing is safe beside a running writer: only objects already listed are packed and
        then removed as loose copies, and a writer's new objects stay loose until the next run.
        Refs are never packed or touched here (``git pack-refs`` locks the branch ref, which
        a writer would take for a stale lock). Unreachable loose objects (left by killed writes)
        are pruned once older than ``prune_hours``.
        """
        before = self.disk_usage()
        if gitcli.git_binary():  # git's repack stores deltas: 2-3x smaller packs than dulwich's
            for args in (["repack", "-d", "-q", "--no-write-bitmap-index"],
                         ["prune-packed", "-q"],
                         ["prune", f"--expire={int(prune_hours * 3600)}.seconds.ago"]):
                out = gitcli.run(self.path, args)
                if out.returncode != 0:
                    full = "No space left" in out.stderr
                    raise StoreError(
                        f"git {args[0]} failed: {out.stderr.strip()[:300]}"
                        + ("; free some disk space and run `gitstate gc` again" if full
                           else ""),
                        rule="store.disk_full" if full else "gc.failed")
        else:
            try:
                self.repo.object_store.pack_loose_objects()
            except OSError as exc:
                raise StoreError(f"packing failed ({exc.strerror or exc})",
                                 rule="store.disk_full" if exc.errno == errno.ENOSPC
                                 else "gc.failed") from exc
        after = self.disk_usage()
        return {"bytes_before": before, "bytes_after": after}

    def disk_usage(self) -> int:
        """Bytes used by the object store (loose objects and packs)."""
        total = 0
        for root, _dirs, files in os.walk(self.git_dir / "objects"):
            for name in files:
                with contextlib.suppress(FileNotFoundError):
                    total += os.stat(os.path.join(root, name)).st_blocks * 512
        return total

    def patch(self, commit: str) -> str:
        """The raw git diff of ``commit`` against its first parent."""
        from dulwich.patch import write_tree_diff

        obj = self._commit(commit)
        old_tree = self._commit(obj.parents[0].decode()).tree if obj.parents else None
        out = io.BytesIO()
        write_tree_diff(out, self.repo.object_store, old_tree, obj.tree)
        return out.getvalue().decode("utf-8", "replace")

    def object_problems(self) -> list[str]:
        """Objects whose content does not hash to their name (a corrupted store)."""
        problems = []
        store = self.repo.object_store
        for sha in store:
            try:
                obj = store[sha]
                obj.check()
                if obj.id != sha:
                    problems.append(f"{sha.decode()}: content hashes to {obj.id.decode()}")
            except Exception as exc:  # any decoding failure is a corruption to report
                problems.append(f"{sha.decode()}: {type(exc).__name__}: {exc}")
        return problems


def _file_blob_id(path: Path) -> str | None:
    """The blob id of a working-tree file; a symlink, FIFO, device, directory or oversized
    file gets a marker that equals no blob id (so it counts as a hand edit, never read)."""
    try:
        data = safefile.read_regular(path, TREE_FILES.get(path.name, 1 << 20))
    except FileNotFoundError:
        return None
    except OSError:
        return "not-a-regular-file"
    return git_blob_id(data)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _is_local(url: str) -> bool:
    """A repository on this machine: a path or a file:// URL."""
    return url.startswith("file://") or ("://" not in url and not (
        ":" in url.split("/", 1)[0] and not url.startswith("/")))


def _holds_data(git_dir: Path) -> bool:
    """Whether a (possibly broken) git directory holds any object or ref file."""
    for sub in ("objects", "refs"):
        for _root, _dirs, files in os.walk(git_dir / sub):
            if files:
                return True
    return (git_dir / "packed-refs").exists()


def _created_dirs(dirs: set[str]) -> set[str]:
    """The parents whose entries a write will add, called before the write: for each
    directory in ``dirs`` that does not exist yet, its parent (and so on up the missing
    chain). A new directory is durable only once its parent is fsynced too."""
    parents = set()
    for d in dirs:
        while not os.path.isdir(d):
            d = os.path.dirname(d)
            parents.add(d)
    return parents


def atomic_write(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` via a uniquely named temporary file and rename, so a
    reader sees the old bytes or the new ones, never a mix, and two writers never share a
    temporary file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if fsync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if exc.errno == errno.ENOSPC:
            raise StoreError(f"disk full while writing {path}", rule="store.disk_full") from exc
        raise
