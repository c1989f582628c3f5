"""Objects' types and sizes read from their headers, without inflating them.

Reading an object through dulwich inflates the whole of it, so a 3 GiB blob costs 3 GiB
before anyone can say it is too large. Git records every object's size up front: a loose
object's file inflates to ``<type> <size>\\0`` first, a pack entry starts with its type and
size, and a delta's data starts with its base's size and its result's size. :class:`Headers`
reads only those bytes (at most a few dozen inflated), for objects in any of a store's object
directories (its own, a quarantine's, and their alternates), so that every bound on an object
is checked before a byte of it is inflated. :meth:`Headers.read_loose` then reads a loose
object whole but never past the size its header declared (nor past a bound).

File access only (dulwich's object-id type aside). Pack indexes of version 1 and 2 are
read (git writes 2).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dulwich.objects import ObjectID

COMMIT, TREE, BLOB, TAG, OFS_DELTA, REF_DELTA = 1, 2, 3, 4, 6, 7
TYPE_NAMES = {b"commit": COMMIT, b"tree": TREE, b"blob": BLOB, b"tag": TAG}
_V2_MAGIC = b"\377tOc"


class HeaderError(ValueError):
    """An object's header is not one git writes (the object is damaged or crafted)."""


def varint_size(data: bytes, at: int) -> tuple[int, int]:
    """A delta header's size (7 bits a byte, least significant first); (size, next index)."""
    size = shift = 0
    while True:
        if at >= len(data):
            raise HeaderError("a delta header is cut short")
        byte = data[at]
        at += 1
        size |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return size, at
        if shift > 63:
            raise HeaderError("a delta header's size does not end")


def entry_header(data: bytes) -> tuple[int, int, int]:
    """A pack entry's (type, size, header length) from its first bytes."""
    if not data:
        raise HeaderError("a pack entry is cut short")
    byte = data[0]
    kind, size, shift, at = (byte >> 4) & 7, byte & 0x0F, 4, 1
    while byte & 0x80:
        if at >= len(data) or shift > 63:
            raise HeaderError("a pack entry's header is cut short")
        byte = data[at]
        at += 1
        size |= (byte & 0x7F) << shift
        shift += 7
    if kind not in (COMMIT, TREE, BLOB, TAG, OFS_DELTA, REF_DELTA):
        raise HeaderError(f"a pack entry of unknown type {kind}")
    return kind, size, at


def ofs_delta_base(data: bytes, at: int) -> tuple[int, int]:
    """An offset delta's distance back to its base (git's encoding: each continuation adds
    one before shifting); (distance, next index)."""
    if at >= len(data):
        raise HeaderError("an offset delta is cut short")
    byte = data[at]
    at += 1
    distance = byte & 0x7F
    while byte & 0x80:
        if at >= len(data) or distance > 1 << 56:
            raise HeaderError("an offset delta's base offset is cut short")
        byte = data[at]
        at += 1
        distance = ((distance + 1) << 7) | (byte & 0x7F)
    return distance, at


def delta_sizes(head: bytes) -> tuple[int, int] | None:
    """(base size, result size) from a delta's first inflated bytes; None when ``head``
    (under 20 bytes) ends before them."""
    try:
        base, at = varint_size(head, 0)
        return base, varint_size(head, at)[0]
    except HeaderError:
        if len(head) >= 20:
            raise
        return None


def read_strict(headers: Headers, get_raw: Callable[[ObjectID], tuple[int, bytes]],
                hexsha: str, limit: int) -> tuple[int, bytes]:
    """(type, body) of an object from elsewhere: refused (HeaderError, or the StoreError
    ``store.object_too_large``) when its header declares more than ``limit`` bytes, before
    any of it is inflated; a loose one is never inflated past its header's size, a packed
    one is read by ``get_raw`` (its pack was checked entry by entry when it arrived)."""
    from ..core.errors import StoreError

    _kind, size = headers.size(hexsha)
    if size > limit:
        raise StoreError(f"object {hexsha} is {size} bytes, over the {limit} any gitstate "
                         "object may hold: refused before it was read",
                         rule="store.object_too_large")
    loose = headers.read_loose(hexsha, limit)
    return loose if loose is not None else get_raw(ObjectID(hexsha.encode()))


