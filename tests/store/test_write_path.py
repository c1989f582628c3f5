"""The write path: a pack per commit, the durability modes, consolidation, and SIGKILLs at
every named phase and at random moments, on this machine's disk and (when the test may
mount them: root, mkfs and a loop device) on a journaled ext4 image and an XFS image."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.audit import integrity
from gitstate.core.errors import ConfigError
from gitstate.core.model import STATE_FILE, State
from gitstate.store import durability, packwrite
from gitstate.system.config import config_from_dict
from gitstate.system.faults import COMMITTED, POINTS
from tests.helpers import assert_fsck_clean, git

ROOT = Path(__file__).resolve().parents[2]
IMAGES = {"ext4": ("mkfs.ext4", ["-q", "-F"], "64M"), "xfs": ("mkfs.xfs", ["-q", "-f"], "320M")}


@contextlib.contextmanager
def _mounted(kind: str, where: Path) -> Iterator[Path]:
    mkfs, args, size = IMAGES[kind]
    if os.geteuid() != 0 or shutil.which(mkfs) is None or shutil.which("mount") is None:
        pytest.skip(f"cannot make a {kind} image here (needs root and {mkfs})")
    image, mnt = where / f"{kind}.img", where / f"{kind}-mnt"
    mnt.mkdir(parents=True, exist_ok=True)
    subprocess.run(["truncate", "-s", size, str(image)], check=True)
    made = subprocess.run([mkfs, *args, str(image)], capture_output=True, check=False)
    mounted = made.returncode == 0 and subprocess.run(
        ["mount", "-o", "loop", str(image), str(mnt)], capture_output=True,
        check=False).returncode == 0
    if not mounted:
        pytest.skip(f"cannot loop-mount a {kind} image here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, check=False)


@pytest.fixture(scope="module", params=["disk", "ext4", "xfs"])
def fs_root(request: pytest.FixtureRequest,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    base = tmp_path_factory.mktemp(f"fs-{request.param}")
    if request.param == "disk":
        yield "disk", base
        return
    with _mounted(request.param, base) as mnt:
        yield request.param, mnt


@pytest.fixture(scope="module", params=["ext4", "xfs"])
def image_root(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    with _mounted(request.param, tmp_path_factory.mktemp(f"img-{request.param}")) as mnt:
        yield request.param, mnt


@pytest.fixture
def agent(image_root: tuple[str, Path], request: pytest.FixtureRequest) -> Path:
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]
    path = image_root[1] / name
    if path.exists():
        shutil.rmtree(path)
    path.mkdir()
    return path


def _worker(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tests.workers", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, **(env or {})})


def test_auto_picks_the_mode_from_the_file_system(fs_root: tuple[str, Path]) -> None:
    """fast on a journaled ext4 and on XFS; strict elsewhere (this machine's root disk is
    an ext4 without a journal, where the one-flush reasoning does not hold)."""
    kind, root = fs_root
    picked = durability.detect(root)
    described = durability.describe(root)
    if kind in ("ext4", "xfs"):
        assert picked == "fast", described
    elif ("journal)" in described and "no journal" not in described) or described == "xfs":
        assert picked == "fast"
    else:
        assert picked == "strict", described
    (root / "cfg").mkdir(exist_ok=True)
    (root / "cfg" / "config.toml").write_text('[gitstate]\ndurability = "strict"\n')
    with StateRepo.init(root / "cfg") as repo:
        assert repo.durability == "strict"  # the config overrides auto


def test_durability_setting_is_checked() -> None:
    assert config_from_dict({"gitstate": {"durability": "fast"}}).durability == "fast"
    with pytest.raises(ConfigError) as err:
        config_from_dict({"gitstate": {"durability": "yolo"}})
    assert err.value.rule == "config.durability"


WRITE_PHASES = [p for p in POINTS if not p.startswith("merge.")]


@pytest.mark.parametrize("point", WRITE_PHASES)
def test_killed_at_each_phase(agent: Path, point: str) -> None:
    """SIGKILL-like exit at each of the write's 13 named phases on each image: HEAD is the
    old commit or the new one, fsck --strict is clean, the next open repairs, and the next
    write works. (On the machine's disk, test_reliability.py runs every phase, folding's
    included, for set, clear and handoff.)"""
    with StateRepo.init(agent) as repo:
        repo.set("k", 1, "before")
        old_head, before = repo.head(), repo.state()
    out = _worker("fault_write", str(agent), "set", env={"GITSTATE_TEST_FAULT": point})
    assert out.returncode == 137, out.stderr
    assert_fsck_clean(agent / "state")
    with StateRepo(agent) as repo:
        head = repo.head()
        assert (head != old_head) is (point in COMMITTED)
        assert repo.state() == (before if head == old_head else repo.state_at(head))
        assert [c.name for c in integrity.verify(repo) if not c.ok] == []
        repo.set("k", 3, "the next write works")
        assert repo.state().keys["k"].value == 3
    assert git(agent / "state", "status", "--porcelain").stdout == ""


@pytest.mark.slow
def test_random_kills_lose_nothing(agent: Path) -> None:
    """50 SIGKILLs at random moments of back-to-back writes on each image: every
    acknowledged write is in the log, fsck --strict is clean, HEAD always holds a valid
    state (the machine's disk: tests/write/test_concurrency.py kills 55+ times)."""
    with StateRepo.init(agent):
        pass
    rng = random.Random(20261201)
    acked: list[int] = []
    next_i = 1
    for _ in range(50):
        proc = subprocess.Popen([sys.executable, "-m", "tests.workers", "write_forever",
                                 str(agent), str(next_i)], cwd=ROOT, stdout=subprocess.PIPE,
                                text=True)
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0.0, 0.08))
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        got = [int(line) for line in out.split() if line.isdigit()]
        acked += got
        next_i = (got[-1] if got else next_i) + 100
        State.from_bytes(git(agent / "state", "show", f"main:{STATE_FILE}").stdout.encode())
    messages = set(git(agent / "state", "log", "--format=%s").stdout.splitlines())
    assert [i for i in acked if f"write {i}" not in messages
            and f"Handoff: handoff {i}" not in messages] == []
    assert_fsck_clean(agent / "state")


