"""A pack from elsewhere: received to a file within bounds, checked from its headers, then
indexed with bounded memory.

dulwich's own receiving inflates every object whole to hash it, and resolves deltas holding
every pending base in memory: a 14 MB pack whose blob inflates to 3 GiB, or 2,346 bytes of
doubling deltas, cost gigabytes before any check could run. Here:

1. :class:`PackSink` (a fetch's ``pack_data`` callback) writes the bytes to a file as they
   arrive. The object count in the pack's 12-byte header is checked against the bound as
   soon as it arrives, and the bytes against theirs as they do.
2. :func:`index_pack`, pass one, reads the file in order. Each entry's size comes from its
   header and is refused over the per-object bound before its data is inflated; the data is
   then inflated in 64 KiB steps, never past the declared size (a stream that inflates
   further is refused), hashed as it goes for a whole object, and only its first 20 bytes
   kept for a delta, whose header gives the size of the object it resolves to, refused over
   the bound too. The sum of all sizes is bounded as well. The pack's trailing checksum
   must match.
3. Pass two resolves the deltas from their bases, depth first, keeping resolved bases in a
   cache of at most :data:`CACHE_BYTES` (an evicted one is rebuilt from the pack). A delta
   whose base is not in the pack (a thin pack, which is never asked for), a chain deeper
   than git allows, or a result of another size than declared is refused.
4. The version-2 index is written (``packfmt``) and both files get git's names.

Memory stays at the cache, two objects of the per-object bound and ~60 bytes per object,
whatever the pack holds. Every refusal is a :class:`~gitstate.core.errors.StoreError` whose rule
and message name the bound and its ``[gitstate]`` setting.
"""

from __future__ import annotations

import bisect
import collections
import hashlib
import os
import struct
import zlib
from array import array
from collections.abc import Callable
from dataclasses import dataclass

from ..core.errors import StoreError
from ..system import safefile
from . import packfmt
from .objheader import OFS_DELTA, REF_DELTA, HeaderError, delta_sizes, entry_header, ofs_delta_base

CACHE_BYTES = 32 << 20
MAX_DELTA_DEPTH = 4095  # git's own limit on a pack's delta chains
_TYPE_NAMES = {1: b"commit", 2: b"tree", 3: b"blob", 4: b"tag"}
_STEP = 65536


@dataclass(frozen=True)
class PackBounds:
    """What one fetch may bring; the defaults are those of config.toml's settings."""

    max_objects: int = 1_000_000  # [gitstate] fetch_max_objects
    max_bytes: int = 512 << 20  # [gitstate] fetch_max_bytes: the pack as sent
    max_inflated_bytes: int = 4 << 30  # [gitstate] fetch_max_inflated_bytes: all objects
    max_object_bytes: int = 16 << 20  # layout.OBJECT_MAX_BYTES: any one object


def _refuse(rule: str, message: str) -> StoreError:
    return StoreError(message, rule=rule)


def _bad(message: str) -> StoreError:
    return _refuse("remote.bad_pack", f"the remote sent a damaged pack: {message}; nothing "
                   "of it was used")


