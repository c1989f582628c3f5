"""File-system helpers of the store: atomic replacement, fsync, blob ids of files.

No dulwich here: git's blob id is a sha1 over a header and the bytes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path

from ..core.errors import disk_full
from ..core.layout import EXCLUDE_FILE, TREE_FILES
from ..system import safefile


def git_blob_id(data: bytes) -> str:
    """The git blob id of ``data`` (what the render fast path computes with hashlib)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def file_blob_id(path: Path) -> str | None:
    """The blob id of a working-tree file; a symlink, FIFO, device, directory or oversized
    file gets a marker that equals no blob id (so it counts as a hand edit, never read)."""
    try:
        data = safefile.read_regular(path, TREE_FILES.get(path.name, 1 << 20))
    except FileNotFoundError:
        return None
    except OSError:
        return "not-a-regular-file"
    return git_blob_id(data)


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_local(url: str) -> bool:
    """A repository on this machine: a path or a file:// URL."""
    return url.startswith("file://") or ("://" not in url and not (
        ":" in url.split("/", 1)[0] and not url.startswith("/")))


def holds_data(git_dir: Path) -> bool:
    """Whether a (possibly broken) git directory holds any object or ref file."""
    for sub in ("objects", "refs"):
        for _root, _dirs, files in os.walk(git_dir / sub):
            if files:
                return True
    return (git_dir / "packed-refs").exists()


def ref_names(git_dir: Path) -> list[str]:
    """The names of the refs a git directory holds, loose and packed (no dulwich: used
    before a directory is known to be a repository gitstate may open)."""
    names = {os.path.relpath(os.path.join(root, f), git_dir)
             for root, _dirs, files in os.walk(git_dir / "refs") for f in files}
    try:
        packed = safefile.read_regular(git_dir / "packed-refs", 1 << 24)
    except OSError:
        packed = b""
    for line in packed.splitlines():
        fields = line.split(b" ", 1)
        if len(fields) == 2 and line[:1] not in (b"#", b"^"):
            names.add(fields[1].decode("utf-8", "replace"))
    return sorted(names)


def created_dirs(dirs: set[str]) -> set[str]:
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
    temporary file (safefile.write_atomic: a link in its place is replaced, never followed)."""
    try:
        safefile.write_atomic(path, data, durable=fsync)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise disk_full(f"{path} could not be written") from exc
        raise


def _renameat2() -> Callable[[int, bytes, int, bytes, int], int] | None:
    """glibc's renameat2 (2.28 and later), or None (another libc, another system)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        func = libc.renameat2
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                     ctypes.c_uint]
    func.restype = ctypes.c_int
    renameat2: Callable[[int, bytes, int, bytes, int], int] = func
    return renameat2


_RENAMEAT2 = _renameat2()
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def exchange(a: str, b: str) -> bool:
    """Trade the names ``a`` and ``b`` (both must exist) in one ``renameat2
    (RENAME_EXCHANGE)``; False where the system or file system cannot (nothing moved)."""
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE):
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV,
                        errno.ENOENT):
            raise OSError(code, os.strerror(code), b)
        return False
    return True


def swap_write(path: Path | str, data: bytes, spare: Path | str) -> None:
    """Replace the bytes of ``path``, a re-derivable file, as ``atomic_write`` does for a
    reader (old bytes or new, never a mix), at a fraction of its cost: ``data`` goes into a
    kept spare file, ``spare``, which then trades places with ``path`` in one
    ``renameat2(RENAME_EXCHANGE)``; the old file becomes the next spare.

    Why: ext4 pushes a file's data to disk when a rename replaces an existing name
    (``auto_da_alloc``), so every atomic_write of the working file, the index and the stamp
    cost a flush the hot path must not pay (they are repaired from HEAD after a crash). An
    exchange replaces no name, and the spare is rewritten in place, not created.

    The spare is only ever written when it is a regular file of ours with one link: a
    symlink, FIFO, hard link or foreign file planted under its name is removed and a fresh
    one made, so nothing outside is written through it. Where the exchange is not available
    (no glibc, a file system without it) or ``path`` is not a regular file, atomic_write.
    """
    try:
        regular = stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        regular = False  # nothing to trade places with
    opened = _open_spare(spare) if regular and _RENAMEAT2 is not None else None
    if opened is None:
        atomic_write(Path(path), data, fsync=False)
        return
    fd, size = opened
    try:
        view = memoryview(data)
        offset = 0
        while offset < len(data):
            offset += os.pwrite(fd, view[offset:], offset)
        if size > len(data):  # only a longer old content leaves a tail to cut
            os.ftruncate(fd, len(data))
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise disk_full(f"{path} could not be written") from exc
        raise
    finally:
        os.close(fd)
    assert _RENAMEAT2 is not None
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(spare), _AT_FDCWD, os.fsencode(path),
                  _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV):
            raise OSError(code, os.strerror(code), str(path))
        atomic_write(Path(path), data, fsync=False)  # this file system cannot exchange


def _open_spare(spare: Path | str) -> tuple[int, int] | None:
    """The spare file, opened for writing, and its size: remade when it is not a plain
    file of ours; None when it cannot be (a directory in its place)."""
    try:
        fd = safefile.open_in_place(spare)
    except FileNotFoundError:
        fd = -1
    except OSError:  # a symlink, a FIFO, a hard link, a directory ...
        fd = -2
    if fd >= 0:
        info = os.fstat(fd)
        if info.st_uid == os.geteuid():
            return fd, info.st_size
        os.close(fd)
    try:
        if fd != -1:
            os.unlink(spare)  # the link itself, never what it points at
        return safefile.create_new(spare), 0
    except OSError:
        return None


def exclude_projection(git_dir: Path) -> None:
    """Keep the projection and our temporary files out of git status (info/exclude)."""
    exclude = git_dir / EXCLUDE_FILE
    exclude.parent.mkdir(exist_ok=True)
    lines = "/working_state_history.jsonl\n/.*.tmp\n"
    try:  # a link in its place is read as empty and replaced by a file of its own
        old = safefile.read_regular(exclude, 1 << 20)
    except OSError:
        old = b""
    if safefile.kind(exclude) != "file" or lines.encode() not in old:
        old += b"\n" if old and not old.endswith(b"\n") else b""
        safefile.write_atomic(exclude, old + f"# gitstate: never committed\n{lines}".encode())
