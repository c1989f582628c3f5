"""Push with a lease: one ``send-pack`` per push, each ref moved only from the value last
seen there (``TransportOps`` has the URL and the fetch).

A push killed part-way leaves the remote ahead of this repository's leases: its commits
are recognised there by object id (:meth:`PushOps._published`) and the refs fast-forwarded,
never re-applied as changes. A lock a killed push left inside a path remote (git's
``<ref>.lock``) is named with the command that removes it (:func:`stale_remote_locks`,
docs/remote.md "A push or pull that was killed").
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from dulwich.objects import ObjectID
from dulwich.refs import Ref

from ..core import layout
from ..core.errors import GitStateError, StoreError
from .base import ZERO
from .transport import TransportOps, check_advertised, unreachable
from .wire import Clock, client_for, is_timeout

_HOOK_TEXT_MAX = 4000
STALE_LOCK_SECONDS = 60.0  # a path remote's ref lock this old is a killed push's


class PushOps(TransportOps):
    """Push with a lease (see the module)."""

    def _send(self, url: str, action: str, choose: Callable[[dict[str, str]],
                                                             dict[str, str | None]]
              ) -> tuple[dict[str, str | None], str]:
        """One push: ``choose(remote refs)`` returns ``{name: new id}`` to send (after the
        names were checked); returns the refused names with the remote's status, and what
        the remote's hooks printed (sideband 2), cleaned for display. A ref the remote
        could not lock (``<ref>.lock`` exists) is sent again, from a new advertisement,
        for about 1.5 s — a concurrent push holds its lock for milliseconds — and then is
        a ``remote.locked`` StoreError naming the lock (:func:`_locked`)."""
        clock = Clock(self.limits.deadlines, action)
        for pause in (0.05, 0.1, 0.2, 0.4, 0.8, None):
            statuses, text = self._send_once(url, action, choose, clock)
            locked = [ref for ref, status in statuses.items()
                      if status is not None and f"cannot lock ref '{ref}'" in text]
            if not locked:
                break
            if pause is None:
                raise _locked(url, locked[0], text)
            time.sleep(pause)
        return statuses, text

    def _send_once(self, url: str, action: str, choose: Callable[[dict[str, str]],
                                                                  dict[str, str | None]],
                   clock: Clock) -> tuple[dict[str, str | None], str]:
        said = bytearray()

        def progress(data: bytes) -> None:
            clock.check()
            if len(said) < _HOOK_TEXT_MAX:
                said.extend(data[:_HOOK_TEXT_MAX - len(said)])

        def update_refs(refs: Mapping[Ref, ObjectID]) -> dict[Ref, ObjectID]:
            remote = check_advertised(refs, action)
            out = {}
            for name, new in choose(remote).items():
                problem = layout.ref_name_problem(name)
                if problem is not None:
                    raise StoreError(f"{action}: {name!r} is not a ref to push: {problem}",
                                     rule="store.bad_ref_name")
                out[Ref(name.encode())] = ObjectID(new.encode()) if new else ZERO
            return out

        def pack(have: Any, want: Any, *, ofs_delta: bool = False,
                 progress: Any = None) -> Any:
            return self.repo.object_store.generate_pack_data(have, want, ofs_delta=ofs_delta)

        try:
            client, path = client_for(url, self._http_config(), clock, push=True)
            result = client.send_pack(path.encode(), update_refs, pack, progress=progress)
        except GitStateError:
            raise
        except Exception as exc:
            if is_timeout(exc):
                raise clock.timeout("stall") from exc
            raise unreachable(action, exc) from exc
        statuses = {ref.decode("utf-8", "replace"): status
                    for ref, status in (result.ref_status or {}).items()}
        return statuses, _hook_text(bytes(said))

    def push_refs(self, url: str, updates: dict[str, tuple[str | None, str]]) -> dict[str, str]:
        """Move each remote ref ``name`` from its lease to ``new`` (``{name: (lease, new)}``)
        in one push; returns ``{name: why}`` for those not moved (the remote moved on, or
        its hook refused: then with what the hook said). A remote ref that moved past the
        lease to one of ``new``'s own ancestors (an earlier push of these commits, killed
        before its lease moved) is recognised by object id and fast-forwarded."""
        moved: dict[str, str] = {}

        def choose(remote: dict[str, str]) -> dict[str, str | None]:
            moved.clear()  # a ref sent again is judged on the new advertisement
            out: dict[str, str | None] = {}
            for name, (lease, new) in updates.items():
                current = remote.get(name)
                if current == new:
                    continue
                if current != lease and not self._published(lease, current, new):
                    moved[name] = "the remote's ref moved on: pull first"
                    continue
                out[name] = new
            return out

        statuses, said = self._send(url, "push", choose)
        for ref, status in statuses.items():
            if status is not None:
                moved[ref] = f"the remote refused it: {status}" + (
                    f"; the remote said: {said}" if said else "")
        return moved

    def _published(self, lease: str | None, current: str | None, new: str) -> bool:
        """Whether the remote's ``current`` lies between ``lease`` and ``new`` on ``new``'s
        history: commits of ours that reached the remote, nothing of anyone else's."""
        if current is None:
            return False
        return any(info.id == current for info in self.walk(new, lease))

    def push(self, url: str, lease: str | None, new: str) -> bool:
        """Move the remote's main from ``lease`` to ``new``, only if it still is ``lease``
        or one of ``new``'s ancestors after it (:meth:`_published`; the server's
        receive-pack checks the old value too). False when it moved on; a
        refusal by the remote's hooks is a StoreError carrying what they printed."""
        seen = {"moved": False}

        def choose(remote: dict[str, str]) -> dict[str, str | None]:
            current = remote.get(layout.BRANCH)
            seen["moved"] = False
            if current != lease and not self._published(lease, current, new):
                seen["moved"] = True
                return {}
            return {} if current == new else {layout.BRANCH: new}

        statuses, said = self._send(url, "push", choose)
        if seen["moved"]:
            return False
        status = statuses.get(layout.BRANCH)
        if status is None:
            return True
        if "hook" in status or "denied" in status:
            raise StoreError(f"the remote refused the push: {status}" + (
                f"; the remote said: {said}" if said else ""), rule="remote.refused",
                remote_said=said)
        return False  # the ref moved between the advertisement and the update: a lost race


