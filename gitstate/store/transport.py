"""Remotes: the URL, fetch into a quarantine, push with a lease."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any, Self

from dulwich.objects import ObjectID
from dulwich.refs import Ref
from dulwich.repo import Repo

from .. import gitcli
from ..errors import StoreError
from ..layout import FETCHED_REF, INCOMING_PREFIX, REMOTE_REF
from .base import BRANCH, ZERO, RepoBase
from .fs import created_dirs, fsync_file, is_local


class TransportOps(RepoBase):
    """Remotes: the URL, fetch into a quarantine, push with a lease."""

    def refs_under(self, prefix: str) -> dict[str, str]:
        """Every loose or packed ref below ``prefix`` (``refs/heads/runs/``): name -> id."""
        out = {}
        for name in self.repo.refs.keys(base=Ref(prefix.rstrip("/").encode())):
            with contextlib.suppress(KeyError):
                out[name.decode("utf-8", "replace")] = \
                    self.repo.refs[Ref(prefix.encode() + name)].decode()
        return out

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

    def fetch(self, url: str, check: Callable[[Self, str], None] | None = None
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
            def wants(refs: dict[Ref, ObjectID], depth: int | None = None,
                      **_: Any) -> list[ObjectID]:
                # main only: objects of other refs (runs) come with their own checks
                sha = refs.get(BRANCH)
                return [sha] if sha and sha != ZERO and \
                    sha not in incoming.repo.object_store else []

            try:
                result = client.fetch(path.encode() if isinstance(path, str) else path,
                                      incoming.repo, determine_wants=wants)
                remote_ref = result.refs.get(BRANCH)
                remote = remote_ref.decode() if remote_ref else None
            except Exception:
                if not is_local(url) or gitcli.git_binary() is None:
                    raise
                remote = incoming.fetch_with_git(url)
            if remote is not None:
                if check is not None:
                    check(incoming, remote)
                self._take_objects(incoming)
            return remote

    def fetch_refs(self, url: str, prefix: str,
                   check: Callable[[Self, dict[str, str]], dict[str, str]]) -> dict[str, str]:
        """Fetch the remote's refs below ``prefix`` (``refs/heads/runs/``) into a
        quarantine; ``check(quarantined_store, {name: id})`` returns the ones to accept (it
        raises to refuse them all). The objects enter this repository only when some are
        accepted. Returns the accepted refs; the caller moves its own."""
        with self._quarantine() as incoming:
            for name, sha in self.refs_under(prefix).items():  # what we have, to negotiate
                incoming.repo.refs[Ref((prefix + name).encode())] = ObjectID(sha.encode())
            client, path = self._client(url)

            def wants(refs: dict[Ref, ObjectID], depth: int | None = None,
                      **_: Any) -> list[ObjectID]:
                return [sha for name, sha in refs.items() if name.startswith(prefix.encode())
                        and sha not in incoming.repo.object_store]

            result = client.fetch(path.encode() if isinstance(path, str) else path,
                                  incoming.repo, determine_wants=wants)
            remote = {name.decode("utf-8", "replace")[len(prefix):]: sha.decode()
                      for name, sha in result.refs.items()
                      if name.startswith(prefix.encode()) and sha != ZERO}
            accepted = check(incoming, remote) if remote else {}
            if accepted:
                self._take_objects(incoming)
            return accepted

    def push_refs(self, url: str, updates: dict[str, tuple[str | None, str]]) -> dict[str, str]:
        """Move each remote ref ``name`` from its lease to ``new`` (``{name: (lease, new)}``)
        in one push; returns ``{name: why}`` for those not moved (the remote moved on, or
        its hook refused)."""
        client, path = self._client(url)
        moved: dict[str, str] = {}

        def update_refs(refs: dict[Ref, ObjectID]) -> dict[Ref, ObjectID]:
            out = {}
            for name, (lease, new) in updates.items():
                current = refs.get(Ref(name.encode()))
                current_id = None if current in (None, ZERO) else current.decode()
                if current_id == new:
                    continue
                if current_id != lease:
                    moved[name] = "the remote's ref moved on: pull first"
                    continue
                out[Ref(name.encode())] = ObjectID(new.encode())
            return out

        def pack(have: Any, want: Any, *, ofs_delta: bool = False,
                 progress: Any = None) -> Any:
            return self.repo.object_store.generate_pack_data(have, want, ofs_delta=ofs_delta)

        result = client.send_pack(path.encode() if isinstance(path, str) else path,
                                  update_refs, pack)
        for ref, status in (result.ref_status or {}).items():
            if status is not None:
                moved[ref.decode("utf-8", "replace")] = f"the remote refused it: {status}"
        return moved

    @contextlib.contextmanager
    def _quarantine(self) -> Iterator[Self]:
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
            incoming = type(self)(path)
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

    def _take_objects(self, incoming: Self) -> None:
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
                    fsync_file(src)
                    os.replace(src, dst)
                    touched.add(str(dst.parent))
        for fan_out in source.iterdir():
            if len(fan_out.name) != 2 or not fan_out.is_dir():
                continue
            for obj in fan_out.iterdir():
                dst = target / fan_out.name / obj.name
                if not dst.exists():
                    created = created_dirs({str(dst.parent)})
                    dst.parent.mkdir(exist_ok=True)
                    fsync_file(obj)
                    os.replace(obj, dst)
                    touched |= {str(dst.parent)} | created
        self._fsync_dirs(touched)

    def fetch_with_git(self, url: str) -> str | None:
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
