"""File-system helpers of the store: atomic replacement, fsync, blob ids of files.

No dulwich here: git's blob id is a sha1 over a header and the bytes.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
from pathlib import Path

from .. import safefile
from ..errors import StoreError
from ..layout import TREE_FILES


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
