"""Every file gitstate opens in an agent directory, a report's output directory or a receipt or
log path: never through a symlink, only regular files, never more than a bound.

Every file in an agent directory can be replaced by hand, by another program or by whatever
a bug let in: a symlink to a file elsewhere, a FIFO (an ``open`` that blocks until someone
writes), a device such as /dev/zero (a read that never ends), a hard link to a file
elsewhere (written in place, it would change that file). Each read here opens with
``O_NOFOLLOW | O_NONBLOCK`` (a FIFO opens at once instead of waiting for a writer), checks
with ``fstat`` that it got a regular file, and reads at most ``limit`` bytes.

Writes go through the same door, in three shapes, each relative to a descriptor of the
file's directory (opened ``O_DIRECTORY | O_NOFOLLOW``, so a directory swapped for a link is
refused too):

- whole files (:func:`write_atomic`): written to a temporary name created ``O_EXCL`` with 64
  random bits in it (:func:`temp_name`), its mode set on the descriptor, then renamed over
  the name. The rename replaces whatever stood there (a symlink, a FIFO, a hard link) and
  never writes through it: the file is repaired, what it pointed to is untouched;
- files written in place (:func:`open_lock`, :func:`append`, :func:`open_regular` with
  ``write``): a lock file and its marker byte, an appended log. Refused (:class:`NotRegular`,
  the rule ``store.not_regular``) unless the name is a regular file with one link;
- new files (:func:`create_new`): ``O_CREAT | O_EXCL``, which never follows a link.

Nothing is ever chmod'ed by name: a mode is set on the descriptor gitstate created.
``tests/project/test_architecture.py`` forbids every other write-open in the package (a
report's whole tree is published on :func:`write_atomic` by ``publish.py``, which opens no
file itself). Standard library only: the wake-up path imports this module.
"""

from __future__ import annotations

import errno
import os
import stat

TYPE_CHECKING = False  # not `from typing import`: the wake-up path imports this module
if TYPE_CHECKING:
    from typing import BinaryIO

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_FLAGS = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | _CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
# what opening a name that is no regular file fails with: ELOOP, the last component is a
# symlink (O_NOFOLLOW); ENXIO, a socket or a FIFO with no reader; EISDIR, a directory
_NOT_REGULAR = frozenset({errno.ELOOP, errno.ENXIO, errno.EISDIR})
RULE = "store.not_regular"  # the rule a caller names when NotRegular reaches the user


class NotRegular(OSError):
    """The path exists but is not a regular file (a symlink, FIFO, device or directory), or
    is one with more than one link (written in place, it would change another name's file)."""

    rule = RULE


class TooLarge(OSError):
    """The file is larger than the caller's bound."""


def read_regular(path: str | os.PathLike[str], limit: int, *, sole: bool = False) -> bytes:
    """The bytes of the regular file at ``path`` (at most ``limit``).

    Raises FileNotFoundError when it is absent, :class:`NotRegular` for a symlink or any
    other kind of file (with ``sole``, one with another name too: a secret that must be
    gitstate's own), :class:`TooLarge` past ``limit`` bytes.
    """
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        if exc.errno not in _NOT_REGULAR:  # absent, read-only, no permission: as they are
            raise
        raise NotRegular(f"{os.fspath(path)} is not a regular file ({exc.strerror})") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegular(f"{os.fspath(path)} is not a regular file")
        if sole and info.st_nlink != 1:
            raise NotRegular(f"{os.fspath(path)} has another name (a hard link): remove it")
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
                 create: bool = False, sole: bool = False) -> BinaryIO:
    """A binary file object on the regular file at ``path`` (read, or read-write with
    ``write``; ``create`` makes it if absent), never through a symlink, never a FIFO; with
    ``write`` (or ``sole``) never one with another name (a hard link).

    Raises FileNotFoundError when it is absent (and not ``create``), :class:`NotRegular`
    for anything else than a regular file.
    """
    flags = _FLAGS & ~os.O_RDONLY
    flags |= (os.O_RDWR | (os.O_CREAT if create else 0)) if write else os.O_RDONLY
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno not in _NOT_REGULAR:  # absent, read-only, no permission: as they are
            raise
        raise NotRegular(f"{os.fspath(path)} is not a regular file ({exc.strerror})") from exc
    try:
        if write or sole:
            _check_writable(fd, path)
        else:
            _check_regular(fd, path)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return open(fd, "r+b" if write else "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise


def _check_regular(fd: int, path: str | os.PathLike[str]) -> os.stat_result:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise NotRegular(f"{os.fspath(path)} is not a regular file")
    return info


def _check_writable(fd: int, path: str | os.PathLike[str]) -> None:
    """A file written in place: regular, and its only name (a hard link to a file elsewhere
    would carry the write there)."""
    if _check_regular(fd, path).st_nlink != 1:
        raise NotRegular(f"{os.fspath(path)} has another name (a hard link): not written "
                         "in place; remove it")


def open_dir(path: str | os.PathLike[str]) -> int:
    """A descriptor on the directory at ``path`` (never through a symlink in its last
    component): for a directory's own flock, an fsync, or ``dir_fd`` of the calls below."""
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC)
    except OSError as exc:
        if exc.errno not in (*_NOT_REGULAR, errno.ENOTDIR):
            raise
        raise NotRegular(f"{os.fspath(path)} is not a directory ({exc.strerror})") from exc