def test_a_commit_is_one_small_pack_and_packs_stay_few(tmp_path: Path) -> None:
    """No loose objects; over 300 writes the packs are folded by tiers (never more than
    FANOUT - 1 waiting in each of the three tiers 300 commits reach, plus the writes
    between two looks at the directory); git and dulwich read everything; git gc keeps
    it all."""
    from gitstate.store.packs import FOLD_CHECK_EVERY

    with StateRepo.init(tmp_path) as repo:
        for i in range(300):
            repo.set(f"k{i % 7}", i, f"write {i}")
            assert repo.store.pack_count() <= \
                3 * (packwrite.FANOUT - 1) + FOLD_CHECK_EVERY
        head = repo.head()
    objects = tmp_path / "state" / ".git" / "objects"
    assert not [d for d in objects.iterdir() if len(d.name) == 2 and any(d.iterdir())]
    assert not list((objects / "pack").glob("tmp_*"))
    assert_fsck_clean(tmp_path / "state")
    assert git(tmp_path / "state", "rev-list", "--count", "main").stdout.strip() == "301"
    assert git(tmp_path / "state", "gc", "-q").returncode == 0
    assert_fsck_clean(tmp_path / "state")
    clone = tmp_path / "clone"
    assert subprocess.run(["git", "clone", "-q", str(tmp_path / "state"), str(clone)],
                          capture_output=True, check=False).returncode == 0
    assert git(clone, "rev-parse", "HEAD").stdout.strip() == head
    with StateRepo(tmp_path) as repo:
        assert repo.state().keys["k5"].value == 299
        assert len(repo.full_history()) == 301


