"""Remotes: the URL and fetch into a quarantine (push with a lease: ``pushes``).

What a remote sends is untrusted from its first byte (docs/security.md, "What arrives from
a remote"). A fetch (:meth:`TransportOps.incoming`):

1. connects with deadlines (``wire``) — no lock of this repository is held meanwhile, so a
   stalled remote never holds up a local write;
2. checks every advertised ref name against git's rules and its namespace's pattern
   (``layout.ref_name_problem``) before it is used at all, and counts the refs of each
   namespace this repository does not have yet against ``Limits.max_new_refs``;
3. receives the pack into a quarantine (a bare repository inside .git whose object store
   reads ours through alternates) within the pack bounds, checks it from its headers and
   indexes it with bounded memory (``packindex``);
4. yields the quarantine, whose every read is strict (sizes from headers, trees and commits
   by git fsck's rules): the caller takes the write lock, runs its acceptance checks on it,
   and only then moves the objects in (:meth:`Incoming.take`) and its refs.

Every failure of a remote — a bad name, a bound, a deadline, a damaged pack, a refused or
dropped connection — is a :class:`~gitstate.core.errors.StoreError` whose rule names it; no
transport library's exception escapes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from dulwich.errors import PackedRefsException
from dulwich.objects import ObjectID
from dulwich.refs import Ref
from dulwich.repo import Repo

from ..core import layout
from ..core.errors import GitStateError, StoreError
from ..core.layout import INCOMING_PREFIX
from ..system import locking, safefile
from ..system.config import Config
from .base import ZERO, RepoBase
from .fs import created_dirs, fsync_file
from .packindex import PackBounds, PackSink, index_pack
from .wire import Clock, Deadlines, client_for, is_timeout

_NEW_REF_SETTINGS = {"runs": "pull_max_new_runs", "journals": "pull_max_new_journals"}


@dataclass(frozen=True)
class Limits:
    """The bounds and deadlines of this repository's transfers (config.toml's)."""

    deadlines: Deadlines = field(default_factory=Deadlines)
    pack: PackBounds = field(default_factory=PackBounds)
    # namespace -> how many refs of it one pull may add
    max_new_refs: dict[str, int] = field(default_factory=lambda: {"runs": 1000,
                                                                   "journals": 100})


@dataclass
class Incoming:
    """What one fetch brought, in its quarantine, not yet part of the repository."""

    store: Any  # the quarantine, a store of the same class (strict reads)
    refs: dict[str, str]  # the remote's refs of the namespaces asked for: name -> id
    take: Callable[[], None]  # move the objects in (lock held, checks passed)


def unreachable(action: str, exc: BaseException) -> StoreError:
    hint = ""
    if "CERTIFICATE_VERIFY_FAILED" in str(exc):
        hint = (". The server's certificate is not trusted: name its CA as git does, with "
                "http.sslCAInfo in the state repository's git config or in your "
                "~/.gitconfig (for clone)")
    text = str(exc).strip() or type(exc).__name__
    if type(exc).__name__ == "PackedRefsException" or any(
            words in text for words in ("refname is dangerous", "bad ref name", "broken ref")):
        # a path remote's packed-refs holding a name git refuses: git's upload-pack (or
        # dulwich's reader) stops on it before anything is sent
        return StoreError(f"{action}: the remote holds a ref name git refuses "
                          f"({text[:300]}); nothing was fetched", rule="remote.ref_name")
    if type(exc).__name__ == "HangupException" or "does not match length prefix" in text:
        return StoreError(f"{action}: the remote hung up before the transfer was complete "
                          f"({text[:200]}); nothing of it was used", rule="remote.hung_up")
    return StoreError(f"{action}: the remote is unreachable or refused ({text[:300]}){hint}",
                      rule="remote.unreachable")


def check_advertised(refs: Mapping[Ref, Any], action: str) -> dict[str, str]:
    """The remote's refs as text, every name checked (git's rules, then its namespace's
    pattern) before any is used; a StoreError (``remote.ref_name``) names the first bad
    one. ``HEAD`` and peeled-tag entries (``name^{}``) are left out."""
    out: dict[str, str] = {}
    for raw, sha in refs.items():
        if raw == b"HEAD":
            continue
        try:
            name = raw.decode("ascii")
        except UnicodeDecodeError:
            name = raw.decode("utf-8", "replace")
            problem: str | None = "it is not plain ASCII"
        else:
            problem = None
        if name.endswith("^{}"):
            name = name[:-3]
            peeled = True
        else:
            peeled = False
        problem = problem or layout.ref_name_problem(name)
        if problem is not None:
            raise StoreError(f"{action}: the remote advertises the ref {name[:120]!r}, which "
                             f"is refused: {problem}. Nothing was fetched.",
                             rule="remote.ref_name", ref=name[:200])
        text = sha.decode("ascii", "replace") if isinstance(sha, bytes) else str(sha)
        if not peeled and text != ZERO.decode():
            out[name] = text
    return out


def _namespaces_of(names: tuple[str, ...]) -> Callable[[str], bool]:
    def wanted(name: str) -> bool:
        return layout.remote_namespace(name) in names

    return wanted


class TransportOps(RepoBase):
    """Remotes: the URL and fetch into a quarantine (push with a lease: ``pushes``)."""

    limits = Limits()

    def refs_under(self, prefix: str) -> dict[str, str]:
        """Every loose or packed ref below ``prefix`` (``refs/heads/runs/``): name -> id. A
        packed-refs file git would not read is a StoreError (``store.bad_ref``). Without a
        packed-refs file, the loose refs are listed directly (each read as ``ref`` reads
        it): a checkpointer lists its thread refs on every ``list``."""
        if not os.path.lexists(f"{self.git_path}/packed-refs"):
            return self._loose_refs_under(prefix)
        out = {}
        try:
            for name in self.repo.refs.keys(base=Ref(prefix.rstrip("/").encode())):
                with contextlib.suppress(KeyError):
                    out[name.decode("utf-8", "replace")] = \
                        self.repo.refs[Ref(prefix.encode() + name)].decode()
        except PackedRefsException as exc:
            raise StoreError(f"{self.git_dir / 'packed-refs'} is damaged ({exc}); repair it "
                             "with git, then run `gitstate verify`",
                             rule="store.bad_ref") from exc
        return out

    def _loose_refs_under(self, prefix: str) -> dict[str, str]:
        top = prefix.rstrip("/")
        out: dict[str, str] = {}
        stack = [(f"{self.git_path}/{top}", "")]
        while stack:
            path, rel = stack.pop()
            try:
                entries = os.scandir(path)
            except (FileNotFoundError, NotADirectoryError):
                continue
            with entries:
                for entry in entries:
                    name = rel + entry.name
                    if entry.is_dir(follow_symlinks=False):
                        stack.append((entry.path, name + "/"))
                    elif not entry.name.endswith(".lock"):
                        sha = self.ref(f"{top}/{name}")
                        if sha is not None:
                            out[name] = sha
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

    def _http_config(self) -> Any:
        """Only the ``http`` settings of git's config files (the CA to trust, TLS
        verification, a proxy URL) — never a setting that names a program
        (``core.sshCommand``, ``core.gitProxy``): the ssh command comes from
        ``GIT_SSH_COMMAND`` in the environment, else plain ``ssh``."""
        from dulwich.config import ConfigDict

        safe = ConfigDict()
        stack = self.repo.get_config_stack()
        for backend in reversed(stack.backends):  # lowest priority first: later ones win
            for section in backend.sections():
                if section and section[0].lower() == b"http":
                    for name, value in backend.items(section):
                        safe.set(section, name, value)
        return safe

    # -- fetch ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def incoming(self, url: str, namespaces: tuple[str, ...] = ("main",), *,
                 known: Collection[str] = (), action: str = "fetch") -> Iterator[Incoming]:
        """Fetch the remote's refs of ``namespaces`` (``layout.NAMESPACES`` names) into a
        quarantine and yield it (see the module); ``known`` lists the remote names this
        repository already has, so that only the others count as new. Call it WITHOUT the
        write lock; take it around the checks, ``take()`` and the ref moves."""
        clock = Clock(self.limits.deadlines, action)
        with self._quarantine() as quarantine:
            try:
                refs = self._receive(url, quarantine, namespaces, known, clock, action)
            except GitStateError:
                raise
            except Exception as exc:  # dulwich, urllib3, sockets: every one named
                if is_timeout(exc):
                    raise clock.timeout("stall") from exc
                raise unreachable(action, exc) from exc
            yield Incoming(quarantine, refs, lambda: self._take_objects(quarantine))

    def _receive(self, url: str, quarantine: Self, namespaces: tuple[str, ...],
                 known: Collection[str], clock: Clock, action: str) -> dict[str, str]:
        wanted = _namespaces_of(namespaces)
        for prefix in (layout.BRANCH, layout.RUNS_PREFIX,  # what we have, to negotiate
                       layout.THREADS_PREFIX):
            for name, sha in (self.refs_under(prefix) if prefix.endswith("/") else
                              {"": self.ref(prefix) or ""}).items():
                if sha:
                    quarantine.repo.refs[Ref((prefix + name).encode())] = \
                        ObjectID(sha.encode())
        chosen: dict[str, str] = {}

        def determine_wants(refs: Mapping[Ref, ObjectID],
                            depth: int | None = None) -> list[ObjectID]:
            clock.check()
            chosen.update({n: s for n, s in check_advertised(refs, action).items()
                           if wanted(n)})
            self._check_new(chosen, known, action)
            store = quarantine.repo.object_store
            return sorted({ObjectID(s.encode()) for s in chosen.values()
                           if ObjectID(s.encode()) not in store})

        client, path = client_for(url, self._http_config(), clock)
        pack_path = f"{quarantine.git_path}/objects/pack/tmp_pack_{os.urandom(6).hex()}"
        os.makedirs(os.path.dirname(pack_path), exist_ok=True)
        sink = PackSink(pack_path, self.limits.pack, clock.check)
        try:
            client.fetch_pack(path, determine_wants, quarantine.repo.get_graph_walker(),
                              sink, progress=lambda _text: clock.check())
        finally:
            sink.close()
        if sink.size:
            index_pack(pack_path, self.limits.pack,
                       self.repo.object_store.object_format.oid_length, clock.check)
        else:
            os.unlink(pack_path)
        quarantine.close_headers()
        for name, sha in chosen.items():
            if ObjectID(sha.encode()) not in quarantine.repo.object_store:
                raise StoreError(f"{action}: the remote's pack does not hold {name} "
                                 f"({sha[:12]}), which it advertised", rule="remote.bad_pack")
        return chosen

    def _check_new(self, refs: dict[str, str], known: Collection[str], action: str) -> None:
        new: dict[str, int] = {}
        for name in refs:
            namespace = layout.remote_namespace(name)
            if namespace in self.limits.max_new_refs and name not in known:
                new[namespace] = new.get(namespace, 0) + 1
        for namespace, count in new.items():
            bound = self.limits.max_new_refs[namespace]
            if count > bound:
                setting = _NEW_REF_SETTINGS.get(namespace, namespace)
                raise StoreError(f"{action}: the remote has {count} {namespace} this "
                                 f"repository does not, over the {bound} one pull may add "
                                 f"([gitstate] {setting}); nothing was fetched",
                                 rule="remote.too_many_refs", namespace=namespace,
                                 count=count, bound=bound)

    def fetch(self, url: str, check: Callable[[Self, str], None] | None = None
              ) -> str | None:
        """Fetch the remote's main; returns its id (None: the remote has no main).
        ``check(quarantined_store, remote_id)`` raises to refuse, in which case none of
        the objects enters this repository. (No lock is taken here: a caller that holds
        the write lock waits on the network with it; prefer :meth:`incoming`.)"""
        with self.incoming(url, ("main",)) as got:
            remote = got.refs.get(layout.BRANCH)
            if remote is not None:
                if check is not None:
                    check(got.store, remote)
                got.take()
            return remote

    @contextlib.contextmanager
    def _quarantine(self) -> Iterator[Self]:
        """A bare repository inside .git whose object store reads ours through alternates,
        flocked (on the directory itself) while in use, removed on the way out; the
        quarantines of killed fetches are swept first (``sweep_quarantines``)."""
        self.sweep_quarantines()
        final = self.git_dir / f"{INCOMING_PREFIX}{os.getpid()}-{os.urandom(4).hex()}"
        path = final.with_name(final.name + ".tmp")
        path.mkdir()
        try:
            with locking.directory(path):
                os.rename(path, final)  # the flock goes with the directory
                path = final
                Repo.init_bare(str(path), mkdir=False, default_branch=b"main").close()
                (path / "objects" / "info").mkdir(parents=True, exist_ok=True)
                safefile.write_atomic(path / "objects" / "info" / "alternates", (
                    str((self.git_dir / "objects").resolve()) + "\n").encode("utf-8"))
                incoming = type(self)(path)
                try:
                    incoming.strict = True
                    incoming.limits = self.limits
                    yield incoming
                finally:
                    incoming.close()
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def _take_objects(self, incoming: Self) -> None:
        """Move a checked quarantine's packs and loose objects into the object store, each
        file complete before its name appears, a pack's index before the pack itself (as
        ``packwrite.publish``: a concurrent ``git repack -d`` deletes a pack with no index),
        then fsync."""
        source = incoming.git_dir / "objects"
        target = self.git_dir / "objects"
        touched: set[str] = set()
        pack_dir = source / "pack"
        for pack in sorted(pack_dir.glob("pack-*.pack")) if pack_dir.is_dir() else []:
            for suffix in (".idx", ".pack"):
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
        self.close_headers()

def limits_for(config: Config) -> Limits:
    """config.toml's transfer settings as the store's :class:`Limits`."""
    return Limits(
        Deadlines(config.remote_connect_seconds, config.remote_stall_seconds,
                  config.remote_total_seconds),
        PackBounds(config.fetch_max_objects, config.fetch_max_bytes,
                   config.fetch_max_inflated_bytes, layout.OBJECT_MAX_BYTES),
        {"runs": config.pull_max_new_runs, "journals": config.pull_max_new_journals})
