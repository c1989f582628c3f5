"""A received pack checked from its headers and indexed with bounded memory
(gitstate/store/packindex.py), and objects' sizes read from their headers
(gitstate/store/objheader.py), each against git's own index-pack and cat-file."""

from __future__ import annotations

import shutil
import subprocess
import zlib
from pathlib import Path

import pytest

from gitstate.core.errors import StoreError
from gitstate.store import packindex
from gitstate.store.objheader import HeaderError, Headers
from gitstate.store.packindex import PackBounds, PackSink, index_pack
from tests.bombs import entry_header, pack, zeros_stream
from tests.helpers import GIT

pytestmark = pytest.mark.skipif(GIT is None, reason="needs the git CLI as the checker")


def _git(repo: Path, *args: str, input: bytes | None = None) -> bytes:
    return subprocess.run([GIT or "git", "-C", str(repo), *args], input=input,
                          capture_output=True, check=True, timeout=120).stdout


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository whose file grew over 40 commits (so git stores deltas), packed, with a
    last commit left loose."""
    repo = tmp_path_factory.mktemp("h") / "r"
    subprocess.run([GIT or "git", "init", "-q", str(repo)], check=True)
    for n in range(1, 41):
        (repo / "f.txt").write_text("".join(f"line {i}\n" for i in range(n * 300)))
        (repo / f"g{n % 3}.txt").write_text(f"{n}\n" * n)
        _git(repo, "add", "-A")
        _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", f"{n}")
    _git(repo, "gc", "-q", "--aggressive")
    (repo / "loose.txt").write_text("loose\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "loose")
    return repo


def _pack_of(repo: Path, *flags: str) -> bytes:
    objects = _git(repo, "rev-list", "--objects", "--all")
    return _git(repo, "pack-objects", "-q", "--stdout", *flags, input=objects)


@pytest.mark.parametrize("deltas", ["offset", "by-id"])
def test_the_index_is_the_one_git_writes(history: Path, tmp_path: Path, deltas: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Offset and by-id deltas resolve to the objects git names, and the index is byte for
    byte git index-pack's, with a base cache so small that bases are rebuilt from the pack."""
    monkeypatch.setattr(packindex, "CACHE_BYTES", 4096)
    data = _pack_of(history, *(["--delta-base-offset"] if deltas == "offset" else []))
    (tmp_path / "tmp_pack_x").write_bytes(data)
    pack_path, idx_path = index_pack(str(tmp_path / "tmp_pack_x"), PackBounds())
    theirs = tmp_path / "git"
    theirs.mkdir()
    (theirs / "x.pack").write_bytes(data)
    subprocess.run([GIT or "git", "index-pack", str(theirs / "x.pack")], check=True,
                   capture_output=True)
    assert Path(idx_path).read_bytes() == (theirs / "x.idx").read_bytes()
    assert Path(pack_path).read_bytes() == data


@pytest.mark.parametrize("damage", ["flipped-byte", "cut-short", "thin", "trailing-junk"])
def test_a_damaged_pack_is_refused(history: Path, tmp_path: Path, damage: str) -> None:
    """A flipped byte, a cut, a delta against an object not in the pack, extra bytes."""
    data = _pack_of(history, "--delta-base-offset")
    if damage == "flipped-byte":
        data = data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0x40]) + \
            data[len(data) // 2 + 1:]
    elif damage == "cut-short":
        data = data[:len(data) // 2]
    elif damage == "trailing-junk":
        data += b"junk"
    else:
        head = _git(history, "rev-parse", "HEAD").decode().strip()
        data = _git(history, "pack-objects", "-q", "--stdout", "--thin", "--revs",
                    input=f"{head}\n^{head}~1\n".encode())
    (tmp_path / "tmp_pack_x").write_bytes(data)
    with pytest.raises(StoreError) as err:
        index_pack(str(tmp_path / "tmp_pack_x"), PackBounds())
    assert err.value.rule == "remote.bad_pack"


def test_the_sink_stops_at_the_headers_count(tmp_path: Path) -> None:
    """The object count is refused as soon as the pack's 12 bytes arrive."""
    sink = PackSink(str(tmp_path / "p"), PackBounds(max_objects=10))
    data = pack([entry_header(3, 1) + zlib.compress(b"x")] * 11)
    with pytest.raises(StoreError) as err:
        sink(data[:12])
    sink.close()
    assert err.value.rule == "remote.too_many_objects"


def test_sizes_come_from_headers(history: Path) -> None:
    """Every object's size, loose, packed whole or as a delta, is git cat-file's."""
    listing = _git(history, "cat-file", "--batch-all-objects",
                   "--batch-check=%(objectname) %(objectsize) %(deltabase)").decode()
    headers = Headers([str(history / ".git" / "objects")])
    deltas = 0
    for line in listing.splitlines():
        sha, size, base = line.split()
        deltas += base != "0" * 40
        assert headers.size(sha)[1] == int(size), line
    headers.close()
    assert deltas > 10


def test_a_loose_object_is_never_inflated_past_its_header(tmp_path: Path) -> None:
    """A loose object whose data runs past the size it declares is refused after that
    size, not after all of it; one over the bound before any of its data."""
    objects = tmp_path / "objects"
    (objects / "ab").mkdir(parents=True)
    lying = objects / "ab" / ("c" * 38)
    squeeze = zlib.compressobj()
    lying.write_bytes(squeeze.compress(b"blob 10\0") + squeeze.flush(zlib.Z_FULL_FLUSH) +
                      zeros_stream(1 << 30)[2:-4])
    headers = Headers([str(objects)])
    assert headers.size("ab" + "c" * 38) == (3, 10)
    with pytest.raises(HeaderError):
        headers.read_loose("ab" + "c" * 38, 1 << 20)
    big = objects / "ab" / ("d" * 38)
    squeeze = zlib.compressobj()
    big.write_bytes(squeeze.compress(b"blob 99999999999\0") + squeeze.flush())
    with pytest.raises(HeaderError):
        headers.read_loose("ab" + "d" * 38, 1 << 20)


def test_a_store_reads_a_fetched_pack(history: Path, tmp_path: Path) -> None:
    """The indexed pack is a pack git itself reads (git verify-pack, fsck)."""
    data = _pack_of(history, "--delta-base-offset")
    repo = tmp_path / "r.git"
    subprocess.run([GIT or "git", "init", "-q", "--bare", str(repo)], check=True)
    (repo / "objects" / "pack" / "tmp_pack_y").write_bytes(data)
    _pack, idx = index_pack(str(repo / "objects" / "pack" / "tmp_pack_y"), PackBounds())
    subprocess.run([GIT or "git", "verify-pack", idx], check=True, capture_output=True)
    shutil.rmtree(tmp_path / "r.git")
