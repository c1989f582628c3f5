"""Git's pack and pack-index (version 2) formats, for packs without deltas.

A pack is ``PACK``, the version (2) and the object count, then one entry per object (a
type-and-size header, the zlib-deflated body), then the hash of all of that. Its v2 index is
a magic number and version, a 256-entry fan-out table, the sorted object names, their CRC-32s,
their offsets (31 bits; larger offsets go to a table of 64-bit ones), the pack's hash and the
index's own hash (git's Documentation/gitformat-pack.txt).

gitstate writes a pack of three or four objects on every commit, so this is on the hot path:
built in memory in one pass (dulwich's general writer costs about 2 ms a commit here, most of
it in the fan-out table and per-chunk hashing). The hash follows the repository's object
format (SHA-1, or SHA-256 names of 32 bytes). Pure: no file access, no dulwich import.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable
from typing import Protocol

BLOB, TREE, COMMIT, TAG = 3, 2, 1, 4
OFS_DELTA, REF_DELTA = 6, 7
_INDEX_MAGIC = b"\377tOc\x00\x00\x00\x02"
_LARGE = 0x80000000
FAST_DEFLATE_BYTES = 64 << 10


class Hash(Protocol):
    def update(self, data: bytes, /) -> None: ...
    def digest(self) -> bytes: ...


Entry = tuple[bytes, int, int]  # (binary object name, offset in the pack, CRC-32 of the entry)


def entry(type_num: int, body: bytes) -> bytes:
    """One pack entry: the type and the inflated size in a little-endian varint (4 size
    bits in the first byte, 7 in each next one), then the deflated body."""
    size = len(body)
    header = bytearray([(type_num << 4) | (size & 0x0F)])
    size >>= 4
    while size:
        header[-1] |= 0x80
        header.append(size & 0x7F)
        size >>= 7
    return bytes(header) + deflate(body)


def deflate(body: bytes) -> bytes:
    """``body`` zlib-compressed at zlib's default level, as git's, with a window just large
    enough for it (the same bytes out for a body up to the window) and a smaller hash
    table: setting up zlib's default 32 KiB window and 8-level hash cost 60-80 µs per
    object, more than compressing a 3 KB state. Any window is valid for git's inflate.
    A body past ``FAST_DEFLATE_BYTES`` (a checkpoint's message list) is deflated at level
    1: 550 kB took 15 ms at level 6, 3 ms at level 1, 1.4x the bytes, which `git repack`
    turns into a delta anyway."""
    window = min(15, max(10, len(body).bit_length()))
    level = 6 if len(body) <= FAST_DEFLATE_BYTES else 1
    compressor = zlib.compressobj(level, zlib.DEFLATED, window, 6)
    return compressor.compress(body) + compressor.flush()


def object_name(type_name: bytes, body: bytes, new_hash: Callable[[], Hash]) -> bytes:
    """An object's binary name: the hash of ``<type> <size>\\0`` and its body."""
    h = new_hash()
    h.update(b"%s %d\x00" % (type_name, len(body)))
    h.update(body)
    return h.digest()


def tree_body(files: dict[bytes, bytes], mode: bytes = b"100644") -> bytes:
    """A tree of regular files only (name -> binary object name), in git's order (for
    files alone, plain byte order of the names)."""
    return b"".join(b"%s %s\x00%s" % (mode, name, files[name]) for name in sorted(files))


def commit_body(tree: str, parents: Iterable[str], author: bytes, author_time: int,
                committer: bytes, commit_time: int, tz_offset: int, message: bytes,
                encoding: bytes | None = b"UTF-8") -> bytes:
    """A commit's body as git (and dulwich) serialize it: tree, parents, author, committer
    (``<identity> <time> <+hhmm>``), the encoding header, a blank line, the message. A
    header value holding a newline continues on lines starting with a space."""
    zone = format_zone(tz_offset)
    headers = [(b"tree", tree.encode()), *((b"parent", p.encode()) for p in parents),
               (b"author", b"%s %d %s" % (author, author_time, zone)),
               (b"committer", b"%s %d %s" % (committer, commit_time, zone))]
    if encoding:
        headers.append((b"encoding", encoding))
    out = bytearray()
    for field, value in headers:
        out += field + b" " + value.replace(b"\n", b"\n ") + b"\n"
    return bytes(out) + b"\n" + message


def format_zone(offset: int) -> bytes:
    """``+hhmm`` / ``-hhmm`` for an offset in seconds (whole minutes only)."""
    if offset % 60:
        raise ValueError("a time zone offset must be whole minutes")
    sign = b"-" if offset < 0 else b"+"
    minutes = abs(offset) // 60
    return b"%s%02d%02d" % (sign, minutes // 60, minutes % 60)


def pack(entries: Iterable[tuple[bytes, bytes]],
         new_hash: Callable[[], Hash]) -> tuple[bytes, bytes, bytes]:
    """(pack bytes, index bytes, pack checksum) for ``(name, entry)`` pairs, entries kept in
    the order given."""
    items = list(entries)
    body = bytearray(b"PACK" + struct.pack(">II", 2, len(items)))
    index_entries: list[Entry] = []
    for name, raw in items:
        index_entries.append((name, len(body), zlib.crc32(raw)))
        body += raw
    h = new_hash()
    h.update(bytes(body))
    checksum = h.digest()
    return bytes(body) + checksum, index_v2(index_entries, checksum, new_hash), checksum


def index_v2(entries: list[Entry], pack_checksum: bytes, new_hash: Callable[[], Hash]) -> bytes:
    """The version-2 index of a pack's entries."""
    ordered = sorted(entries)
    # the fan-out: entry i counts the names whose first byte is at most i; built in runs
    # of equal counts (a commit's pack has 3 names: a loop over 256 entries cost more
    # than the rest of the index)
    fanout, at = bytearray(), 0
    for count, (name, _offset, _crc) in enumerate(ordered):
        fanout += struct.pack(">I", count) * (name[0] - at)
        at = name[0]
    fanout += struct.pack(">I", len(ordered)) * (256 - at)
    small: list[int] = []
    large: list[int] = []
    for _name, offset, _crc in ordered:
        if offset < _LARGE:
            small.append(offset)
        else:
            small.append(_LARGE | len(large))
            large.append(offset)
    n = len(ordered)
    out = bytearray(_INDEX_MAGIC)
    out += fanout
    out += b"".join(name for name, _o, _c in ordered)
    out += struct.pack(f">{n}I", *(crc & 0xFFFFFFFF for _n, _o, crc in ordered))
    out += struct.pack(f">{n}I", *small)
    out += struct.pack(f">{len(large)}Q", *large)
    out += pack_checksum
    h = new_hash()
    h.update(bytes(out))
    return bytes(out) + h.digest()


def read_index_v2(data: bytes, oid_length: int) -> list[Entry]:
    """The entries of a version-2 index (ValueError when it is not one, or is cut short)."""
    if data[:8] != _INDEX_MAGIC or len(data) < 8 + 1024:
        raise ValueError("not a version-2 pack index")
    n = struct.unpack_from(">I", data, 8 + 255 * 4)[0]
    names_at = 8 + 1024
    crcs_at = names_at + n * oid_length
    offsets_at = crcs_at + 4 * n
    large_at = offsets_at + 4 * n
    if len(data) < large_at + 2 * oid_length:
        raise ValueError("pack index cut short")
    crcs = struct.unpack_from(f">{n}I", data, crcs_at)
    offsets = struct.unpack_from(f">{n}I", data, offsets_at)
    out = []
    for i in range(n):
        offset = offsets[i]
        if offset & _LARGE:
            at = large_at + 8 * (offset & ~_LARGE)
            if len(data) < at + 8:
                raise ValueError("pack index cut short")
            offset = struct.unpack_from(">Q", data, at)[0]
        name = data[names_at + i * oid_length:names_at + (i + 1) * oid_length]
        out.append((name, offset, crcs[i]))
    return out


def entry_type(raw: bytes) -> int:
    """The type number in an entry's first byte."""
    return (raw[0] >> 4) & 7