def test_tiered_merge_rule() -> None:
    """A tier merges when it holds FANOUT packs, the lowest such tier first; bigger packs
    wait in their own tiers."""
    f, t0 = packwrite.FANOUT, packwrite.TIER0_BYTES
    assert packwrite.tier(600) == 0 and packwrite.tier(t0) == 0
    assert packwrite.tier(t0 + 1) == 1 and packwrite.tier(t0 * f + 1) == 2
    small = {f"s{i}": 600 + i for i in range(f - 1)}
    assert packwrite.tiered_merge({**small, "big": t0 * f * f}) == []
    full = {**small, "s9": 700}
    assert packwrite.tiered_merge({**full, "big": t0 * f * f}) == sorted(
        full, key=lambda n: (full[n], n))
    mid = {f"m{i}": t0 * 2 + i for i in range(f)}
    assert packwrite.tiered_merge({**mid, **small}) == sorted(mid)  # tier 1 is the full one


def test_a_damaged_working_file_is_repaired_not_reported(tmp_path: Path) -> None:
    """The working tree is never flushed: after a crash working_state.json may be empty,
    hold blocks of NUL bytes or only the head of the file. That is damage: repaired on open
    (a non-empty one kept aside), never taken for a hand edit."""
    with StateRepo.init(tmp_path) as repo:
        repo.set("k", 1, "r")
        head_bytes = git(repo.state_dir, "show", f"main:{STATE_FILE}").stdout.encode()
    working = tmp_path / "state" / STATE_FILE
    for damage in (b"", b"\0" * 64, head_bytes[:40]):
        working.write_bytes(damage)
        with StateRepo(tmp_path) as repo:
            assert working.read_bytes() == head_bytes
            assert repo.worktree_warnings() == []
    kept = list((tmp_path / "state" / ".git").glob("gitstate-hand-edits/*damaged*"))
    assert len(kept) == 1 and kept[0].read_bytes() == head_bytes[:40]
    working.write_text(working.read_text().replace('"value": 1', '"value": 2'))
    with StateRepo(tmp_path) as repo:  # a readable, different state is a hand edit
        assert any("edited by hand" in w for w in repo.worktree_warnings())


def test_crafted_files_in_the_ref_and_pack_directories(tmp_path: Path) -> None:
    """A symlink or FIFO at the ref's lock, git's own temporary pack files and a pack that
    lost its index: the write goes through, nothing outside is touched, and only what a
    dead writer of ours left is swept (git's in-flight names are left alone)."""
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    with StateRepo.init(tmp_path / "agent") as repo:
        git_dir = repo.state_dir / ".git"
        lock = git_dir / "refs" / "heads" / "main.lock"
        lock.symlink_to(outside)
        repo.set("k", 1, "beside a symlinked lock")
        os.mkfifo(lock)
        repo.set("k", 2, "beside a FIFO lock")
        pack_dir = git_dir / "objects" / "pack"
        ours = pack_dir / "tmp_pack_999999_abcd"  # a pid that is not running
        theirs = pack_dir / "tmp_pack_Xy12Ab"  # git's own name: maybe another git's
        for path in (ours, theirs):
            path.write_bytes(b"partial")
        (git_dir / "gitstate-writing").touch()  # an older version's crash marker: swept too
        repo.set("k", 3, "after a crash")
        assert repo.state().keys["k"].value == 3
    assert outside.read_text() == "keep me\n"
    assert not lock.exists() and not ours.exists() and theirs.exists()
    theirs.unlink()
    assert_fsck_clean(tmp_path / "agent" / "state")