def _locked(url: str, ref: str, said: str) -> StoreError:
    """The remote's ``<ref>.lock`` exists, so git's receive-pack would not move the ref: a
    push to it is running, or one was killed there and left its lock. Like git, nothing
    removes another process's lock; the error names the file and the command to run once
    no push is running (docs/remote.md, "A stale lock on the remote")."""
    root = _path_remote(url)
    if root is not None:
        lock = root / f"{ref}.lock"
        age = ""
        with contextlib.suppress(OSError):
            age = f", {int(time.time() - lock.stat().st_mtime)} s old"
        where = (f"{lock} exists{age}. If no push to {url} is running, remove it — "
                 f"`rm '{lock}'` — and push again")
        fix = f"rm '{lock}'"
    else:
        where = (f"the server holds its lock file ({said[:300]}). If no push to it is "
                 f"running, the server's operator removes {ref}.lock in the repository "
                 "that URL serves; then push again")
        fix = f"remove {ref}.lock on the server"
    return StoreError(f"push: the remote's {ref} is locked: a push to it is running, or one "
                      f"was killed and left its lock; {where}", rule="remote.locked",
                      ref=ref, fix=fix)


def _path_remote(url: str) -> Path | None:
    """A path remote's git directory (a bare repository, or a checkout's .git), else None."""
    from .fs import is_local

    if not is_local(url):
        return None
    root = Path(unquote(urlparse(url).path) if url.startswith("file://") else url)
    return root / ".git" if (root / ".git").is_dir() else root


def stale_remote_locks(url: str, older_than: float = STALE_LOCK_SECONDS) -> list[Path]:
    """The ref lock files of a path remote older than ``older_than`` seconds: what a push
    killed inside git's receive-pack leaves (a live one holds its lock for milliseconds).
    Empty for a network remote: its locks are the server's."""
    root = _path_remote(url)
    if root is None:
        return []
    now = time.time()
    found = []
    for lock in [*sorted((root / "refs").rglob("*.lock")), root / "packed-refs.lock"]:
        with contextlib.suppress(OSError):
            if now - lock.lstat().st_mtime >= older_than:
                found.append(lock)
    return found


def _hook_text(data: bytes) -> str:
    """What the remote printed, as plain visible text: its own lines (``remote:`` prefixes
    and progress meters dropped), control characters shown escaped."""
    from ..core.textsafe import visible

    lines = []
    for raw in data.replace(b"\r", b"\n").split(b"\n"):
        line = raw.decode("utf-8", "replace").strip()
        if line and not line.startswith(("Counting", "Compressing", "Writing", "Total")):
            lines.append(visible(line))
    return " | ".join(lines)[:_HOOK_TEXT_MAX]


