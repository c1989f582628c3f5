"""A commit's new objects as one small pack, and the consolidation of small packs.

Each write adds one pack of its 3-4 objects (blob, tree, commit; no deltas) with its v2
index, built in memory and written under git's own temporary prefixes (``tmp_pack_*``,
``tmp_idx_*``: git and dulwich read any ``*.idx``, so a killed writer's half-written index
must not end in ``.idx``), then renamed: the index first, the pack second (a reader sees a
pack only once both are there, and ``git repack -d`` deletes a pack that has no index: see
:func:`publish`).

Many tiny packs slow every read (each lookup walks the packs), so after a write, outside
the write lock, :func:`consolidate` folds them, size-tiered (as LSM stores compact): packs
fall into tiers by size, each tier ``FANOUT`` times the one below, and when a tier holds
``FANOUT`` packs they are merged into one pack of the next tier. Every object is copied once
per tier (about 5 tiers for a 100,000-commit history), so a write pays a fraction of a merge
on average, and at most ``FANOUT - 1`` packs wait in each tier. Folding copies the packs'
entries as they are, compressed, by the offsets in their indexes (no inflating, no
recompressing); a pack with deltas (one from ``git gc``) or a merge over ``INLINE_MERGE_BYTES``
is left to ``gitstate gc``. The merged pack is durable (fsynced, and its directory)
before any old pack is removed, so an object is always in some complete pack.
"""

from __future__ import annotations

import contextlib
import os
import zlib
from collections.abc import Iterable
from pathlib import Path

from dulwich.object_format import ObjectFormat
from dulwich.objects import ShaFile

from ..core.layout import REPACK_LOCK_FILE
from ..system import faults, locking, safefile
from . import packfmt
from .durability import Flush, fsync_dir

INLINE_MERGE_BYTES = 32 << 20  # a merged pack's size; bigger merges are left to `gitstate gc`
FANOUT = 8  # packs in one tier before they merge into one of the next tier
TIER0_BYTES = 4096  # tier 0: packs of a few commits (one commit's pack is about 600 bytes)


def build(objects: Iterable[ShaFile], fmt: ObjectFormat) -> tuple[str, bytes, bytes]:
    """The pack and its index in memory: (name, pack bytes, index bytes)."""
    return build_raw(((bytes.fromhex(o.id.decode()), o.type_num, o.as_raw_string())
                      for o in objects), fmt)


def build_raw(objects: Iterable[tuple[bytes, int, bytes]],
              fmt: ObjectFormat) -> tuple[str, bytes, bytes]:
    """The same from (binary name, type number, body) triples."""
    pack, index, checksum = packfmt.pack(
        ((name, packfmt.entry(type_num, body)) for name, type_num, body in objects),
        fmt.hash_func)
    return f"pack-{checksum.hex()}", pack, index


def build_entries(entries: dict[bytes, bytes], fmt: ObjectFormat
                  ) -> tuple[str, bytes, bytes]:
    """A pack of raw entries (name -> entry, copied as they are) and its index."""
    pack, index, checksum = packfmt.pack(sorted(entries.items()), fmt.hash_func)
    return f"pack-{checksum.hex()}", pack, index


class Staged:
    """A pack and its index written under temporary names, their writeback started, not
    yet flushed or named (:func:`stage`, then :func:`publish` or :meth:`discard`)."""

    def __init__(self, folder: str, created: bool) -> None:
        self.folder = folder
        self.created = created  # the pack directory was made for it
        self.files: list[tuple[str, int]] = []  # (temporary path, open descriptor)
        self.closed = False

    @property
    def fds(self) -> list[int]:
        return [fd for _path, fd in self.files]

    def close(self) -> None:
        if not self.closed:  # once: a descriptor number closed twice may be another's
            self.closed = True
            for _path, fd in self.files:
                with contextlib.suppress(OSError):
                    os.close(fd)

    def discard(self) -> None:
        self.close()
        for path, _fd in self.files:
            with contextlib.suppress(OSError):
                os.unlink(path)


