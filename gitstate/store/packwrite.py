"""A commit's new objects as one small pack, and the consolidation of small packs.

Each write adds one pack of its 3-4 objects (blob, tree, commit; no deltas) with its v2
index, built in memory and written under git's own temporary prefixes (``tmp_pack_*``,
``tmp_idx_*``: git and dulwich read any ``*.idx``, so a killed writer's half-written index
must not end in ``.idx``), then renamed: the pack first, the index second, since a reader
sees a pack only once its index is there.

Many tiny packs slow every read (each lookup walks the packs), so after a write, outside
the write lock, :func:`consolidate` folds the small packs into one, geometrically: packs
are merged when one is smaller than twice the sum of the smaller ones, so the sizes stay a
geometric series (git's ``repack --geometric=2``) and the count stays logarithmic in the
history. Folding copies the packs' entries as they are, compressed, by the offsets in their
indexes (no inflating, no recompressing); a pack with deltas (one from ``git gc``) is left to
``gitstate gc``. The merged pack is durable (fsynced, and its directory) before any old pack
is removed, so an object is always in some complete pack.
"""

from __future__ import annotations

import contextlib
import os
import zlib
from collections.abc import Iterable
from pathlib import Path

from dulwich.object_format import ObjectFormat
from dulwich.objects import ShaFile

from .. import faults, locking
from ..layout import REPACK_LOCK_FILE
from . import packfmt
from .durability import Flush, fsync_dir

INLINE_MERGE_LIMIT = 20_000  # objects; bigger merges are left to `gitstate gc`
PACK_TRIGGER = 16  # complete packs before a write consolidates (amortized over writes)


def build(objects: Iterable[ShaFile], fmt: ObjectFormat) -> tuple[str, bytes, bytes]:
    """The pack and its index in memory: (name, pack bytes, index bytes)."""
    pack, index, checksum = packfmt.pack(
        ((bytes.fromhex(o.id.decode()), packfmt.entry(o.type_num, o.as_raw_string()))
         for o in objects), fmt.hash_func)
    return f"pack-{checksum.hex()}", pack, index


def write(pack_dir: Path, name: str, pack: bytes, index: bytes, flush: Flush,
          phase: str = "pack") -> None:
    """Put ``name``.pack and ``name``.idx in ``pack_dir`` (temporary names, data flushed,
    renamed; the directory flushed as the mode asks)."""
    created = not pack_dir.is_dir()
    if created:
        pack_dir.mkdir(parents=True, exist_ok=True)
    # both files written and their writeback started before waiting for either
    made: list[tuple[Path, int]] = []
    try:
        made.append(_tmp_file(pack_dir, "tmp_pack_", pack, flush))
        made.append(_tmp_file(pack_dir, "tmp_idx_", index, flush))
        for (_path, fd), point in zip(made, ("tmp_pack", "tmp_idx"), strict=True):
            flush.data(fd)
            faults.hit(f"{phase}.{point}")
    except BaseException:
        for path, _fd in made:
            with contextlib.suppress(OSError):
                path.unlink()
        raise
    finally:
        for _path, fd in made:
            os.close(fd)
    (tmp_pack, _), (tmp_idx, _) = made
    os.replace(tmp_pack, pack_dir / f"{name}.pack")
    faults.hit(f"{phase}.pack_renamed")
    os.replace(tmp_idx, pack_dir / f"{name}.idx")
    faults.hit(f"{phase}.idx_renamed")
    flush.directory(pack_dir)
    if created:
        flush.directory(pack_dir.parent)


def _tmp_file(directory: Path, prefix: str, data: bytes, flush: Flush) -> tuple[Path, int]:
    """A new temporary file holding ``data``, its writeback started; (path, open fd)."""
    path = directory / f"{prefix}{os.getpid()}_{os.urandom(6).hex()}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        flush.start(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()
        raise
    return path, fd


ORPHAN_SECONDS = 60  # a .pack waits for its .idx for microseconds; older ones were abandoned


def sweep(pack_dir: Path) -> list[Path]:
    """Remove what killed writers and mergers left: temporary files of processes no longer
    alive, and packs whose index never came (or was removed first by a killed merge)."""
    import time

    removed: list[Path] = []
    try:
        names = os.listdir(pack_dir)
    except FileNotFoundError:
        return removed
    now = time.time()
    for name in names:
        path = pack_dir / name
        stale = False
        if name.startswith(("tmp_pack_", "tmp_idx_")):
            pid = name.split("_")[2]
            stale = pid.isdigit() and not _alive(int(pid))
        elif name.endswith(".pack") and name[:-5] + ".idx" not in names:
            with contextlib.suppress(FileNotFoundError):
                stale = now - path.stat().st_mtime > ORPHAN_SECONDS
        if stale:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, but another user's
        pass
    return True