def test_the_index_written_on_each_commit_is_git_s(tmp_path: Path) -> None:
    """The index is serialized by gitstate (store/worktree.index_file): git reads it,
    finds it equal to HEAD and to the files (with a schema, two entries), and dulwich's
    reader agrees byte for byte on every field."""
    from dulwich.index import Index, IndexEntry

    schema = (Path(__file__).resolve().parents[2] / "examples" / "schemas" / "trading.yaml")
    with StateRepo.init(tmp_path / "a") as repo:
        repo.set_schema(schema.read_text(encoding="utf-8"), "adopt the schema")
        repo.set("phase", "apply", "start")
        state = repo.state_dir
    listed = git(state, "ls-files", "-s").stdout.split("\n")
    head_tree = git(state, "ls-tree", "HEAD").stdout.split("\n")
    assert [line.split()[1] for line in listed if line] == \
        [line.split()[2] for line in head_tree if line]
    assert git(state, "status", "--porcelain").stdout == ""
    assert git(state, "diff-files", "--quiet").returncode == 0  # the stat data match
    entries = dict(Index(str(state / ".git" / "index")).items())
    assert sorted(entries) == [b"schema.yaml", b"working_state.json"]
    for name, entry in entries.items():
        assert isinstance(entry, IndexEntry)
        info = os.stat(state / name.decode())
        assert (entry.size, entry.ino, entry.mode) == (info.st_size, info.st_ino, 0o100644)
        assert entry.mtime == (info.st_mtime_ns // 10**9, info.st_mtime_ns % 10**9)


def test_the_fast_ref_read_agrees_with_dulwich_on_crafted_refs(tmp_path: Path) -> None:
    """store.ref reads a loose ref holding a plain id itself; anything else — a symbolic
    ref, a symlink, an id without its newline, upper-case hex, junk, a packed ref — gives
    what dulwich gives (or None), never a value read through a symlink on its own."""
    from dulwich.refs import Ref

    with StateRepo.init(tmp_path / "a") as repo:
        head = repo.head()
        heads = repo.state_dir / ".git" / "refs" / "heads"
        other = repo.state_dir / "elsewhere"
        other.write_text(head + "\n")
        cases = {"sym": "ref: refs/heads/main\n", "nonl": head, "upper": head.upper() + "\n",
                 "junk": "not an id\n", "short": head[:20] + "\n"}
        for name, text in cases.items():
            (heads / name).write_text(text)
        (heads / "link").symlink_to(other)
        for name in [*cases, "link", "absent"]:
            try:
                expected: str | None = repo.store.repo.refs[
                    Ref(f"refs/heads/{name}".encode())].decode()
            except (KeyError, ValueError):
                expected = None
            try:
                got = repo.store.ref(f"refs/heads/{name}")
            except ValueError:
                got = None
            assert got == expected, name
        assert repo.store.ref("refs/heads/sym") == head


def test_a_fifo_or_device_in_a_ref_s_place_is_refused_not_waited_on(tmp_path: Path) -> None:
    """A FIFO planted as a ref (or behind a symlinked ref), or /dev/zero linked in, would
    block or never end a read: store.ref refuses it at once with a named rule, in a child
    process bounded by a timeout so that a regression fails instead of hanging."""
    with StateRepo.init(tmp_path / "a") as repo:
        heads = repo.state_dir / ".git" / "refs" / "heads"
        os.mkfifo(heads / "fifo")
        (heads / "link").symlink_to(heads / "fifo")
        (heads / "zero").symlink_to("/dev/zero")
        code = ("import sys\nfrom gitstate.api.repo import StateRepo\nfrom gitstate.core.errors import "
                "StoreError\nr = StateRepo(sys.argv[1])\nfor n in ('fifo', 'link', 'zero'):\n"
                "    try:\n        r.store.ref('refs/heads/' + n)\n"
                "    except StoreError as e:\n        print(e.rule)\n")
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "a")],
                             capture_output=True, text=True, timeout=30, check=True)
        assert out.stdout.split() == ["store.bad_ref"] * 3
        assert repo.store.ref("refs/heads/main") == repo.head()