def stage(pack_dir: Path | str, pack: bytes, index: bytes) -> Staged:
    """Write the pack and its index under git's temporary prefixes, not yet flushed
    (``Flush.data_all`` flushes them with whatever else the write needs durable). Paths are
    plain strings here: this runs on every write, and pathlib's joins cost more than the
    renames."""
    folder = os.fspath(pack_dir)
    created = not os.path.isdir(folder)
    if created:
        os.makedirs(folder, exist_ok=True)
    staged = Staged(folder, created)
    try:
        staged.files.append(_tmp_file(folder, "tmp_pack_", pack))
        staged.files.append(_tmp_file(folder, "tmp_idx_", index))
    except BaseException:
        staged.discard()
        raise
    return staged


def publish(staged: Staged, name: str, flush: Flush, phase: str = "pack") -> None:
    """Name a staged pack ``name``.idx and ``name``.pack (their data flushed already): the
    index first, the pack second, then the directory flushed as the mode asks.

    The order is what keeps a concurrent ``git repack -A -d`` from destroying the write:
    repack deletes every ``*.pack`` it finds that has no index (an abandoned pack, to
    it), while an index alone is invisible to it and to every reader (git, dulwich and
    ``objheader`` see a pack once both names exist). Pack first, a repack that ran between
    the two renames deleted the pack whose index came next, and the ref then named a
    commit no longer in the store (tests/write/test_maintenance.py)."""
    staged.close()
    (tmp_pack, _), (tmp_idx, _) = staged.files
    folder = staged.folder
    os.replace(tmp_idx, f"{folder}/{name}.idx")
    faults.hit(f"{phase}.idx_renamed")
    os.replace(tmp_pack, f"{folder}/{name}.pack")
    faults.hit(f"{phase}.pack_renamed")
    flush.directory(folder)
    if staged.created:
        flush.directory(os.path.dirname(folder))


def write(pack_dir: Path | str, name: str, pack: bytes, index: bytes, flush: Flush,
          phase: str = "pack") -> None:
    """Put ``name``.pack and ``name``.idx in ``pack_dir``: staged, both flushed at once,
    published."""
    staged = stage(pack_dir, pack, index)
    try:
        flush.data_all(staged.fds)
        faults.hit(f"{phase}.tmp_pack")
        faults.hit(f"{phase}.tmp_idx")
    except BaseException:
        staged.discard()
        raise
    publish(staged, name, flush, phase)


def _tmp_file(folder: str, prefix: str, data: bytes) -> tuple[str, int]:
    """A new temporary file holding ``data`` (not flushed yet); (path, open fd)."""
    path = f"{folder}/{prefix}{os.getpid()}_{os.urandom(6).hex()}"
    fd = safefile.create_new(path, 0o444)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    return path, fd


ORPHAN_SECONDS = 60  # an .idx waits for its .pack for microseconds; older ones were abandoned


def sweep(pack_dir: Path) -> list[Path]:
    """Remove what killed writers and mergers left: temporary files of processes no longer
    alive (``tmp_pack_<pid>_<random>``: git's own ``tmp_pack_XXXXXX`` is never touched),
    indexes whose pack never came (a writer killed between its two renames), and packs
    whose index was removed first by a killed merge."""
    import time

    removed: list[Path] = []
    try:
        names = os.listdir(pack_dir)
    except FileNotFoundError:
        return removed
    present = set(names)
    now = time.time()
    for name in names:
        path = pack_dir / name
        stale = False
        if name.startswith(("tmp_pack_", "tmp_idx_")):
            parts = name.split("_")
            stale = len(parts) == 4 and parts[2].isdigit() and not _alive(int(parts[2]))
        elif (name.endswith(".pack") and name[:-5] + ".idx" not in present) or (
                name.startswith("pack-") and name.endswith(".idx")
                and name[:-4] + ".pack" not in present):
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


def pack_sizes(pack_dir: Path, names: list[str] | None = None) -> dict[str, int]:
    """Complete packs and their sizes in bytes. A pack's name is the checksum of its
    content, so its size is stat'ed once per process, not after every write."""
    sizes = {}
    folder = str(pack_dir)
    for name in pack_names(pack_dir) if names is None else names:
        known = _SIZES.get((folder, name))
        if known is None:
            try:
                known = os.stat(os.path.join(folder, name + ".pack")).st_size
            except FileNotFoundError:
                continue
            if len(_SIZES) > 4096:
                _SIZES.clear()
            _SIZES[(folder, name)] = known
        sizes[name] = known
    return sizes


