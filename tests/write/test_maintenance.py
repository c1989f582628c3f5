"""Specification of maintenance: `gitstate gc` packs, runs beside writers, and starts itself."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.audit import integrity
from gitstate.write.maintenance import last_failure, run_gc, wait_idle
from tests.helpers import assert_fsck_clean, git, run_cli

ROOT = Path(__file__).resolve().parents[2]


def _loose(state_dir: Path) -> int:
    out = git(state_dir, "count-objects", "-v").stdout
    return int(dict(line.split(": ") for line in out.splitlines())["count"])


def _loose_objects_from_elsewhere(state_dir: Path, n: int) -> None:
    """Loose objects as a fetch or plain git leaves them (gitstate's own commits are
    packs), reachable from a side ref so that a repack keeps them (in the pack)."""
    entries = []
    for i in range(n - 2):
        blob = git(state_dir, "hash-object", "-w", "--stdin",
                   input=f"fetched object {i}\n").stdout.strip()
        entries.append(f"100644 blob {blob}\tf{i}\n")
    tree = git(state_dir, "mktree", input="".join(entries)).stdout.strip()
    commit = git(state_dir, "-c", "user.name=t", "-c", "user.email=t@t", "commit-tree", tree,
                 "-m", "elsewhere").stdout.strip()
    git(state_dir, "update-ref", "refs/gitstate/unpushed/elsewhere", commit)


def test_gc_packs_to_under_a_kibibyte_per_commit(repo: StateRepo) -> None:
    """300 commits on a 20-key state (small packs) and loose objects from elsewhere: one
    pack after, under 1 KiB per commit."""
    for i in range(300):
        repo.set(f"rule.{i % 20:02d}", i, f"change {i}")
    _loose_objects_from_elsewhere(repo.state_dir, 5)
    assert _loose(repo.state_dir) == 5 and repo.store.pack_count() >= 2
    figures = run_gc(repo.reader)
    assert _loose(repo.state_dir) == 0 and repo.store.pack_count() == 1
    assert figures["bytes_per_commit"] < 1024, figures
    assert all(c.ok for c in integrity.verify(repo))
    repo.set("after", 1, "writes go on after packing")
    assert repo.state().keys["rule.19"].value == 299


def test_gc_without_the_git_cli_uses_dulwich(repo: StateRepo) -> None:
    """Without git on PATH, dulwich packs the loose objects."""
    for i in range(30):
        repo.set("k", i, "r")
    _loose_objects_from_elsewhere(repo.state_dir, 20)
    out = run_cli("gc", "--json", agent_dir=repo.agent_dir, env={"PATH": "/nonexistent"})
    assert out.returncode == 0, out.stderr
    assert _loose(repo.state_dir) == 0
    assert all(c.ok for c in integrity.verify(repo))


@pytest.mark.slow
def test_reads_and_writes_stay_correct_while_gc_runs(agent_dir: Path) -> None:
    """Writers, a reader and back-to-back gc runs for 6 s (GITSTATE_GC_SECONDS): no lost
    update, fsck clean."""
    with StateRepo.init(agent_dir) as repo:
        repo.set("counter", 0, "start")
    seconds = os.environ.get("GITSTATE_GC_SECONDS", "6")

    def spawn(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "tests.workers", *args], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    procs = [spawn("load_writer", str(agent_dir), seconds, "a"),
             spawn("load_writer", str(agent_dir), seconds, "b"),
             spawn("load_reader", str(agent_dir), seconds),
             spawn("gc_loop", str(agent_dir), seconds)]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-2000:]
        outs.append(out.split())
    increments = int(outs[0][0]) + int(outs[1][0])
    assert int(outs[3][0]) >= 2  # gc really ran several times
    with StateRepo(agent_dir) as repo:
        assert repo.state().keys["counter"].value == increments
        assert all(c.ok for c in integrity.verify(repo))
    assert_fsck_clean(agent_dir / "state")


def test_automatic_gc_starts_past_the_threshold(agent_dir: Path) -> None:
    """Past the loose-object threshold (objects that came from elsewhere), a write starts
    background maintenance that packs them; the run leaves its output in a log (a symlink
    planted under the log's name is replaced, its target never written)."""
    (agent_dir / "config.toml").write_text("[gitstate]\ngc_loose_objects = 60\n")
    target = agent_dir / "outside.txt"
    target.write_text("keep me")
    with StateRepo.init(agent_dir) as repo:
        git_dir = repo.state_dir / ".git"
        (git_dir / "gitstate-gc.log").symlink_to(target)
        _loose_objects_from_elsewhere(repo.state_dir, 400)
        for i in range(20):
            repo.set(f"k{i % 7}", i, "r")
        assert (git_dir / "gitstate-gc.log").exists()  # a run was started
        assert wait_idle(git_dir, timeout=120), "maintenance still running after 120 s"
        deadline = time.monotonic() + 30  # the run prints its figures after its pid file goes
        while "packed" not in (log := (git_dir / "gitstate-gc.log").read_text()):
            assert time.monotonic() < deadline, log
            time.sleep(0.1)
        assert _loose(repo.state_dir) == 0, f"loose objects left; the run printed: {log!r}"
        assert last_failure(git_dir) is None
        assert target.read_text() == "keep me" and not (git_dir / "gitstate-gc.log").is_symlink()
        repo.set("k0", -1, "still writable")
        assert all(c.ok for c in integrity.verify(repo))


def test_a_failed_maintenance_run_is_named_by_verify(repo: StateRepo) -> None:
    """A packing run that fails (here: a ref names a corrupt loose object) leaves its reason;
    verify names it until a run succeeds."""
    sha = "ab" + "0" * 38
    bad = repo.state_dir / ".git" / "objects" / "ab" / sha[2:]
    bad.parent.mkdir(exist_ok=True)
    bad.write_bytes(b"not a zlib stream")
    side = repo.state_dir / ".git" / "refs" / "gitstate" / "unpushed" / "bad"
    side.parent.mkdir(parents=True, exist_ok=True)
    side.write_text(sha + "\n")
    out = run_cli("gc", agent_dir=repo.agent_dir)
    assert out.returncode != 0
    checks = {c.name: c for c in integrity.verify(repo, use_git=False)}
    assert not checks["maintenance"].ok and "failed" in checks["maintenance"].detail, checks
    side.unlink()
    bad.unlink()
    assert run_cli("gc", agent_dir=repo.agent_dir).returncode == 0
    assert all(c.ok for c in integrity.verify(repo))


def test_auto_gc_can_be_disabled(agent_dir: Path) -> None:
    """auto_gc = false: no background maintenance (the loose objects stay)."""
    (agent_dir / "config.toml").write_text("[gitstate]\ngc_loose_objects = 60\nauto_gc = false\n")
    with StateRepo.init(agent_dir) as repo:
        _loose_objects_from_elsewhere(repo.state_dir, 400)
        for i in range(20):
            repo.set("k", i, "r")
        time.sleep(1)
        assert not (repo.state_dir / ".git" / "gitstate-gc.pid").exists()
        assert _loose(repo.state_dir) == 400



def _paused_writer(agent_dir: Path, namespace: str, point: str,
                   sync: Path) -> subprocess.Popen[str]:
    """A writer of ``namespace`` stopped at ``point`` (faults.GITSTATE_TEST_PAUSE)."""
    sync.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "tests.workers", "paused_write",
                             str(agent_dir), namespace], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "GITSTATE_TEST_PAUSE": f"{point}:{sync}"})
    deadline = time.monotonic() + 120
    while not (sync / "paused").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.01)
    return proc