def pack_names(pack_dir: Path) -> list[str]:
    """Complete packs (a ``.pack`` with its ``.idx``), from one listing (no stat: this runs
    after every write)."""
    try:
        names = set(os.listdir(pack_dir))
    except FileNotFoundError:
        return []
    return [n[:-5] for n in names if n.endswith(".pack") and n[:-5] + ".idx" in names]


def pack_sizes(pack_dir: Path) -> dict[str, int]:
    """Complete packs and their sizes in bytes."""
    sizes = {}
    for name in pack_names(pack_dir):
        with contextlib.suppress(FileNotFoundError):
            sizes[name] = os.stat(pack_dir / f"{name}.pack").st_size
    return sizes


def geometric_merge(sizes: dict[str, int]) -> list[str]:
    """The packs to merge so that, sorted by size, each remaining pack is at least twice
    the sum of all smaller ones (the smallest prefix that breaks the rule, and below)."""
    ordered = sorted(sizes, key=lambda n: (sizes[n], n))
    total, cut = 0, 0
    for i, name in enumerate(ordered):
        if i and sizes[name] < 2 * total:
            cut = i + 1
        total += sizes[name]
    return ordered[:cut] if cut >= 2 else []


def consolidate(git_dir: Path, fmt: ObjectFormat, limit: int = INLINE_MERGE_LIMIT,
                trigger: int = PACK_TRIGGER) -> int:
    """Merge small packs geometrically (see the module docstring); returns how many packs
    were merged (0: nothing to do, or another process is doing it). Never under the write
    lock: it adds a pack whose objects are already in others, then removes those."""
    pack_dir = git_dir / "objects" / "pack"
    if len(pack_names(pack_dir)) < trigger:  # the common case: one listing, no lock
        return 0
    with locking.attempt(git_dir / REPACK_LOCK_FILE) as taken:
        if not taken:
            return 0
        sweep(pack_dir)
        sizes = pack_sizes(pack_dir)
        merge = geometric_merge(sizes) if len(sizes) >= trigger else []
        if not merge:
            return 0
        entries: dict[bytes, bytes] = {}  # object name -> raw entry
        chosen: list[str] = []
        for name in merge:  # smallest first, within the inline limit
            raw = raw_entries(pack_dir / name, fmt)
            if raw is None or len(entries) + len(raw) > limit:
                break  # deltas (a pack from git gc), or too big: `gitstate gc` folds those
            entries.update(raw)
            chosen.append(name)
        return _replace(pack_dir, chosen, entries, fmt) if len(chosen) >= 2 else 0


def raw_entries(base: Path, fmt: ObjectFormat) -> dict[bytes, bytes] | None:
    """Each object of a pack as its raw, still compressed entry, read from the index's
    offsets; None when the pack holds deltas (their offsets point into this pack), cannot
    be read whole, or an entry's CRC-32 differs from the index's (a damaged pack is never
    copied, so never removed either: `verify` names it)."""
    try:
        index = (base.parent / (base.name + ".idx")).read_bytes()
        data = (base.parent / (base.name + ".pack")).read_bytes()
        positions = sorted((offset, sha, crc) for sha, offset, crc in
                           packfmt.read_index_v2(index, fmt.oid_length))
    except (OSError, ValueError):
        return None
    end = len(data) - fmt.oid_length  # the pack's trailing checksum
    out: dict[bytes, bytes] = {}
    for n, (offset, sha, crc) in enumerate(positions):
        stop = positions[n + 1][0] if n + 1 < len(positions) else end
        entry = data[offset:stop]
        if not entry or stop > end or zlib.crc32(entry) != crc or \
                packfmt.entry_type(entry) in (packfmt.OFS_DELTA, packfmt.REF_DELTA):
            return None
        out[sha] = entry
    return out


def _replace(pack_dir: Path, old: list[str], entries: dict[bytes, bytes],
             fmt: ObjectFormat) -> int:
    # the entries are copied as they are (no inflating, no compressing)
    pack, index, checksum = packfmt.pack(sorted(entries.items()), fmt.hash_func)
    name = f"pack-{checksum.hex()}"
    write(pack_dir, name, pack, index, Flush(), phase="merge")  # durable before removing
    faults.hit("merge.written")
    for stale in old:
        if stale == name:
            continue
        for suffix in (".idx", ".pack"):  # the index first: readers then skip the pack
            with contextlib.suppress(FileNotFoundError):
                (pack_dir / f"{stale}{suffix}").unlink()
    faults.hit("merge.removed")
    fsync_dir(pack_dir)
    return len(old)