_SIZES: dict[tuple[str, str], int] = {}


def tier(size: int) -> int:
    """A pack's tier: 0 up to TIER0_BYTES, then one more for every FANOUT times the size."""
    level, bound = 0, TIER0_BYTES
    while size > bound:
        level, bound = level + 1, bound * FANOUT
    return level


def tiered_merge(sizes: dict[str, int], budget: int = INLINE_MERGE_BYTES) -> list[str]:
    """The packs to merge: in the lowest tier holding FANOUT or more packs whose smallest
    FANOUT fit in ``budget`` bytes together, the smallest packs that fit (at least FANOUT)."""
    tiers: dict[int, list[str]] = {}
    for name, size in sizes.items():
        tiers.setdefault(tier(size), []).append(name)
    for level in sorted(tiers):
        members = sorted(tiers[level], key=lambda n: (sizes[n], n))
        chosen, total = [], 0
        for name in members:
            if total + sizes[name] > budget:
                break
            chosen.append(name)
            total += sizes[name]
        if len(chosen) >= FANOUT:
            return chosen
    return []


def consolidate(git_dir: Path, fmt: ObjectFormat, budget: int = INLINE_MERGE_BYTES) -> int:
    """Merge a full tier of packs into one (see the module docstring); returns how many
    packs were merged (0: nothing to do, or another process is doing it). Never under the
    write lock: it adds a pack whose objects are already in others, then removes those.

    Only what can be folded inline takes part: a tier whose packs together exceed
    ``budget`` bytes, and packs with deltas or damage, are left to `gitstate gc`. Were they
    counted, every write would start a merge only to give up, which once made writes at
    100,000 commits ten times slower."""
    pack_dir = git_dir / "objects" / "pack"
    names = pack_names(pack_dir)
    if len(names) < FANOUT:  # the common case: one listing, no lock
        return 0
    sizes = {n: size for n, size in pack_sizes(pack_dir, names).items()
             if n not in _UNFOLDABLE}
    if not tiered_merge(sizes, budget):  # a stat per pack; no index read, no lock
        return 0
    with locking.attempt(git_dir / REPACK_LOCK_FILE) as taken:
        if not taken:
            return 0
        sweep(pack_dir)
        sizes = {n: size for n, size in pack_sizes(pack_dir).items() if n not in _UNFOLDABLE}
        entries: dict[bytes, bytes] = {}  # object name -> raw entry
        chosen = tiered_merge(sizes, budget)
        for name in chosen:
            raw = raw_entries(pack_dir / name, fmt)
            if raw is None:  # deltas or damage: its name is its content, so for good
                _UNFOLDABLE.add(name)
                return 0  # the next write chooses again without it
            entries.update(raw)
        return _replace(pack_dir, chosen, entries, fmt) if len(chosen) >= 2 else 0


_UNFOLDABLE: set[str] = set()  # packs (by name, a hash of their content) raw_entries refused


def raw_entries(base: Path, fmt: ObjectFormat) -> dict[bytes, bytes] | None:
    """Each object of a pack as its raw, still compressed entry, read from the index's
    offsets; None when the pack holds deltas (their offsets point into this pack), cannot
    be read whole, or an entry's CRC-32 differs from the index's (a damaged pack is never
    copied, so never removed either: `verify` names it)."""
    try:
        index = (base.parent / (base.name + ".idx")).read_bytes()
        data = (base.parent / (base.name + ".pack")).read_bytes()
    except OSError:
        return None
    return entries_of(data, index, fmt.oid_length)


def entries_of(data: bytes, index: bytes, oid_length: int) -> dict[bytes, bytes] | None:
    """``raw_entries`` of a pack and its index given as bytes."""
    try:
        positions = sorted((offset, sha, crc) for sha, offset, crc in
                           packfmt.read_index_v2(index, oid_length))
    except ValueError:
        return None
    end = len(data) - oid_length  # the pack's trailing checksum
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
    name, pack, index = build_entries(entries, fmt)  # copied as they are (no inflating)
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
