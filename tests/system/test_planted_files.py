"""Every file gitstate writes under an agent directory (``layout.WRITTEN_FILES``, the one
list) replaced in turn by a symlink to a file outside, a symlink to a name outside that does
not exist, a FIFO and a hard link to a file outside; then the operation that writes it runs. The file outside is never touched, nothing
hangs, and the outcome is a clear named error (a ``rule``) or a repaired regular file of
gitstate's own (or none: a removed link)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.core import layout
from gitstate.core.errors import GitStateError
from gitstate.history import refusals
from gitstate.system.config import Config
from gitstate.system.safefile import NotRegular
from gitstate.threads import wal as lgwal
from gitstate.write import maintenance
from tests.helpers import git

ROOT = Path(__file__).resolve().parents[2]
VICTIM = b"\x7fELF precious bytes, never to change\n"
RUN = "r1"
THREAD = "t1"
DIGEST = hashlib.sha256(THREAD.encode()).hexdigest()[:24]
SCHEMA = ("version: 1\nunknown_keys: allow\nkeys:\n"
          "  broker.pin: {type: json, sensitive: redact}\n")


def _set(agent: Path) -> None:
    with StateRepo(agent) as repo:
        repo.set("k", 2, "a second value")


def _set_schema(agent: Path) -> None:
    with StateRepo(agent) as repo:
        repo.set_schema(SCHEMA + "  other: {type: json}\n", "one more key")


def _redacted(agent: Path) -> None:
    with StateRepo(agent) as repo:
        repo.set("broker.pin", "1234", "the pin, redacted")


def _refused(agent: Path) -> None:
    with StateRepo(agent) as repo:
        repo.set("k", 5, "a stale compare-and-swap", expected=999)  # journaled


def _refused_journal_down(agent: Path) -> None:
    lock = agent / "state" / ".git" / layout.REFUSALS_LOCK_FILE
    with contextlib.suppress(FileNotFoundError):
        lock.unlink()
    lock.mkdir()  # the journal cannot be written: the refusal is counted in .failed
    try:
        _refused(agent)
    finally:
        lock.rmdir()


def _run_event(agent: Path) -> None:
    with StateRepo(agent) as repo:
        repo.runs.event(RUN, {"type": "cancelled", "reason": "stop"}, "stop it")


def _thread(agent: Path) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    from gitstate.langgraph import GitCheckpointSaver

    with GitCheckpointSaver(agent) as saver:
        saver.put({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}},
                  empty_checkpoint(), {"source": "input", "step": -1}, {})


def _thread_writes(agent: Path) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    from gitstate.langgraph import GitCheckpointSaver

    with GitCheckpointSaver(agent) as saver:
        stored = saver.put({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}},
                           empty_checkpoint(), {"source": "input", "step": -1}, {})
        saver.put_writes(stored, [("k", 1)], "task-1")
        saver.put(stored, empty_checkpoint(), {"source": "loop", "step": 0}, {})


def _gc(agent: Path) -> None:
    with StateRepo(agent) as repo:
        maintenance.run_gc(repo.reader)


def _gc_failing(agent: Path) -> None:
    """A maintenance run that fails (its pack directory made unwritable) writes gc.failed."""
    packs = agent / "state" / ".git" / "objects" / "pack"
    packs.chmod(0o500)
    try:
        _gc(agent)
    finally:
        packs.chmod(0o755)


def _auto_gc(agent: Path) -> None:
    """Loose objects past the threshold: the next write starts an automatic run (its log)."""
    files = agent.parent / "loose"
    files.mkdir()
    for i in range(3000):
        (files / str(i)).write_text(f"object {i}\n")
    git(agent / "state", "hash-object", "-w", "--stdin-paths",
        input="".join(f"{files / str(i)}\n" for i in range(3000)))
    with StateRepo(agent, config=Config(gc_loose_objects=50)) as repo:
        assert maintenance.maybe_start(repo.store, repo.agent_dir, repo.config, repo.head())
    assert maintenance.wait_idle(agent / "state" / ".git", timeout=60)


def _init_again(agent: Path) -> None:
    StateRepo.init(agent).close()


def _hook(agent: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "gitstate", "--agent-dir", str(agent), "hook",
                          "plain"], capture_output=True, text=True, timeout=20, check=False,
                         stdin=subprocess.DEVNULL, cwd=ROOT)
    # the wake-up delivers its section whatever stands in the receipt's place
    assert out.returncode == 0 and out.stdout.strip() and not out.stderr, out.stderr


def _config_cache(agent: Path) -> None:
    (agent / "config.toml").write_text("[gitstate]\nlocale = \"en\"\n")
    _hook(agent)


def _origin(agent: Path) -> None:
    refusals.origin_id(agent / "state" / ".git")  # what a push of the journal names


def _demo(agent: Path) -> None:
    from gitstate.cli.demo import run_demo

    run_demo(agent)


OPERATIONS: dict[str, Callable[[Path], None]] = {
    layout.CONFIG_FILE: _demo,
    "state/" + layout.STATE_FILE: _set,
    "state/" + layout.SCHEMA_FILE: _set_schema,
    "state/" + layout.HISTORY_FILE: _set,
    "state/.git/index": _set,
    "state/.git/" + layout.LOCK_FILE: _set,
    "state/.git/" + layout.REPACK_LOCK_FILE: _gc,
    "state/.git/" + layout.STAMP_FILE: _set,
    "state/.git/" + layout.CLOCK_FILE: _set,
    "state/.git/" + layout.SCHEMA_CACHE_FILE: _set_schema,
    "state/.git/" + layout.CONFIG_CACHE_FILE: _config_cache,
    "state/.git/" + layout.PID_FILE: _gc,
    "state/.git/" + layout.GC_LOG_FILE: _auto_gc,
    "state/.git/" + layout.GC_FAILED_FILE: _gc_failing,
    "state/.git/" + layout.SPARE_PREFIX + layout.STATE_FILE: _set,
    "state/.git/" + layout.SPARE_PREFIX + layout.SCHEMA_FILE: _set_schema,
    "state/.git/" + layout.SPARE_PREFIX + "index": _set,
    "state/.git/" + layout.SPARE_PREFIX + "stamp": _set,
    "state/.git/" + layout.RECEIPTS_FILE: _hook,
    "state/.git/" + layout.REDACT_KEY_FILE: _redacted,
    "state/.git/" + layout.ORIGIN_FILE: _origin,
    "state/.git/" + layout.REFUSALS_LOCK_FILE: _refused,
    "state/.git/" + layout.REFUSALS_FAILED_FILE: _refused_journal_down,
    "state/.git/" + layout.RUN_LOCK_FILE: _run_event,
    "state/.git/" + layout.RUN_CACHE_DIR + "/{run}.json": _run_event,
    "state/.git/" + layout.THREAD_LOCK_FILE: _thread,
    "state/.git/" + layout.THREAD_JOURNAL_FILE: _thread_writes,
    "state/.git/" + layout.THREAD_LOG_FILE: _thread_writes,
    "state/.git/" + layout.THREAD_INDEX_FILE: _thread,
    "state/.git/" + layout.PRE_COMMIT_HOOK: _init_again,
    "state/.git/" + layout.EXCLUDE_FILE: _init_again,
}


def test_every_written_file_has_an_operation() -> None:
    assert set(OPERATIONS) == set(layout.WRITTEN_FILES)


@contextlib.contextmanager
def _deadline(seconds: int) -> Iterator[None]:
    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"the operation hung for {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _prepare(agent: Path, entry: str) -> None:
    if entry == layout.CONFIG_FILE:
        agent.mkdir()  # the demo's own directory: empty but for what is planted
        return
    with StateRepo.init(agent) as repo:
        repo.set_schema(SCHEMA, "a schema, for schema.yaml and the redaction key")
        repo.set("k", 1, "a first value")
        repo.runs.start(RUN, description="a run", criteria=["done"], reason="go")


@pytest.mark.parametrize("kind", ["symlink", "dangling", "fifo", "hardlink"])
@pytest.mark.parametrize("entry", sorted(layout.WRITTEN_FILES))
def test_a_planted_file_is_never_written_through(tmp_path: Path, entry: str,
                                                 kind: str) -> None:
    agent = tmp_path / "agent"
    _prepare(agent, entry)
    victim = tmp_path / "victim"
    victim.write_bytes(VICTIM)
    victim.chmod(0o600)
    before = victim.stat()
    path = agent / entry.format(run=RUN, digest=DIGEST, shard=lgwal.shard_of(DIGEST), half=0)
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    absent = tmp_path / "absent"
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "dangling":  # a link to a name outside that does not exist yet
        path.symlink_to(absent)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        os.link(victim, path)
    rule = None
    with _deadline(60):
        try:
            OPERATIONS[entry](agent)
        except (GitStateError, NotRegular) as exc:
            rule = exc.rule
    after = victim.stat()
    assert victim.read_bytes() == VICTIM and not absent.exists()
    assert (stat.S_IMODE(after.st_mode), after.st_mtime_ns, after.st_ino) == (
        stat.S_IMODE(before.st_mode), before.st_mtime_ns, before.st_ino)
    if rule is not None:
        assert "." in rule, rule  # a named rule, never a bare OSError
        return
    if not path.exists() and not path.is_symlink():
        return  # removed (the link itself): nothing written through it
    info = os.lstat(path)
    assert stat.S_ISREG(info.st_mode) and info.st_nlink == 1, (entry, kind, info)
    assert info.st_ino != after.st_ino


@pytest.mark.parametrize("name", layout.WRITTEN_DIRS[1:])
def test_a_planted_directory_link_is_refused_before_any_write(tmp_path: Path,
                                                              name: str) -> None:
    """Each directory those files live in (``layout.WRITTEN_DIRS``) swapped for a symlink to
    a copy outside: the repository is not opened (store.not_regular), nothing is written
    through the link."""
    import shutil

    agent = tmp_path / "agent"
    with StateRepo.init(agent) as repo:
        repo.runs.start(RUN, description="d", criteria=["c"], reason="r")
    real = agent / name
    real.mkdir(parents=True, exist_ok=True)  # one that appears only later (refs/gitstate)
    outside = tmp_path / "outside"
    shutil.copytree(real, outside, symlinks=True)
    shutil.rmtree(real)
    real.symlink_to(outside)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in outside.rglob("*"))
    with pytest.raises(GitStateError) as err:
        _set(agent)
    assert err.value.rule == "store.not_regular" and name in err.value.message
    assert sorted((p.name, p.stat().st_mtime_ns) for p in outside.rglob("*")) == before


def test_a_link_between_git_and_a_ref_carries_no_ref_write_away(tmp_path: Path) -> None:
    """A symlinked directory on a ref's path that only appears later (a thread's folder
    under refs/gitstate/threads) is refused by the ref write itself (store.not_regular),
    and the copy outside is untouched."""
    from gitstate.langgraph import GitCheckpointSaver

    agent = tmp_path / "agent"
    StateRepo.init(agent).close()
    outside = tmp_path / "outside"
    (outside / "checkpoints").parent.mkdir(parents=True)
    threads = agent / "state" / ".git" / "refs" / "gitstate" / "threads"
    threads.mkdir(parents=True, exist_ok=True)
    (threads / "t-1").symlink_to(outside)
    with GitCheckpointSaver(agent) as saver, pytest.raises(GitStateError) as err:
        saver.put({"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}},
                  {"v": 1, "id": "1ef", "ts": "2026-08-13T01:00:00+00:00",  # type: ignore[arg-type]
                   "channel_values": {}, "channel_versions": {}, "versions_seen": {}},
                  {"source": "loop", "step": 1}, {})
    assert err.value.rule == "store.not_regular", err.value
    assert list(outside.iterdir()) == []
