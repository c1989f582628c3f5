"""Reading files gitstate did not necessarily write: never through a symlink, only regular
files, never more than a bound.

Every file in an agent directory can be replaced by hand, by another program or by whatever
a bug let in: a symlink to a file elsewhere, a FIFO (an ``open`` that blocks until someone
writes), a device such as /dev/zero (a read that never ends). Each read here opens with
``O_NOFOLLOW | O_NONBLOCK`` (a FIFO opens at once instead of waiting for a writer), checks
with ``fstat`` that it got a regular file, and reads at most ``limit`` bytes. Standard
library only: the wake-up path imports this module.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # not `from typing import`: the wake-up path imports this module
if TYPE_CHECKING:
    from typing import BinaryIO

_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | \
    getattr(os, "O_CLOEXEC", 0)


class NotRegular(OSError):
    """The path exists but is not a regular file (a symlink, FIFO, device or directory)."""


class TooLarge(OSError):
    """The file is larger than the caller's bound."""


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file at ``path`` (at most ``limit``).

    Raises FileNotFoundError when it is absent, :class:`NotRegular` for a symlink or any
    other kind of file, :class:`TooLarge` past ``limit`` bytes.
    """
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        # ELOOP: the last component is a symlink (O_NOFOLLOW); ENXIO: a socket
        raise NotRegular(f"{os.fspath(path)} is not a regular file ({exc.strerror})") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegular(f"{os.fspath(path)} is not a regular file")
        if info.st_size > limit:
            raise TooLarge(f"{os.fspath(path)} is {info.st_size} bytes; the limit is {limit}")
        chunks: list[bytes] = []
        total = 0
        while True:  # the size can change under us: the bound holds for what is read
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise TooLarge(f"{os.fspath(path)} grew past {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def kind(path: str | os.PathLike[str]) -> str | None:
    """'file', 'symlink', 'dir', 'other', or None when absent (``lstat``: never followed)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    return "other"


def open_regular(path: str | os.PathLike[str], *, write: bool = False,
                 create: bool = False) -> BinaryIO:
    """A binary file object on the regular file at ``path`` (read, or read-write with
    ``write``; ``create`` makes it if absent), never through a symlink, never a FIFO.

    Raises FileNotFoundError when it is absent (and not ``create``), :class:`NotRegular`
    for anything else than a regular file.
    """
    flags = _FLAGS & ~os.O_RDONLY
    flags |= (os.O_RDWR | (os.O_CREAT if create else 0)) if write else os.O_RDONLY
    try:
        fd = os.open(path, flags, 0o644)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise NotRegular(f"{os.fspath(path)} is not a regular file ({exc.strerror})") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegular(f"{os.fspath(path)} is not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return open(fd, "r+b" if write else "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise
