"""Reading a ref: the commit it names, fast for the loose refs gitstate writes itself.

A write reads a ref three times (recovery, the base, the compare-and-swap), so a loose ref
file holding a plain object id is read directly; anything else goes through dulwich, and a
FIFO, device or socket in a ref's place is refused before anything opens it for dulwich.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat

from dulwich.errors import PackedRefsException
from dulwich.refs import Ref
from dulwich.repo import Repo

from ..core import layout
from ..core.errors import StoreError

# the ref names gitstate itself writes (main, runs/<id>, refs/gitstate/..., thread refs in
# percent-encoding): only these are read by the fast path; the rest goes through dulwich
_OWN_REF = re.compile(r"refs/[A-Za-z0-9_%+-][A-Za-z0-9._%+-]*(/[A-Za-z0-9_%+-][A-Za-z0-9._%+-]*)*")
_REF_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _refuse_special(name: str, mode: int) -> None:
    if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        raise StoreError(f"{name} is not a regular file (a FIFO, device or socket was put "
                         "in its place); remove it, then run `gitstate verify`",
                         rule="store.bad_ref")


class RefReads:
    """Ref reads of one repository (``RepoBase`` sets the state declared here)."""

    repo: Repo
    git_path: str  # the git directory, as a string: every ref read joins it

    def head(self) -> str | None:
        return self.ref(layout.BRANCH)

    def ref(self, name: str) -> str | None:
        """The commit a ref names, or None. A write reads a ref three times (recovery, the
        base, the compare-and-swap), so a loose ref file holding a plain object id is read
        directly (one open and read, no symlink followed); anything else (a packed ref, a
        symbolic ref, a symlink, an odd name) goes through dulwich. A FIFO, device or
        socket in a ref's place (itself or behind a symlink) is refused before dulwich
        opens it: its read would block or never end."""
        path = f"{self.git_path}/{name}"
        if ".." not in name:
            try:
                fd = os.open(path, _REF_FLAGS)
            except FileNotFoundError:
                fd = -1  # no loose ref: perhaps a packed one
            except OSError:
                fd = -2  # a symlink (O_NOFOLLOW), or a FIFO with no writer (ENXIO)
            if fd >= 0:
                try:
                    mode = os.fstat(fd).st_mode
                    data = os.read(fd, 72) if stat.S_ISREG(mode) else b""
                finally:
                    os.close(fd)
                _refuse_special(name, mode)
                value = data[:-1]
                if _OWN_REF.fullmatch(name) and not name.endswith(".lock") and \
                        data[-1:] == b"\n" and len(value) in (40, 64) and \
                        value.strip(b"0123456789abcdef") == b"":
                    return value.decode()
            elif fd == -2:
                with contextlib.suppress(OSError):
                    _refuse_special(name, os.stat(path).st_mode)  # what a symlink names
        try:
            return self.repo.refs[Ref(name.encode())].decode()
        except KeyError:
            return None
        except PackedRefsException as exc:
            raise StoreError(f"packed-refs is damaged ({exc}); repair it with git",
                             rule="store.bad_ref") from exc