def _in_dir(path: str | os.PathLike[str]) -> tuple[int, str]:
    """(a descriptor of ``path``'s directory, its last component)."""
    head, name = os.path.split(os.fspath(path))
    return open_dir(head or "."), name


def temp_name(name: str) -> str:
    """``.<name>.<16 random hex digits>.tmp``: a temporary name nobody can plant in advance
    (``layout.stray_files`` and the stale-file sweep know the ``.*.tmp`` shape)."""
    return f".{name}.{os.urandom(8).hex()}.tmp"


def create_new(path: str | os.PathLike[str], mode: int = 0o644) -> int:
    """A write descriptor on a file created at ``path`` now (``O_EXCL``: FileExistsError when
    any name, a link included, is there). The mode is set on the descriptor, umask aside."""
    dir_fd, name = _in_dir(path)
    try:
        fd = os.open(name, _NEW, mode, dir_fd=dir_fd)
    finally:
        os.close(dir_fd)
    os.fchmod(fd, mode)
    return fd


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int = 0o644, *,
                 durable: bool = False) -> None:
    """Make ``path`` a regular file holding ``data``: a fresh temporary file beside it, then
    a rename over the name, which replaces a symlink, FIFO or hard link standing there
    without writing through it. ``durable``: fsync the file before the rename."""
    dir_fd, name = _in_dir(path)
    try:
        tmp = temp_name(name)
        fd = os.open(tmp, _NEW, mode, dir_fd=dir_fd)
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.close(fd)
        try:
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            os.unlink(tmp, dir_fd=dir_fd)
            raise
    finally:
        os.close(dir_fd)


def append(path: str | os.PathLike[str], data: bytes, mode: int = 0o644, *,
           repair: bool = False) -> None:
    """Append ``data`` to the regular file at ``path`` (created if absent), in one write;
    :class:`NotRegular` for a symlink, FIFO, device or a file with another name, or with
    ``repair`` (a log whose old lines may be lost) that name removed, never what it points
    at, and a fresh file made in its place."""
    try:
        fd = open_append(path, mode)
    except NotRegular:
        if not repair or kind(path) == "dir":
            raise
        os.unlink(path)
        fd = create_new(path, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def open_append(path: str | os.PathLike[str], mode: int = 0o644) -> int:
    """A descriptor appending to the regular file at ``path`` (see :func:`append`)."""
    return _open_in_place(path, os.O_WRONLY | os.O_APPEND, mode)


def open_lock(path: str | os.PathLike[str]) -> int:
    """A read-write descriptor on the lock file at ``path``, created if absent: for a flock
    and the marker byte written in it. :class:`NotRegular` unless a regular file with one
    link (a lock that is a link to a file elsewhere would have that file's first byte
    overwritten)."""
    return _open_in_place(path, os.O_RDWR, 0o644)


def open_in_place(path: str | os.PathLike[str]) -> int:
    """A write descriptor on the existing regular file at ``path``, its only name (a kept
    spare rewritten in place): FileNotFoundError when absent, else as :func:`open_lock`."""
    return _open_in_place(path, os.O_WRONLY, 0o644, create=False)


def shared(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a regular file with another name too (a hard link): never
    written in place, it is replaced or removed (``lstat``: never followed)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_nlink != 1


def _open_in_place(path: str | os.PathLike[str], flags: int, mode: int, *,
                   create: bool = True) -> int:
    dir_fd, name = _in_dir(path)
    flags |= (os.O_CREAT if create else 0) | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(name, flags, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in _NOT_REGULAR:
            raise
        raise NotRegular(f"{os.fspath(path)} is not a regular file ({exc.strerror}); gitstate "
                         "does not write through it: remove it") from exc
    finally:
        os.close(dir_fd)
    try:
        _check_writable(fd, path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def real_dirs(root: str | os.PathLike[str], names: tuple[str, ...]) -> None:
    """Refuse (a StoreError, ``store.not_regular``) when any of ``names`` (relative to
    ``root``) that exists is a symlink or no directory: the writes open a file's own
    directory without following a link, so the directories above it must be real ones."""
    from ..core.errors import StoreError

    for name in names:
        path = os.path.join(root, name)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(info.st_mode):
            what = "a symlink" if stat.S_ISLNK(info.st_mode) else "not a directory"
            raise StoreError(f"{path} is {what}: gitstate writes only into real directories; "
                             "remove it", rule=RULE)
