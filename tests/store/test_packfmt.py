"""The pack and index writer against git itself: git's index-pack, given only our pack,
writes the same index bytes we wrote; git cat-file reads every object back; our index reader
reads git's indexes (large offsets included)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import zlib
from pathlib import Path

import pytest
from dulwich.objects import Blob, Commit, Tree

from gitstate.store import packfmt
from tests.helpers import GIT


def _objects() -> list[Blob | Tree | Commit]:
    blobs = [Blob.from_string(b""), Blob.from_string(b"x" * 70_000),  # a multi-byte size
             Blob.from_string(os.urandom(3000)), Blob.from_string("跌破 262\n".encode())]
    tree = Tree()
    for i, blob in enumerate(blobs):
        tree.add(f"f{i}".encode(), 0o100644, blob.id)
    commit = Commit()
    commit.tree = tree.id
    commit.author = commit.committer = b"t <t@t>"
    commit.author_time = commit.commit_time = 1_700_000_000
    commit.author_timezone = commit.commit_timezone = 0
    commit.message = b"m\n"
    return [*blobs, tree, commit]


def test_git_index_pack_writes_the_index_we_wrote(tmp_path: Path) -> None:
    if GIT is None:
        pytest.skip("git CLI not installed")
    objects = _objects()
    pack, index, checksum = packfmt.pack(
        ((bytes.fromhex(o.id.decode()), packfmt.entry(o.type_num, o.as_raw_string()))
         for o in objects), hashlib.sha1)
    assert pack[-20:] == checksum and len(set(o.id for o in objects)) == len(objects)
    repo = tmp_path / "r"
    subprocess.run([GIT, "init", "-q", str(repo)], check=True)
    pack_path = repo / ".git" / "objects" / "pack" / f"pack-{checksum.hex()}.pack"
    pack_path.write_bytes(pack)
    out = subprocess.run([GIT, "-C", str(repo), "index-pack", "--strict", str(pack_path)],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert pack_path.with_suffix(".idx").read_bytes() == index  # byte for byte
    for obj in objects:
        shown = subprocess.run([GIT, "-C", str(repo), "cat-file", obj.type_name.decode(),
                                obj.id.decode()], capture_output=True, check=True).stdout
        assert shown == obj.as_raw_string()
    fsck = subprocess.run([GIT, "-C", str(repo), "fsck", "--strict"], capture_output=True,
                          text=True, check=False)
    assert fsck.returncode == 0, fsck.stderr


def test_the_reader_reads_back_every_entry_and_large_offsets() -> None:
    entries = [(bytes([i]) * 20, offset, zlib.crc32(bytes([i])))
               for i, offset in enumerate([12, 3 << 30, 5 << 31, 40])]
    index = packfmt.index_v2(entries, b"\0" * 20, hashlib.sha1)
    assert sorted(packfmt.read_index_v2(index, 20)) == sorted(entries)
    assert hashlib.sha1(index[:-20]).digest() == index[-20:]
    with pytest.raises(ValueError):
        packfmt.read_index_v2(index[:1000], 20)
    with pytest.raises(ValueError):
        packfmt.read_index_v2(b"PACK" + index[4:], 20)


def test_a_sha256_pack_is_read_by_git(tmp_path: Path) -> None:
    """The same writer with 32-byte names, in a SHA-256 repository git made."""
    if GIT is None:
        pytest.skip("git CLI not installed")
    repo = tmp_path / "r"
    made = subprocess.run([GIT, "init", "-q", "--object-format=sha256", str(repo)],
                          capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip("this git cannot make SHA-256 repositories")
    data = b"a sha-256 blob\n"
    name = hashlib.sha256(b"blob %d\0" % len(data) + data).digest()
    pack, index, checksum = packfmt.pack([(name, packfmt.entry(packfmt.BLOB, data))],
                                         hashlib.sha256)
    pack_path = repo / ".git" / "objects" / "pack" / f"pack-{checksum.hex()}.pack"
    pack_path.write_bytes(pack)
    pack_path.with_suffix(".idx").write_bytes(index)
    out = subprocess.run([GIT, "-C", str(repo), "cat-file", "blob", name.hex()],
                         capture_output=True, check=False)
    assert out.returncode == 0 and out.stdout == data, out.stderr
    verify = subprocess.run([GIT, "-C", str(repo), "verify-pack", str(pack_path)],
                            capture_output=True, text=True, check=False)
    assert verify.returncode == 0, verify.stderr


@pytest.mark.parametrize("tz", [0, 3600, -3600, 19800, -34200, 50400])
@pytest.mark.parametrize("parents", [0, 1, 2])
def test_raw_objects_are_the_bytes_dulwich_and_git_make(tmp_path: Path, tz: int,
                                                          parents: int) -> None:
    """make_commit serializes blobs, trees and commits itself (the hot path): the same
    bytes, so the same names, as dulwich's classes (git fsck --strict checks the
    repositories made so, in test_write_path and test_reliability)."""
    files = {b"working_state.json": os.urandom(20), b"schema.yaml": os.urandom(20),
             b"a-b": os.urandom(20), b"a": os.urandom(20), b"\xe8\xb7\x8c": os.urandom(20)}
    tree = Tree()
    for name, sha in files.items():
        tree.add(name, 0o100644, sha.hex().encode())
    ours = packfmt.tree_body(files)
    assert ours == tree.as_raw_string()
    assert packfmt.object_name(b"tree", ours, hashlib.sha1).hex() == tree.id.decode()
    commit = Commit()
    commit.tree = tree.id
    commit.parents = [hashlib.sha1(bytes([i])).hexdigest().encode() for i in range(parents)]
    who = "機器人 <bot@example.com>".encode()
    commit.author = commit.committer = who
    commit.author_time, commit.commit_time = 1_700_000_000, 1_700_000_007
    commit.author_timezone = commit.commit_timezone = tz
    commit.encoding = b"UTF-8"
    commit.message = "設定 stop_loss\n\nGitstate-Op: set\n".encode()
    body = packfmt.commit_body(tree.id.decode(), [p.decode() for p in commit.parents], who,
                               1_700_000_000, who, 1_700_000_007, tz, commit.message)
    assert body == commit.as_raw_string()
    assert packfmt.object_name(b"commit", body, hashlib.sha1).hex() == commit.id.decode()
    blob = Blob.from_string(b"{}\n")
    assert packfmt.object_name(b"blob", b"{}\n", hashlib.sha1).hex() == blob.id.decode()
    with pytest.raises(ValueError):
        packfmt.format_zone(90)


@pytest.mark.parametrize("size", [0, 1, 1023, 1024, 1025, 4096, 32767, 32768, 40000, 1 << 20])
def test_deflate_round_trips_at_every_window_size(size: int) -> None:
    body = (os.urandom(size // 2) + b"ab" * size)[:size]
    out = packfmt.deflate(body)
    assert zlib.decompress(out) == body  # inflated with the default (largest) window
    assert zlib.decompressobj().decompress(out) == body