class Headers:
    """Header reads for the objects under some object directories (see the module)."""

    def __init__(self, object_dirs: list[str], oid_length: int = 20) -> None:
        self.dirs: list[str] = []
        for d in object_dirs:
            self._add(d, depth=0)
        self.oid_length = oid_length
        self._indexes: dict[str, tuple[mmap.mmap, int]] = {}  # idx path -> (map, version)

    def _add(self, directory: str, depth: int) -> None:
        """``directory`` and, through info/alternates, the object directories it borrows."""
        if directory in self.dirs or depth > 5:
            return
        self.dirs.append(directory)
        with contextlib.suppress(OSError, UnicodeDecodeError):
            text = Path(directory, "info", "alternates").read_text("utf-8")
            for line in text.splitlines():
                if line and not line.startswith("#"):
                    self._add(os.path.join(directory, line), depth + 1)

    def close(self) -> None:
        for mapped, _version in self._indexes.values():
            mapped.close()
        self._indexes.clear()

    # -- sizes ----------------------------------------------------------------------------

    def size(self, hexsha: str) -> tuple[int | None, int]:
        """(type, size) of an object: its own type and size, or for a delta (type None) the
        size of the object it resolves to. KeyError when no directory holds it; HeaderError
        when its header is damaged."""
        for d in self.dirs:
            path = os.path.join(d, hexsha[:2], hexsha[2:])
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                return self._loose_header(fd)[:2]
            finally:
                os.close(fd)
        binsha = bytes.fromhex(hexsha)
        for _attempt in range(3):
            found = self._find_packed(binsha)
            if found is None:
                raise KeyError(hexsha)
            pack, offset = found
            try:
                return self._packed_size(pack, offset)
            except FileNotFoundError:  # folded or repacked away since its index was mapped:
                self._forget(pack[:-5] + ".idx")  # the object is in a newer pack now
        raise KeyError(hexsha)

    def _loose_header(self, fd: int) -> tuple[int, int, Any, bytes]:
        """(type, size, the inflater, the body bytes it already produced) of a loose
        object, inflating only up to its header's NUL."""
        inflate = zlib.decompressobj()
        got = b""
        while b"\0" not in got:
            chunk = os.read(fd, 512)
            if not chunk and not inflate.unconsumed_tail:
                raise HeaderError("a loose object ends before its header")
            try:
                got += inflate.decompress(inflate.unconsumed_tail + chunk, 64)
            except zlib.error as exc:
                raise HeaderError(f"a loose object does not inflate ({exc})") from exc
            if len(got) > 64 and b"\0" not in got:
                raise HeaderError("a loose object's header is over 64 bytes")
            if inflate.eof and b"\0" not in got:
                raise HeaderError("a loose object has no header")
        head, _, rest = got.partition(b"\0")
        name, _, digits = head.partition(b" ")
        if name not in TYPE_NAMES or not digits.isdigit() or (digits[:1] == b"0" and
                                                              digits != b"0"):
            raise HeaderError(f"a loose object's header {head[:40]!r} is not git's")
        return TYPE_NAMES[name], int(digits), inflate, rest

    def read_loose(self, hexsha: str, limit: int) -> tuple[int, bytes] | None:
        """(type, body) of a loose object, never inflating past the size its header
        declares nor past ``limit`` (HeaderError then); None when it is not loose here."""
        for d in self.dirs:
            path = os.path.join(d, hexsha[:2], hexsha[2:])
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                kind, size, inflate, body = self._loose_header(fd)
                if size > limit:
                    raise HeaderError(f"the object is {size} bytes; the bound is {limit}")
                parts = [body]
                have = len(body)
                while not inflate.eof and have <= size:
                    chunk = inflate.unconsumed_tail or os.read(fd, 65536)
                    if not chunk:
                        raise HeaderError("a loose object is cut short")
                    try:
                        out = inflate.decompress(chunk, size + 1 - have)
                    except zlib.error as exc:
                        raise HeaderError(f"a loose object does not inflate ({exc})") from exc
                    have += len(out)
                    parts.append(out)
                if have != size:
                    raise HeaderError("a loose object inflates past the size its header "
                                      "declares" if have > size else "a loose object is "
                                      "shorter than its header declares")
                return kind, b"".join(parts)
            finally:
                os.close(fd)
        return None

    # -- packs ----------------------------------------------------------------------------

    def _find_packed(self, binsha: bytes) -> tuple[str, int] | None:
        for _attempt in range(2):  # a miss lists the pack directories again
            for idx_path in list(self._indexes):
                offset = self._lookup(idx_path, binsha)
                if offset is not None:
                    return idx_path[:-4] + ".pack", offset
            if not self._refresh():
                return None
        return None

    def _forget(self, idx_path: str) -> None:
        """Drop a mapped index whose pack is gone (a long-lived process outlives packs)."""
        entry = self._indexes.pop(idx_path, None)
        if entry is not None:
            entry[0].close()

    def _refresh(self) -> bool:
        """Map the indexes not mapped yet; whether any was new."""
        new = False
        for d in self.dirs:
            pack_dir = os.path.join(d, "pack")
            try:
                names = os.listdir(pack_dir)
            except OSError:
                continue
            present = set(names)
            for name in names:
                path = os.path.join(pack_dir, name)
                # a pack is there once both names are (its index is published first)
                if name.endswith(".idx") and name.startswith("pack-") and \
                        path not in self._indexes and name[:-4] + ".pack" in present:
                    with contextlib.suppress(OSError, ValueError):
                        with open(path, "rb") as f:
                            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                        version = 2 if mapped[:4] == _V2_MAGIC else 1
                        self._indexes[path] = (mapped, version)
                        new = True
        return new

    def _lookup(self, idx_path: str, binsha: bytes) -> int | None:
        mapped, version = self._indexes[idx_path]
        n_len = self.oid_length
        base = 8 if version == 2 else 0
        if len(mapped) < base + 1024:
            return None
        first = binsha[0]
        lo = struct.unpack_from(">I", mapped, base + 4 * (first - 1))[0] if first else 0
        hi = struct.unpack_from(">I", mapped, base + 4 * first)[0]
        count = struct.unpack_from(">I", mapped, base + 4 * 255)[0]
        names = base + 1024
        stride, skip = (n_len, 0) if version == 2 else (n_len + 4, 4)
        if len(mapped) < names + count * stride or hi > count:
            return None
        while lo < hi:
            mid = (lo + hi) // 2
            at = names + mid * stride + skip
            name = mapped[at:at + n_len]
            if name == binsha:
                if version == 1:
                    return int(struct.unpack_from(">I", mapped, names + mid * stride)[0])
                offsets = names + count * (n_len + 4)
                offset = struct.unpack_from(">I", mapped, offsets + 4 * mid)[0]
                if offset & 0x80000000:
                    large = offsets + 4 * count + 8 * (offset & 0x7FFFFFFF)
                    offset = struct.unpack_from(">Q", mapped, large)[0]
                return int(offset)
            if name < binsha:
                lo = mid + 1
            else:
                hi = mid
        return None

    def _packed_size(self, pack: str, offset: int) -> tuple[int | None, int]:
        fd = os.open(pack, os.O_RDONLY | os.O_CLOEXEC)
        try:
            data = os.pread(fd, 32 + self.oid_length, offset)
            kind, size, at = entry_header(data)
            if kind not in (OFS_DELTA, REF_DELTA):
                return kind, size
            at = ofs_delta_base(data, at)[1] if kind == OFS_DELTA else at + self.oid_length
            inflate = zlib.decompressobj()
            position, head = offset + at, b""
            while True:  # inflate 20 bytes at most: two sizes of up to 10 bytes each
                chunk = inflate.unconsumed_tail + os.pread(fd, 64, position)
                position += 64
                if not chunk or inflate.eof:
                    raise HeaderError("a delta is cut short")
                try:
                    head += inflate.decompress(chunk, 20 - len(head))
                except zlib.error as exc:
                    raise HeaderError(f"a delta does not inflate ({exc})") from exc
                sizes = delta_sizes(head)
                if sizes is not None:
                    return None, sizes[1]
        finally:
            os.close(fd)
