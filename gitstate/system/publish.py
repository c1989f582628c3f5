"""A directory tree published whole (a report's site): built beside its place, renamed in.

``gitstate report --out DIR`` must never write inside a directory gitstate did not just make:
DIR may be a user's directory holding anything, or a link to one. :func:`publish_tree` builds
the tree in a fresh directory beside DIR, every file written through
:func:`safefile.write_atomic`, and renames it into place; what stood there is replaced only
when it is a tree published before, holding exactly what its manifest (:data:`MANIFEST`)
lists. Every file is opened by ``safefile``; this module only makes, renames and removes
directories.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

from . import safefile


class OutputRefused(OSError):
    """An output directory that is not gitstate's to replace (its ``rule`` says why)."""

    def __init__(self, message: str, rule: str) -> None:
        super().__init__(message)
        self.rule = rule


MANIFEST = ".gitstate-report"  # in a published tree: every path it holds, one a line


def publish_tree(out: str | os.PathLike[str], files: dict[str, bytes],
                 progress: Callable[[int], None] | None = None, replace: bool = True) -> None:
    """Make the directory ``out`` hold exactly ``files`` (relative path -> bytes).

    Nothing is ever written inside an existing ``out``: the tree is built in a fresh
    directory beside it (``mkdtemp``: created ``O_EXCL``-style under a random name, 0700
    while it fills), then renamed into place. ``out`` may be absent, an empty directory, or
    a tree this function published before holding exactly what its manifest lists (then it
    is renamed aside and removed, links and all, never followed: ``shutil.rmtree``'s
    descriptor-based walk). Anything else is refused with :class:`OutputRefused`: ``out`` a
    symlink or not a directory (``report.out_not_dir``), or holding any file, link or FIFO
    this function did not write (``report.out_not_ours``); a tree published before is
    replaced only if ``replace`` (else ``report.out_exists``).

    The fresh directory is flocked while it fills: a run that dies (killed) leaves it
    behind, and the next run for ``out`` removes every such leftover no live run holds
    (:func:`_sweep_unfinished`); a run that fails (a full disk) removes its own."""
    import fcntl
    import shutil
    import tempfile

    out = os.fspath(out).rstrip("/") or "/"
    previous = _published(out)
    if previous and not replace:
        raise OutputRefused(f"{out} holds a report written before; nothing was replaced",
                            "report.out_exists")
    parent, name = os.path.split(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    _sweep_unfinished(parent, name)
    fresh = tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=parent)
    held = -1
    try:
        held = safefile.open_dir(fresh)
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # new: nobody else holds it
        manifest = sorted(files)
        for i, rel in enumerate(manifest, 1):
            parts = rel.split("/")
            if any(p in ("", ".", "..") for p in parts) or rel == MANIFEST:
                raise ValueError(f"not a relative path of a published tree: {rel!r}")
            if len(parts) > 1:
                os.makedirs(os.path.join(fresh, *parts[:-1]), exist_ok=True)
            safefile.write_atomic(os.path.join(fresh, *parts), files[rel])
            if progress is not None:
                progress(i)
        safefile.write_atomic(os.path.join(fresh, MANIFEST), "".join(f"{p}\n" for p in manifest)
                     .encode("utf-8"))
        fd = safefile.open_dir(fresh)
        try:
            os.fchmod(fd, 0o755)  # on the descriptor of the directory made here
        finally:
            os.close(fd)
        aside = None
        if previous:
            aside = os.path.join(parent, safefile.temp_name(name))
            os.rename(out, aside)
        try:
            os.rename(fresh, out)  # over an empty directory, or where nothing is
        except OSError as exc:
            if aside is not None:
                os.rename(aside, out)
            raise OutputRefused(f"{out} changed while the site was written ({exc.strerror});"
                                " nothing was replaced", "report.out_not_ours") from exc
        if aside is not None:
            shutil.rmtree(aside, ignore_errors=True)
    except BaseException:
        shutil.rmtree(fresh, ignore_errors=True)
        raise
    finally:
        if held >= 0:
            os.close(held)


def _sweep_unfinished(parent: str, name: str) -> None:
    """Remove the ``.<name>.*.tmp`` directories beside ``<name>`` that killed runs of
    :func:`publish_tree` left: a minute old (one just made is not flocked yet) and their
    flock free (no live run fills them). Never followed: a link there is not a directory."""
    import fcntl
    import shutil
    import time

    prefix = f".{name}."
    for entry in os.listdir(parent):
        if not (entry.startswith(prefix) and entry.endswith(".tmp")):
            continue
        path = os.path.join(parent, entry)
        try:
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode) or time.time() - info.st_mtime < 60:
                continue
            fd = safefile.open_dir(path)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a live run's
        finally:
            os.close(fd)
        shutil.rmtree(path, ignore_errors=True)


def _published(out: str) -> bool:
    """Whether ``out`` holds a tree :func:`publish_tree` wrote (False: absent or empty);
    :class:`OutputRefused` for anything else."""
    try:
        info = os.lstat(out)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(info.st_mode):
        what = "a symlink" if stat.S_ISLNK(info.st_mode) else "not a directory"
        raise OutputRefused(f"{out} is {what}: give a new directory (or a site written "
                            "before), by its own path", "report.out_not_dir")
    names = os.listdir(out)
    if not names:
        return False
    try:
        listed = safefile.read_regular(os.path.join(out, MANIFEST), 64 << 20).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        listed = None
    expected = {MANIFEST, *(listed.splitlines() if listed is not None else ())}
    found: set[str] = set()
    stray = None
    for root, dirs, filenames in os.walk(out):  # never descends into a symlink
        rel = os.path.relpath(root, out)
        for entry in [*dirs, *filenames]:
            path = entry if rel == "." else f"{rel}/{entry}"
            mode = os.lstat(os.path.join(root, entry)).st_mode
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode) or path not in expected:
                stray = stray or path
            found.add(path)
    if listed is None or stray is not None or found != expected:
        what = f"{stray!r}, which" if stray else "files that"
        raise OutputRefused(f"{out} holds {what} gitstate did not write there: give a new "
                            "or empty directory", "report.out_not_ours")
    return True