# the pack's two renames, whichever comes first; main's and the journal's writes take the
# run's path (CommitOps.commit), a thread's the other (packwrite.write)
RACES = [(ns, point) for ns in ("run", "thread") for point in ("pack.idx_renamed",
                                                              "pack.pack_renamed")] + \
    [("main", "pack.idx_renamed"), ("journal", "pack.idx_renamed")]


@pytest.mark.parametrize(("namespace", "point"), RACES)
def test_maintenance_between_a_writes_two_renames_keeps_the_write(
        agent_dir: Path, tmp_path: Path, namespace: str, point: str) -> None:
    """The race of a mixed load, forced: a writer of each namespace is stopped after the
    first of its pack's two renames (and after the second), a full `gitstate gc` runs right
    then, and the write goes on. `git repack -d` deletes a ``.pack`` that has no index, so
    a pack renamed before its index lost the commit: the ref then named an object in no pack
    and not loose. The index comes first now; every write survives, git fsck --strict
    agrees, every history reads back whole, and verify passes."""
    if namespace == "thread":
        pytest.importorskip("langgraph")
    with StateRepo.init(agent_dir) as repo:
        repo.set("k", 1, "first")
        repo.runs.start("r1", description="d", criteria=["c"], reason="start")
    proc = _paused_writer(agent_dir, namespace, point, tmp_path / "sync")
    with StateRepo(agent_dir) as repo:
        run_gc(repo.reader)
    (tmp_path / "sync" / "resume").touch()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-2000:]
    ref, _, commit = out.splitlines()[-1].partition(" ")
    assert_fsck_clean(agent_dir / "state")
    state = agent_dir / "state"
    refs = [ref] if ref else git(state, "for-each-ref", "--format=%(refname)",
                                 "refs/gitstate/threads").stdout.split()
    assert refs, "the graph wrote no checkpoint"
    if ref:  # the acknowledged commit is the ref's
        assert git(state, "rev-parse", ref).stdout.strip() == commit
    for name in refs:  # and each history reads back whole
        assert git(state, "log", "--format=%H", name).returncode == 0
    with StateRepo(agent_dir) as repo:
        assert all(c.ok for c in integrity.verify(repo)), [
            (c.name, c.detail) for c in integrity.verify(repo) if not c.ok]
        run_gc(repo.reader)  # and the next maintenance run finds nothing missing


def test_the_sweep_removes_an_abandoned_index_and_never_gits_temporary_pack(
        tmp_path: Path) -> None:
    """What a writer killed between its two renames leaves (an index whose pack never came)
    goes once it is a minute old; a fresh one is a publish in progress and stays, and so
    does git's own ``tmp_pack_XXXXXX`` even when its random part is all digits."""
    from gitstate.store import packwrite

    pack_dir = tmp_path / "pack"
    pack_dir.mkdir()
    old, fresh = pack_dir / f"pack-{'a' * 40}.idx", pack_dir / f"pack-{'b' * 40}.idx"
    gits = pack_dir / "tmp_pack_999999"
    for path in (old, fresh, gits):
        path.write_bytes(b"x")
    os.utime(old, (time.time() - 120, time.time() - 120))
    assert packwrite.sweep(pack_dir) == [old]
    assert fresh.exists() and gits.exists()