class PackSink:
    """Writes a pack to ``path`` as it arrives, within ``bounds`` (see the module)."""

    def __init__(self, path: str, bounds: PackBounds,
                 tick: Callable[[], None] | None = None) -> None:
        self.path = path
        self.bounds = bounds
        self.tick = tick
        self.size = 0
        self._head = b""
        self._fd = safefile.create_new(path, 0o444)

    def __call__(self, data: bytes) -> int:
        if self.tick is not None:
            self.tick()
        self.size += len(data)
        if self.size > self.bounds.max_bytes:
            raise _refuse("remote.pack_too_large", f"the remote's pack is over "
                          f"{self.bounds.max_bytes} bytes ([gitstate] fetch_max_bytes); the "
                          "fetch was stopped and nothing of it was used")
        if len(self._head) < 12:
            self._head += data[:12 - len(self._head)]
            if len(self._head) == 12:
                check_pack_header(self._head, self.bounds)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        return len(data)

    def close(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1


def check_pack_header(head: bytes, bounds: PackBounds) -> int:
    """The object count of a pack's 12-byte header, refused over the bound."""
    magic, version, count = head[:4], *struct.unpack(">II", head[4:12])
    if magic != b"PACK" or version not in (2, 3):
        raise _bad("it does not start with a version 2 or 3 pack header")
    if count > bounds.max_objects:
        raise _refuse("remote.too_many_objects", f"the remote's pack holds {count} objects, "
                      f"over the {bounds.max_objects} one fetch may bring ([gitstate] "
                      "fetch_max_objects); the fetch was stopped before their data")
    return int(count)


class _Reader:
    """Sequential reads of a file through a small buffer, hashing what is consumed."""

    def __init__(self, fd: int, digest: Callable[[], packfmt.Hash]) -> None:
        self.fd, self.buf, self.pos = fd, b"", 0
        self.hash = digest()
        self.crc = 0

    def peek(self, n: int) -> bytes:
        """Up to ``n`` bytes (fewer only at the end of the file), not consumed."""
        while len(self.buf) < n:
            more = os.read(self.fd, max(_STEP, n - len(self.buf)))
            if not more:
                break
            self.buf += more
        return self.buf[:n]

    def consume(self, n: int) -> None:
        taken = self.buf[:n]
        self.hash.update(taken)
        self.crc = zlib.crc32(taken, self.crc)
        self.buf = self.buf[n:]
        self.pos += n


class _Entries:
    """Pass one's record of the entries, in compact arrays (offset order)."""

    def __init__(self) -> None:
        self.offset = array("Q")
        self.data_at = array("Q")  # where the zlib stream starts
        self.kind = bytearray()
        self.size = array("Q")  # an object's size; a delta's result size
        self.raw_size = array("Q")  # a delta's own (inflated) size
        self.base = array("q")  # an offset delta's base offset; -1 otherwise
        self.crc = array("I")
        self.ids: list[bytes | None] = []
        self.ref_base: dict[int, bytes] = {}  # entry -> base id, for REF_DELTA


def index_pack(path: str, bounds: PackBounds, oid_length: int = 20,
               tick: Callable[[], None] | None = None) -> tuple[str, str]:
    """Check and index the pack at ``path`` (see the module); returns the paths of the
    pack and index under git's names (``pack-<checksum>``), in ``path``'s directory."""
    digest: Callable[[], packfmt.Hash] = hashlib.sha1 if oid_length == 20 else \
        hashlib.sha256
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        entries, checksum = _scan(fd, bounds, oid_length, digest, tick)
        _resolve(fd, entries, digest, tick)
    finally:
        os.close(fd)
    index = packfmt.index_v2(
        [(entries.ids[i] or b"", entries.offset[i], entries.crc[i])
         for i in range(len(entries.ids))], checksum, digest)
    base = os.path.join(os.path.dirname(path), f"pack-{checksum.hex()}")
    idx_tmp = base + f".idx.tmp-{os.urandom(8).hex()}"
    fd = safefile.create_new(idx_tmp, 0o444)
    try:
        view = memoryview(index)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(path, base + ".pack")
    os.replace(idx_tmp, base + ".idx")
    return base + ".pack", base + ".idx"


def _scan(fd: int, bounds: PackBounds, oid_length: int,
          digest: Callable[[], packfmt.Hash],
          tick: Callable[[], None] | None) -> tuple[_Entries, bytes]:
    reader = _Reader(fd, digest)
    head = reader.peek(12)
    if len(head) < 12:
        raise _bad("it is cut short before its header")
    count = check_pack_header(head, bounds)
    reader.consume(12)
    entries = _Entries()
    total = 0
    for _ in range(count):
        if tick is not None:
            tick()
        offset = reader.pos
        reader.crc = 0
        head = reader.peek(32 + oid_length)
        try:
            kind, size, at = entry_header(head)
            if size > bounds.max_object_bytes:
                raise _too_large(offset, size, bounds, "declares")
            base = -1
            if kind == OFS_DELTA:
                distance, at = ofs_delta_base(head, at)
                base = offset - distance
                if distance == 0 or base < 12:
                    raise _bad(f"the delta at {offset} names a base outside the pack")
            elif kind == REF_DELTA:
                if len(head) < at + oid_length:
                    raise _bad("a delta is cut short")
                entries.ref_base[len(entries.ids)] = head[at:at + oid_length]
                at += oid_length
        except HeaderError as exc:
            raise _bad(str(exc)) from exc
        reader.consume(at)
        data_at = reader.pos
        whole = kind not in (OFS_DELTA, REF_DELTA)
        hasher = digest()
        if whole:
            hasher.update(b"%s %d\x00" % (_TYPE_NAMES[kind], size))
        first = _inflate(reader, size, hasher if whole else None, offset)
        result = size
        if not whole:
            sizes = delta_sizes(first)
            if sizes is None:
                raise _bad(f"the delta at {offset} has no size header")
            result = sizes[1]
            if result > bounds.max_object_bytes:
                raise _too_large(offset, result, bounds, "resolves to")
        total += result
        if total > bounds.max_inflated_bytes:
            raise _refuse("remote.pack_too_large", f"the remote's objects add up to over "
                          f"{bounds.max_inflated_bytes} bytes ([gitstate] "
                          "fetch_max_inflated_bytes), by their headers; nothing was inflated "
                          "past them")
        entries.offset.append(offset)
        entries.data_at.append(data_at)
        entries.kind.append(kind)
        entries.size.append(result)
        entries.raw_size.append(size)
        entries.base.append(base)
        entries.crc.append(reader.crc & 0xFFFFFFFF)
        entries.ids.append(hasher.digest() if whole else None)
    expected = reader.hash.digest()
    trailer = reader.peek(oid_length + 1)
    if trailer[:oid_length] != expected or len(trailer) != oid_length:
        raise _bad("its trailing checksum does not match its content (or it is cut short)")
    return entries, expected


def _too_large(offset: int, size: int, bounds: PackBounds, verb: str) -> StoreError:
    return _refuse("remote.object_too_large", f"the object at offset {offset} of the "
                   f"remote's pack {verb} {size} bytes, over the {bounds.max_object_bytes} "
                   "any gitstate object may hold; refused before it was inflated")


def _inflate(reader: _Reader, size: int, hasher: packfmt.Hash | None,
             offset: int) -> bytes:
    """Inflate one entry's zlib stream from ``reader``, never past ``size`` bytes: feed the
    output to ``hasher`` (a whole object), or keep its first 20 bytes (a delta)."""
    inflate = zlib.decompressobj()
    produced, first = 0, b""
    while not inflate.eof:
        chunk = reader.peek(_STEP)
        if not chunk:
            raise _bad(f"the entry at {offset} is cut short")
        try:
            out = inflate.decompress(chunk, size + 1 - produced)
        except zlib.error as exc:
            raise _bad(f"the entry at {offset} does not inflate ({exc})") from exc
        reader.consume(len(chunk) - len(inflate.unconsumed_tail) - len(inflate.unused_data))
        produced += len(out)
        if produced > size:
            raise _bad(f"the entry at {offset} inflates past the {size} bytes its header "
                       "declares")
        if hasher is not None:
            hasher.update(out)
        elif len(first) < 20:
            first += out[:20 - len(first)]
    if produced != size:
        raise _bad(f"the entry at {offset} is shorter than its header declares")
    return first


def _resolve(fd: int, e: _Entries, digest: Callable[[], packfmt.Hash],
             tick: Callable[[], None] | None) -> None:
    """Pass two: every delta's object id, depth first from the whole objects."""
    from dulwich.pack import apply_delta

    n = len(e.ids)
    children: dict[int, list[int]] = collections.defaultdict(list)
    by_base_id: dict[bytes, list[int]] = collections.defaultdict(list)
    for k, oid in e.ref_base.items():
        by_base_id[oid].append(k)
    for i in range(n):
        if e.base[i] >= 0:
            j = bisect.bisect_left(e.offset, e.base[i])
            if j >= n or e.offset[j] != e.base[i] or j >= i:
                raise _bad(f"the delta at {e.offset[i]} names a base that is no entry "
                           "before it")
            children[j].append(i)
    cache: collections.OrderedDict[int, bytes] = collections.OrderedDict()
    held = [0]
    base_type = bytearray(e.kind)

    def content(i: int) -> bytes:
        chain = []
        j = i
        while j not in cache and e.kind[j] in (OFS_DELTA, REF_DELTA):
            chain.append(j)
            j = parent[j]
        if j in cache:
            cache.move_to_end(j)
            data = cache[j]
        else:
            data = _read(fd, e, j, e.size[j])
            _keep(j, data)
        for k in reversed(chain):
            delta = _read(fd, e, k, e.raw_size[k])
            try:
                data = b"".join(apply_delta(data, delta))
            except Exception as exc:  # ApplyDeltaError and friends: a crafted delta
                raise _bad(f"the delta at {e.offset[k]} does not apply ({exc})") from exc
            if len(data) != e.size[k]:
                raise _bad(f"the delta at {e.offset[k]} resolves to another size than "
                           "its header declares")
            _keep(k, data)
        return data

    def _keep(k: int, data: bytes) -> None:
        cache[k] = data
        held[0] += len(data)
        while held[0] > CACHE_BYTES and len(cache) > 1:
            _, dropped = cache.popitem(last=False)
            held[0] -= len(dropped)

    parent = array("q", [-1]) * n
    depth = array("I", [0]) * n
    stack = [i for i in range(n) if e.ids[i] is not None]
    while stack:
        i = stack.pop()
        if e.ids[i] is None:
            if tick is not None:
                tick()
            data = content(i)
            base_type[i] = base_type[parent[i]]
            h = digest()
            h.update(b"%s %d\x00" % (_TYPE_NAMES[base_type[i]], len(data)))
            h.update(data)
            e.ids[i] = h.digest()
        own = e.ids[i]
        waiting = children.pop(i, [])
        if by_base_id and own is not None:
            waiting += by_base_id.pop(own, [])
        for k in waiting:
            parent[k] = i
            depth[k] = depth[i] + 1
            if depth[k] > MAX_DELTA_DEPTH:
                raise _bad(f"a delta chain is deeper than {MAX_DELTA_DEPTH}")
            stack.append(k)
    unresolved = [i for i in range(n) if e.ids[i] is None]
    if unresolved:
        raise _bad(f"{len(unresolved)} deltas name a base the pack does not hold (a thin "
                   "pack, which was not asked for, or a loop of deltas)")


def _read(fd: int, e: _Entries, i: int, size: int) -> bytes:
    """Entry ``i``'s inflated data (``size`` bytes, checked in pass one)."""
    inflate = zlib.decompressobj()
    parts, at, got = [], e.data_at[i], 0
    while not inflate.eof:
        chunk = inflate.unconsumed_tail or os.pread(fd, _STEP, at)
        if not inflate.unconsumed_tail:
            at += len(chunk)
        if not chunk:
            raise _bad(f"the entry at {e.offset[i]} is cut short")
        out = inflate.decompress(chunk, size + 1 - got)
        got += len(out)
        parts.append(out)
        if got > size:
            raise _bad(f"the entry at {e.offset[i]} inflates past its header")
    return b"".join(parts)
