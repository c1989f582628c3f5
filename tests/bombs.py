"""Packs an attacker would send, built byte by byte (nothing here inflates them): a blob whose
data inflates to gigabytes from a few megabytes, and the doubling-delta bomb (a 1 MiB base
and deltas that each copy their base twice, 2 GiB after eleven of them, in ~2.3 KB). Serve
them with ``HostileGitServer(repo, pack=...)`` (tests/hostile_git_server.py)."""

from __future__ import annotations

import hashlib
import struct
import zlib

MIB = 1 << 20
BLOB, OFS_DELTA = 3, 6


def zeros_stream(size: int) -> bytes:
    """A zlib stream that inflates to ``size`` zero bytes, built in milliseconds: after a
    full flush, deflating another MiB of zeros yields the same bytes, so the stream is one
    such block repeated (and the checksum computed, not the data)."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, -15)
    zero = bytes(MIB)
    whole, rest = divmod(size, MIB)
    first = squeeze.compress(zero) + squeeze.flush(zlib.Z_FULL_FLUSH) if whole else b""
    again = squeeze.compress(zero) + squeeze.flush(zlib.Z_FULL_FLUSH) if whole > 1 else b""
    body = first + again * max(0, whole - 1)
    body += squeeze.compress(bytes(rest)) + squeeze.flush(zlib.Z_FINISH)
    adler = 1
    for _ in range(whole):
        adler = zlib.adler32(zero, adler)
    adler = zlib.adler32(bytes(rest), adler)
    return b"\x78\xda" + body + struct.pack(">I", adler)


def entry_header(kind: int, size: int) -> bytes:
    out = bytearray([(kind << 4) | (size & 0x0F)])
    size >>= 4
    while size:
        out[-1] |= 0x80
        out.append(size & 0x7F)
        size >>= 7
    return bytes(out)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _ofs(distance: int) -> bytes:
    """git's offset-delta distance encoding (each continuation adds one)."""
    out = [distance & 0x7F]
    distance >>= 7
    while distance:
        distance -= 1
        out.insert(0, 0x80 | (distance & 0x7F))
        distance >>= 7
    return bytes(out)


def _copy(offset: int, size: int) -> bytes:
    """One delta copy command (offset and size in their shortest byte forms)."""
    cmd, args = 0x80, bytearray()
    for i in range(4):
        if (offset >> (8 * i)) & 0xFF:
            cmd |= 1 << i
            args.append((offset >> (8 * i)) & 0xFF)
    for i in range(3):
        if (size >> (8 * i)) & 0xFF:
            cmd |= 1 << (4 + i)
            args.append((size >> (8 * i)) & 0xFF)
    return bytes([cmd]) + bytes(args)


def pack(entries: list[bytes]) -> bytes:
    body = b"PACK" + struct.pack(">II", 2, len(entries)) + b"".join(entries)
    return body + hashlib.sha1(body).digest()


def blob_bomb(size: int) -> bytes:
    """A one-blob pack whose blob really inflates to ``size`` bytes (zeros)."""
    return pack([entry_header(BLOB, size) + zeros_stream(size)])


def doubling_deltas(base: int = MIB, doublings: int = 11) -> bytes:
    """A blob of ``base`` zeros, then ``doublings`` offset deltas each copying the previous
    object twice: the last resolves to ``base << doublings`` bytes."""
    entries = [entry_header(BLOB, base) + zlib.compress(bytes(base), 9)]
    offsets = [12]
    size = base
    for _ in range(doublings):
        commands = bytearray()
        for _twice in range(2):
            at = 0
            while at < size:
                step = min(0xFFFFFF, size - at)
                step -= step % 0x10000 if step > 0x10000 else 0
                commands += _copy(at, step)
                at += step
        delta = _varint(size) + _varint(2 * size) + bytes(commands)
        offset = offsets[-1] + len(entries[-1])
        entries.append(entry_header(OFS_DELTA, len(delta)) + _ofs(offset - offsets[-1])
                       + zlib.compress(delta, 9))
        offsets.append(offset)
        size *= 2
    return pack(entries)


# Source of ``peak_mib()`` for the child scripts that measure a pull in a fresh process.
PEAK_MIB = """import resource
def peak_mib():
    # VmHWM is this process's own high-water mark; ru_maxrss survives exec and would
    # report the forking parent's size (a pytest worker of 350 MiB, say)
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
"""
