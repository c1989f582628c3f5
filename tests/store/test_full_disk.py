"""A full disk, for real (a small journaled ext4 image, tests/store/test_write_path.py's): every
writer reports ``store.disk_full`` with its hint, leaves no temporary file a later run does
not clean, and the refusal journal's backlog is counted truly and repaired."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.audit import integrity
from gitstate.core.errors import CasMismatch, StoreError
from gitstate.core.layout import REFUSALS_FAILED_FILE, REFUSALS_LOCK_FILE
from tests.helpers import assert_fsck_clean, git
from tests.store.test_write_path import _mounted

ROOT = Path(__file__).resolve().parents[2]
HINT = "free some disk space"
# dulwich's GitFile.__del__ reports the failed close of an ENOSPC lock file; it is noise here.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with _mounted("ext4", tmp_path_factory.mktemp("full-disk")) as mnt:
        yield mnt


@pytest.fixture
def agent(image: Path, request: pytest.FixtureRequest) -> Path:
    path = image / request.node.name[:60]
    if path.exists():
        shutil.rmtree(path)
    with StateRepo.init(path) as repo:
        for i in range(5):
            repo.set("k", i, f"write {i}")
    return path


@contextlib.contextmanager
def _full(image: Path, leave: int = 0) -> Iterator[None]:
    """The file system filled to the last byte (root's reserved blocks too), but for
    ``leave`` bytes given back; freed at the end."""
    filler = image / "filler"
    with filler.open("wb", buffering=0) as f:
        for size in (1 << 20, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * size)
        if leave:
            f.truncate(max(f.tell() - leave, 0))
            os.fsync(f.fileno())
    try:
        yield
    finally:
        filler.unlink()


def _cli(agent: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gitstate", "--agent-dir", str(agent), *args],
                          capture_output=True, text=True, timeout=120, check=False,
                          stdin=subprocess.DEVNULL, cwd=ROOT)


def _temporaries(agent: Path) -> list[str]:
    """Temporary files anywhere under the agent directory (git's, gitstate's)."""
    return sorted(str(p.relative_to(agent)) for p in agent.rglob("*")
                  if p.name.startswith(("tmp_", ".tmp-")) or p.name.endswith(".tmp"))


def _verify_failures(agent: Path) -> list[integrity.Check]:
    with StateRepo(agent) as repo:
        return [c for c in integrity.verify(repo) if not c.ok]


def test_a_refusal_journaled_on_a_full_disk_is_never_counted_as_none(agent: Path,
                                                                     image: Path) -> None:
    """Refusals on a full disk: the caller gets its refusal; verify then says that
    refusals could not be recorded, never "0", names `gitstate repair-journal`; that
    command clears it and verify passes."""
    with _full(image), StateRepo(agent) as repo:
        for _ in range(3):
            with pytest.raises(CasMismatch):
                repo.set("k", 99, "a stale compare-and-swap", expected=-1)
    assert (agent / "state" / ".git" / REFUSALS_FAILED_FILE).exists()
    failed = _verify_failures(agent)
    assert [c.name for c in failed] == ["refusals"], failed
    assert "0 refusal" not in failed[0].detail and "could not be recorded" in \
        failed[0].detail, failed[0].detail
    assert "gitstate repair-journal" in failed[0].remedy
    out = _cli(agent, "repair-journal")
    assert out.returncode == 0, out.stderr
    assert not _verify_failures(agent)
    assert not _temporaries(agent), _temporaries(agent)
    assert_fsck_clean(agent / "state")


def test_a_refusal_the_journal_could_not_take_is_journaled_by_the_repair(tmp_path: Path
                                                                          ) -> None:
    """The journal's lock unusable (a directory in its place): the refused write's record
    is kept whole, and `gitstate repair-journal` puts it on refs/gitstate/refusals."""
    agent = tmp_path / "agent"
    with StateRepo.init(agent) as repo:
        repo.set("k", 1, "one")
        lock = agent / "state" / ".git" / REFUSALS_LOCK_FILE
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
        lock.mkdir()
        with pytest.raises(CasMismatch):
            repo.set("k", 2, "the refused one", expected=7, request_id="req-kept-1")
        lock.rmdir()
    failed = _verify_failures(agent)
    assert [c.name for c in failed] == ["refusals"]
    assert "1 refusal could not be recorded" in failed[0].detail
    out = _cli(agent, "repair-journal", "--json")
    assert out.returncode == 0, out.stderr
    assert '"journaled": 1' in out.stdout, out.stdout
    assert "req-kept-1" in git(agent / "state", "log", "--format=%B",
                               "refs/gitstate/refusals").stdout
    assert not _verify_failures(agent)
    out = _cli(agent, "repair-journal")
    assert out.returncode == 0 and "nothing to repair" in out.stdout


def test_a_checkpoint_on_a_full_disk_is_store_disk_full(agent: Path, image: Path) -> None:
    """GitCheckpointSaver.put on a full disk: store.disk_full with the hint (not a raw
    OSError), no temporary file left, and the next put once there is room works."""
    pytest.importorskip("langgraph")
    from langgraph.checkpoint.base import empty_checkpoint

    from gitstate.langgraph import GitCheckpointSaver

    conf = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with GitCheckpointSaver(agent) as saver:
        saver.put(conf, empty_checkpoint(), {"source": "input", "step": -1}, {})  # type: ignore[arg-type]
        with _full(image):
            cp = empty_checkpoint()
            cp["channel_values"] = {"k": "x" * 20000}
            with pytest.raises(StoreError) as exc:
                saver.put(conf, cp, {"source": "loop", "step": 0}, {"k": 1})  # type: ignore[arg-type]
            assert exc.value.rule == "store.disk_full" and HINT in exc.value.message
            assert not _temporaries(agent), _temporaries(agent)
        saver.put(conf, empty_checkpoint(), {"source": "loop", "step": 1}, {})  # type: ignore[arg-type]
    assert not _verify_failures(agent)
    assert_fsck_clean(agent / "state")


def test_gc_on_a_full_disk_is_store_disk_full_and_leaves_nothing(agent: Path,
                                                                 image: Path) -> None:
    """`gitstate gc` on a full disk: exit 3, store.disk_full with the hint, whether the disk
    is full before it starts or while git repacks (git says "Out of diskspace" or "No space
    left on device"); no pid file stalls the next gc, which leaves no temporary."""
    pytest.importorskip("langgraph")
    from langgraph.checkpoint.base import empty_checkpoint

    from gitstate.langgraph import GitCheckpointSaver

    with GitCheckpointSaver(agent) as saver:  # a pack git cannot write in the room left
        cp = empty_checkpoint()
        numbers = random.Random(7)  # random integers: incompressible, and no secret
        cp["channel_values"] = {"k": [numbers.randrange(1 << 32) for _ in range(120_000)]}
        saver.put({"configurable": {"thread_id": "big", "checkpoint_ns": ""}}, cp,
                  {"source": "input", "step": -1}, {"k": 1})  # type: ignore[arg-type]
    for leave in (0, 64 << 10):
        with _full(image, leave):
            out = _cli(agent, "gc")
            assert out.returncode == 3, out.stderr
            assert "[store.disk_full]" in out.stderr and HINT in out.stderr, out.stderr
            assert leave == 0 or "git repack failed" in out.stderr, out.stderr
    out = _cli(agent, "gc")
    assert out.returncode == 0, out.stderr
    assert not _temporaries(agent), _temporaries(agent)
    assert not _verify_failures(agent)


def test_a_report_on_a_full_disk_leaves_no_temporary(agent: Path, image: Path) -> None:
    """`report --html` on a full disk: store.disk_full with the hint and nothing beside the
    site; a killed run's unfinished directory is removed by the next run."""
    with StateRepo(agent) as repo:
        for i in range(10):
            repo.set(f"key{i}", "v" * 60, f"fill {i}")
    site = image / "site"
    for leave in (0, 16 << 10):  # full before the build starts, and half way through it
        with _full(image, leave):
            out = _cli(agent, "report", "--html", str(site))
            assert out.returncode == 3, out.stderr
            assert "[store.disk_full]" in out.stderr and HINT in out.stderr, out.stderr
        assert [p.name for p in image.iterdir() if p.name.startswith(".site")] == []
    unfinished = image / ".site.abcdefgh.tmp"  # what a SIGKILL mid-build leaves
    (unfinished / "keys").mkdir(parents=True)
    (unfinished / "index.html").write_text("half")
    old = time.time() - 120
    os.utime(unfinished, (old, old))
    out = _cli(agent, "report", "--html", str(site))
    assert out.returncode == 0, out.stderr
    assert not unfinished.exists()
    assert (site / "index.html").is_file()


def test_a_run_event_on_a_full_disk_is_store_disk_full(agent: Path, image: Path) -> None:
    """A run's event on a full disk: store.disk_full with the hint, the run as it was, no
    temporary left; the same event once there is room is written."""
    event = {"type": "tool_result_recorded", "tool_call_id": "c1", "evidence_ref": "e:1",
             "observed_at": "2026-12-01T00:00:00Z"}
    with StateRepo(agent) as repo:
        repo.runs.start("r1", description="a run on a full disk", criteria=["none"],
                        reason="start")
        head = repo.store.ref("refs/heads/runs/r1")
        with _full(image):
            with pytest.raises(StoreError) as exc:
                repo.runs.event("r1", event, "the event that finds no room")
            assert exc.value.rule == "store.disk_full" and HINT in exc.value.message
            assert repo.store.ref("refs/heads/runs/r1") == head
            assert not _temporaries(agent), _temporaries(agent)
        repo.runs.event("r1", event, "the event once there is room")
    assert not _verify_failures(agent)
