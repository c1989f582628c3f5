"""What arrives from another machine: ref names checked before any use, bounds per pull and
per fetch, sizes read from headers before anything is inflated, raw trees and commits by git
fsck's rules, deadlines on every network step with no lock held meanwhile, pushes to path
remotes through the receiver's hooks, and never a traceback. Each attack is made as an
attacker would (a hostile git:// server editing its advertisement, forged packed-refs,
crafted packs and objects written with git --literally or byte by byte), run over a path
remote, git:// and smart HTTP where it applies, and through hooks/git/pre-receive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from dulwich.objects import Blob, Commit
from dulwich.repo import Repo

from gitstate.api.repo import StateRepo
from gitstate.core.errors import GitStateError, Refused, StoreError
from gitstate.core.model import State
from gitstate.core.trailers import Change
from gitstate.history.replay import apply_change
from gitstate.wakeup.fastpath import section
from tests.bombs import PEAK_MIB, blob_bomb, doubling_deltas, entry_header, pack, zeros_stream
from tests.forge import Forge
from tests.helpers import GIT, install_pre_receive
from tests.hostile_git_server import HostileGitServer, git_daemon, served, smart_http

pytestmark = pytest.mark.skipif(GIT is None, reason="needs the git CLI for the servers")
TRANSPORTS = ["path", "git", "http"]
ROOT = Path(__file__).resolve().parents[2]


def _git(repo: Path, *args: str, input: bytes | None = None) -> str:
    out = subprocess.run([GIT or "git", "-C", str(repo), *args], capture_output=True,
                         input=input, timeout=60, check=True)
    return out.stdout.decode().strip()


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    """srv/remote.git holding A's published state (a key and a refusal journal), and B, an
    agent cloned from it."""
    (tmp_path / "srv").mkdir()
    bare = tmp_path / "srv" / "remote.git"
    subprocess.run([GIT or "git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    _git(bare, "config", "http.receivepack", "true")
    with StateRepo.init(tmp_path / "a") as a:
        a.set("stop_loss.2317", 262, "the real rule")
        with pytest.raises(Refused):
            a.set("stop_loss.2317", 254, "a second rule", expected=1)
        a.store.set_remote_url(str(bare))
        a.push()
    StateRepo.clone(str(bare), tmp_path / "b").close()
    return bare, tmp_path / "b"


class Snapshot:
    """What B holds, to show that a refused transfer kept nothing: every ref, the object
    files, the section, the files around the state directory, no quarantine left."""

    def __init__(self, agent: Path) -> None:
        self.agent = agent
        self.taken = self._take()

    def _take(self) -> tuple[object, ...]:
        git_dir = self.agent / "state" / ".git"
        refs = _git(self.agent / "state", "for-each-ref", "--format=%(refname) %(objectname)")
        objects = sorted(str(p.relative_to(git_dir)) for p in (git_dir / "objects").rglob("*")
                         if p.is_file())
        around = sorted(str(p.relative_to(self.agent.parent)) for p in
                        self.agent.parent.iterdir())
        return refs, objects, section(self.agent), around, sorted(
            p.name for p in (self.agent / "state").iterdir())

    def unchanged(self) -> None:
        git_dir = self.agent / "state" / ".git"
        assert not list(git_dir.glob("gitstate-incoming-*")), "a quarantine was left"
        assert self._take() == self.taken


def _rule_of(err: GitStateError) -> str:
    """The rule that refused: the error's own, or its first problem's (the acceptance
    checks report each commit's problem inside one remote.invalid refusal)."""
    problems = err.details.get("problems") or []
    return str(problems[0]["rule"]) if problems else err.rule


def _refused(fn: object, rule: str) -> GitStateError:
    with pytest.raises(GitStateError) as err:
        fn()  # type: ignore[operator]
    assert err.value.rule == rule, (err.value.rule, err.value.message)
    return err.value


# -- 1. names ------------------------------------------------------------------------------

HOSTILE_NAMES = {
    "escapes-the-state-dir": "refs/gitstate/refusals/../../../../../x",
    "replaces-main": "refs/gitstate/refusals/../../heads/main",
    "journal-not-hex": "refs/gitstate/refusals/ABCDEF0123456789",
    "journal-with-slash": "refs/gitstate/refusals/0123456/89abcdef",
    "run-with-slash": "refs/heads/runs/a/b",
}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("attack", sorted(HOSTILE_NAMES))
def test_a_hostile_ref_name_is_refused(world: tuple[Path, Path], tmp_path: Path,
                                       transport: str, attack: str) -> None:
    """A name that escapes the refs directory, or breaks its namespace's pattern, is refused
    before it is used: nothing written outside, no ref moved, nothing kept."""
    bare, b = world
    sha = _git(bare, "rev-parse", "main")
    before = Snapshot(b)
    with served(transport, bare, {HOSTILE_NAMES[attack]: sha}) as url, StateRepo(b) as repo:
        repo.store.set_remote_url(url)
        err = _refused(repo.pull, "remote.ref_name")
        repo.store.set_remote_url(str(bare))
    assert "refs/gitstate/refusals" in err.message or "runs" in err.message
    assert not (tmp_path / "x").exists() and not (b / "x").exists()
    before.unchanged()


def test_clone_refuses_a_hostile_name(world: tuple[Path, Path], tmp_path: Path) -> None:
    """clone checks the names too, and leaves no directory behind."""
    bare, _b = world
    sha = _git(bare, "rev-parse", "main")
    with HostileGitServer(bare, extra_refs={HOSTILE_NAMES["replaces-main"]: sha}) as url:
        _refused(lambda: StateRepo.clone(url, tmp_path / "c"), "remote.ref_name")
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("oddity", ["garbage", "no-space", "bad-id"])
def test_a_packed_refs_oddity_is_a_named_refusal(world: tuple[Path, Path],
                                                 oddity: str) -> None:
    """A path remote's packed-refs that git cannot read stops the pull with a rule; the same
    damage in the local packed-refs is a rule too, never a traceback."""
    bare, b = world
    line = {"garbage": "this is not a ref line\n", "no-space": "0" * 40 + "\n",
            "bad-id": "xyz refs/heads/runs/r1\n"}[oddity]
    (bare / "packed-refs").write_text(line)
    before = Snapshot(b)
    with StateRepo(b) as repo, pytest.raises(StoreError) as err:
        repo.remote.pull()
    assert err.value.rule in ("remote.ref_name", "remote.unreachable", "remote.hung_up")
    before.unchanged()
    (bare / "packed-refs").unlink()
    (b / "state" / ".git" / "packed-refs").write_text(line)
    with StateRepo(b) as repo, pytest.raises(StoreError) as err:
        repo.remote.pull()
    assert err.value.rule == "store.bad_ref"


@pytest.fixture
def guarded(world: tuple[Path, Path], tmp_path: Path) -> Path:
    """srv/guarded.git: the same history, with hooks/git/pre-receive installed."""
    server = tmp_path / "srv" / "guarded.git"
    subprocess.run([GIT or "git", "clone", "-q", "--bare", str(world[0]), str(server)],
                   check=True)
    _git(server, "config", "http.receivepack", "true")
    install_pre_receive(server, tmp_path)
    return server


@pytest.mark.parametrize("name", ["refs/gitstate/refusals/0123456/89abcdef",
                                  "refs/gitstate/refusals/ABCDEF0123456789",
                                  "refs/heads/runs/a/b"])
def test_the_hook_refuses_a_name_outside_its_namespace(world: tuple[Path, Path],
                                                       guarded: Path, name: str) -> None:
    """The pre-receive hook applies the same patterns (a journal is 16 lowercase hex)."""
    bare, _b = world
    out = subprocess.run([GIT or "git", "-C", str(bare), "push", str(guarded),
                          f"main:{name}"], capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode != 0 and "[remote.ref_name]" in out.stderr, out.stderr
    assert name not in _git(guarded, "for-each-ref")


# -- 2. bounds -------------------------------------------------------------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
def test_new_journals_per_pull_are_bounded(world: tuple[Path, Path], transport: str) -> None:
    """501 journal names (one refusal, 501 times) are refused as a whole, naming the
    setting; with the bound raised they would be taken (so the bound is what refuses)."""
    bare, b = world
    journal = _git(bare, "for-each-ref", "--format=%(objectname)", "refs/gitstate/refusals/")
    many = {f"refs/gitstate/refusals/{n:016x}": journal for n in range(1, 502)}
    before = Snapshot(b)
    with served(transport, bare, many) as url, StateRepo(b) as repo:
        repo.store.set_remote_url(url)
        err = _refused(repo.pull, "remote.too_many_refs")
        repo.store.set_remote_url(str(bare))
    # A's own journal, never pulled by B, and the 501 forged names
    assert "pull_max_new_journals" in err.message and "502 journals" in err.message
    before.unchanged()


def test_new_runs_per_pull_are_bounded(world: tuple[Path, Path]) -> None:
    """pull_max_new_runs bounds the run ledgers one pull may add."""
    bare, b = world
    sha = _git(bare, "rev-parse", "main")
    (b / "config.toml").write_text("[gitstate]\npull_max_new_runs = 3\n")
    with served("git", bare, {f"refs/heads/runs/r{n}": sha for n in range(4)}) as url, \
            StateRepo(b) as repo:
        repo.store.set_remote_url(url)
        before = Snapshot(b)
        err = _refused(repo.pull, "remote.too_many_refs")
    assert "pull_max_new_runs" in err.message
    before.unchanged()


def test_objects_per_fetch_are_bounded(world: tuple[Path, Path], tmp_path: Path) -> None:
    """fetch_max_objects: a pack holding more objects is stopped at its 12-byte header."""
    bare, b = world
    with StateRepo(tmp_path / "a") as a:
        for n in range(40):
            a.set("counter", n, f"step {n}")
        a.push()
    (b / "config.toml").write_text("[gitstate]\nfetch_max_objects = 100\n")
    before = Snapshot(b)
    for transport in TRANSPORTS:
        with served(transport, bare) as url, StateRepo(b) as repo:
            repo.store.set_remote_url(url)
            err = _refused(repo.pull, "remote.too_many_objects")
            repo.store.set_remote_url(str(bare))
        assert "fetch_max_objects" in err.message
    before.unchanged()


@pytest.mark.parametrize(("setting", "data"), [
    ("fetch_max_bytes", lambda: pack([entry_header(3, 2 << 20) + zlib.compress(
        os.urandom(2 << 20), 0)])),
    ("fetch_max_inflated_bytes", lambda: blob_bomb(2 << 20)),
])
def test_pack_bytes_per_fetch_are_bounded(world: tuple[Path, Path], setting: str,
                                          data: object) -> None:
    """fetch_max_bytes bounds the pack as sent, fetch_max_inflated_bytes what its headers
    say it inflates to (a 2 KB pack of 2 MiB is refused at 1 MiB)."""
    bare, b = world
    (b / "config.toml").write_text(f"[gitstate]\n{setting} = {1 << 20}\n")
    with HostileGitServer(bare, edit=lambda refs: [(b"1" * 40 if n == b"refs/heads/main"
                                                    else s, n) for s, n in refs],
                          pack=data()) as url, StateRepo(b) as repo:  # type: ignore[operator]
        repo.store.set_remote_url(url)
        before = Snapshot(b)
        err = _refused(repo.pull, "remote.pack_too_large")
    assert setting in err.message
    before.unchanged()


# -- 3. sizes before bytes ---------------------------------------------------------------

_PULL_IN_A_CHILD = PEAK_MIB + """
import json, resource, sys, time
from gitstate.core.errors import GitStateError
from gitstate.api.repo import StateRepo
started = time.monotonic()
rule = None
with StateRepo(sys.argv[1]) as repo:
    repo.store.set_remote_url(sys.argv[2])
    try:
        repo.remote.pull()
    except GitStateError as exc:
        rule = exc.rule
print(json.dumps({"rule": rule, "seconds": time.monotonic() - started,
                  "peak_mib": peak_mib()}))
"""


def _pull_in_a_child(agent: Path, url: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", _PULL_IN_A_CHILD, str(agent), url],
                         capture_output=True, text=True, timeout=300, check=True, cwd=ROOT)
    result: dict[str, object] = json.loads(out.stdout)
    return result


def _main_is(sha: bytes) -> object:
    return lambda refs: [(sha if n == b"refs/heads/main" else s, n) for s, n in refs]


@pytest.mark.parametrize(("bomb", "rule"), [
    ("blob-3gib", "remote.object_too_large"),
    ("doubling-deltas", "remote.object_too_large"),
    ("header-lies", "remote.bad_pack"),
])
def test_a_pack_bomb_is_refused_in_bounded_memory(world: tuple[Path, Path], bomb: str,
                                                  rule: str) -> None:
    """A blob that inflates to 3 GiB (3 MB on the wire), the 1.7 KB doubling-delta bomb
    (2 GiB after eleven deltas) and an entry whose stream inflates past its header are
    refused from their headers: the pulling process peaks under 256 MiB."""
    bare, b = world
    data = {"blob-3gib": lambda: blob_bomb(3 << 30), "doubling-deltas": doubling_deltas,
            "header-lies": lambda: pack([entry_header(3, 1024) + zeros_stream(1 << 30)])}[
        bomb]()
    before = Snapshot(b)
    with HostileGitServer(bare, edit=_main_is(b"1" * 40), pack=data) as url:  # type: ignore[arg-type]
        result = _pull_in_a_child(b, url)
    assert result["rule"] == rule, result
    assert float(result["peak_mib"]) < 256, result  # type: ignore[arg-type]
    before.unchanged()


def test_clone_of_a_bomb_leaves_nothing(world: tuple[Path, Path], tmp_path: Path) -> None:
    """clone refuses the same way and removes what it made."""
    bare, _b = world
    with HostileGitServer(bare, edit=_main_is(b"1" * 40),  # type: ignore[arg-type]
                          pack=doubling_deltas()) as url:
        _refused(lambda: StateRepo.clone(url, tmp_path / "c"), "remote.object_too_large")
    assert not (tmp_path / "c").exists()


def _loose(repo: Path, kind: bytes, body: bytes | None = None, *, size: int | None = None,
           stream: bytes | None = None) -> str:
    """Write a loose object straight into ``repo``'s object directory (``stream``: its
    zlib data, for an object whose content is never built in memory)."""
    import hashlib

    if body is not None:
        header = b"%s %d\x00" % (kind, len(body))
        sha = hashlib.sha1(header + body).hexdigest()
        data = zlib.compress(header + body)
    else:
        assert size is not None and stream is not None
        sha = hashlib.sha1(b"%s %d" % (kind, size)).hexdigest()  # a name, never checked
        head = zlib.compressobj(9, zlib.DEFLATED, -15)
        data = b"\x78\xda" + head.compress(b"%s %d\x00" % (kind, size)) + head.flush(
            zlib.Z_FULL_FLUSH) + stream[2:-4] + b"\0\0\0\0"
    path = repo / "objects" / sha[:2] / sha[2:]
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return sha


def test_the_hook_refuses_a_loose_bomb_cheaply(world: tuple[Path, Path],
                                               guarded: Path) -> None:
    """A pushed schema.yaml stored loose that inflates past 512 MiB (where verify-push died
    with zlib.error) is refused from its header by the real hook, in well under a second
    of inflating and without a traceback."""
    base = _git(guarded, "rev-parse", "main")
    with Repo(str(guarded)) as repo:
        tree = repo[repo[base.encode()].tree]  # type: ignore[attr-defined]
        state_blob = tree[b"working_state.json"][1].decode()
    schema = _loose(guarded, b"blob", size=600 << 20, stream=zeros_stream(600 << 20))
    raw_tree = (b"100644 schema.yaml\0" + bytes.fromhex(schema) +
                b"100644 working_state.json\0" + bytes.fromhex(state_blob))
    tree_id = _loose(guarded, b"tree", raw_tree)
    change = Change(op="set", reason="bomb", actor="agent", key="k", old=None, new=1)
    commit = _commit(guarded, tree_id, base, change.message())
    started = time.monotonic()
    out = subprocess.run([str(guarded / "hooks" / "pre-receive")], input=f"{base} {commit} "
                         "refs/heads/main\n", capture_output=True, text=True, timeout=120,
                         env={**os.environ, "GIT_DIR": str(guarded)}, cwd=guarded,
                         check=False)
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    assert "[tree.too_large]" in out.stderr or "object_too_large" in out.stderr, out.stderr
    assert time.monotonic() - started < 30


def _commit(repo: Path, tree: str, parent: str, message: bytes, *,
            encoding: bytes | None = b"UTF-8", when: int | None = None) -> str:
    """A commit object written loose into ``repo`` (not on any ref)."""
    commit = Commit()
    commit.tree = tree.encode()  # type: ignore[assignment]
    commit.parents = [parent.encode()]  # type: ignore[list-item]
    commit.author = commit.committer = b"mallory <m@example.invalid>"
    with Repo(str(repo)) as r:
        parent_time = r[parent.encode()].commit_time  # type: ignore[attr-defined]
    commit.commit_time = commit.author_time = when or parent_time + 60
    commit.author_timezone = commit.commit_timezone = 0
    if encoding is not None:
        commit.encoding = encoding
    commit.message = message
    return _loose(repo, b"commit", commit.as_raw_string())


# -- 4 and 8. raw trees and commits ------------------------------------------------------

def _two_states(bare: Path) -> str:
    """main's next commit: a tree holding working_state.json twice, 262 first (what git
    shows) and 200 last (what a dict-based reader takes), with the trailers of setting 200:
    written with `git hash-object -t tree --literally`."""
    forge = Forge(bare)
    base = forge.head()
    assert base is not None
    change = Change(op="set", reason="lower it", actor="agent", key="stop_loss.2317",
                    old=262, new=200)
    when = forge.time() + 60
    after = apply_change(forge.state(), change, when).to_bytes()
    with Repo(str(bare)) as repo:
        blob = Blob.from_string(after)
        repo.object_store.add_object(blob)
        first = repo[repo[base.encode()].tree][b"working_state.json"][1]  # type: ignore[attr-defined]
    raw = (b"100644 working_state.json\0" + bytes.fromhex(first.decode()) +
           b"100644 working_state.json\0" + bytes.fromhex(blob.id.decode()))
    tree = _git(bare, "hash-object", "-t", "tree", "--literally", "-w", "--stdin", input=raw)
    assert "duplicate" in subprocess.run([GIT or "git", "-C", str(bare), "fsck", "--strict"],
                                         capture_output=True, text=True).stdout + \
        subprocess.run([GIT or "git", "-C", str(bare), "fsck", "--strict"],
                       capture_output=True, text=True).stderr
    return _commit(bare, tree, base, change.message(), when=when)


def _latin1(bare: Path) -> str:
    """main's next commit relabelled `encoding ISO-8859-1` (its bytes still UTF-8)."""
    forge = Forge(bare)
    base = forge.head()
    assert base is not None
    change = Change(op="set", reason="réduire la perte", actor="agent", key="k", old=None,
                    new=1)
    when = forge.time() + 60
    after = State.to_bytes(apply_change(forge.state(), change, when))
    with Repo(str(bare)) as repo:
        blob = Blob.from_string(after)
        repo.object_store.add_object(blob)
    raw = b"100644 working_state.json\0" + bytes.fromhex(blob.id.decode())
    tree = _git(bare, "hash-object", "-t", "tree", "-w", "--stdin", input=raw)
    return _commit(bare, tree, base, change.message(), encoding=b"ISO-8859-1", when=when)


FORGERIES = {"tree-twice": (_two_states, "tree.duplicate_entries"),
             "not-utf8": (_latin1, "commit.encoding")}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_pull_refuses_what_git_fsck_would(world: tuple[Path, Path], transport: str,
                                          forgery: str) -> None:
    """The tree holding working_state.json twice, and the commit that says ISO-8859-1, are
    refused by pull before anyone reads them, naming the rule."""
    bare, b = world
    make, rule = FORGERIES[forgery]
    _git(bare, "update-ref", "refs/heads/main", make(bare))
    before = Snapshot(b)
    with served(transport, bare) as url, StateRepo(b) as repo:
        repo.store.set_remote_url(url)
        with pytest.raises(GitStateError) as err:
            repo.remote.pull()
        repo.store.set_remote_url(str(bare))
    assert _rule_of(err.value) == rule, err.value.message
    assert "stop_loss.2317 = 262" in section(b)[0]
    before.unchanged()


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_clone_refuses_what_git_fsck_would(world: tuple[Path, Path], tmp_path: Path,
                                           forgery: str) -> None:
    """clone checks from the root with the same rules, and leaves no directory."""
    bare, _b = world
    make, rule = FORGERIES[forgery]
    _git(bare, "update-ref", "refs/heads/main", make(bare))
    with HostileGitServer(bare) as url, pytest.raises(GitStateError) as err:
        StateRepo.clone(url, tmp_path / "c")
    assert _rule_of(err.value) == rule, err.value.message
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_the_hook_refuses_what_git_fsck_would(world: tuple[Path, Path], guarded: Path,
                                              forgery: str) -> None:
    """The real pre-receive hook names the same rule (receive.fsckObjects off: the hook is
    what stands between the pusher and the server)."""
    bare, _b = world
    make, rule = FORGERIES[forgery]
    _git(bare, "update-ref", "refs/heads/main", make(bare))
    before = _git(guarded, "rev-parse", "main")
    out = subprocess.run([GIT or "git", "-C", str(bare), "push", str(guarded), "main"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode != 0 and f"[{rule}]" in out.stderr, out.stderr
    assert _git(guarded, "rev-parse", "main") == before


# -- 5. deadlines ------------------------------------------------------------------------

def _cli(*args: str, agent: Path, timeout: float = 120) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "gitstate", "--agent-dir", str(agent),
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)


@pytest.mark.parametrize("stall", ["refs", "half-the-pack", "http"])
def test_a_stalled_remote_is_a_named_refusal_and_holds_up_no_write(
        world: tuple[Path, Path], tmp_path: Path, stall: str) -> None:
    """A server that never sends its refs, or stops half-way through the pack: pull answers
    remote.timeout (naming remote_stall_seconds) within the deadline, and a local set made
    meanwhile is not held up (the wait holds no lock)."""
    bare, b = world
    with StateRepo(tmp_path / "a") as a:
        a.set("more", 1, "news")
        a.push()
    (b / "config.toml").write_text("[gitstate]\nremote_stall_seconds = 3\n")
    if stall == "http":
        server: object = smart_http(bare.parent, bare.name, stall=True)
    else:
        server = HostileGitServer(bare, **({"stall_refs": True} if stall == "refs" else
                                           {"cut_pack_after": 200}))
    with server as url:  # type: ignore[attr-defined]
        with StateRepo(b) as repo:
            repo.store.set_remote_url(url)
        started = time.monotonic()
        pull = _cli("pull", agent=b)
        time.sleep(1.0)
        write = _cli("set", "local", "1", "--reason", "made while the pull waits", agent=b)
        _out, err = write.communicate(timeout=60)
        wrote = time.monotonic() - started
        assert write.returncode == 0, err
        _out, err = pull.communicate(timeout=60)
        waited = time.monotonic() - started
    assert pull.returncode == 3 and "remote.timeout" in err and "Traceback" not in err, err
    assert "remote_stall_seconds" in err
    assert 2.5 < waited < 30 and wrote < waited, (wrote, waited)


def test_remote_first_fails_fast_on_a_stalled_remote(world: tuple[Path, Path]) -> None:
    """In remote-first mode a write needs the remote: with it stalled the write is refused
    within the deadline, naming it."""
    bare, b = world
    (b / "config.toml").write_text('[gitstate]\nsync = "remote-first"\n'
                                   "remote_stall_seconds = 2\n")
    with HostileGitServer(bare, stall_refs=True) as url, StateRepo(b) as repo:
        repo.store.set_remote_url(url)
        started = time.monotonic()
        _refused(lambda: repo.set("k", 1, "needs the remote"), "remote.timeout")
        assert time.monotonic() - started < 20
        assert "k" not in repo.state().keys


# -- 6. pushes go through the receiving side's checks --------------------------------------

@pytest.mark.parametrize("transport", ["path", "file", "git", "http"])
def test_a_refused_push_shows_the_hooks_own_message(world: tuple[Path, Path],
                                                    transport: str) -> None:
    """A path or file:// remote runs its receive hooks as git does (a hook that always
    refuses stopped nothing before), and every refusal carries the hook's own words."""
    bare, b = world
    hook = bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'gitstate: [policy.closed] no pushes on Sundays' >&2\n"
                    "exit 1\n")
    hook.chmod(0o755)
    before = _git(bare, "rev-parse", "main")
    with StateRepo(b) as repo:
        repo.set("position_cap", 3, "size down")
        if transport == "git":
            with git_daemon(bare.parent) as port:
                repo.store.set_remote_url(f"git://127.0.0.1:{port}/{bare.name}")
                err = _refused(repo.push, "remote.refused")
        elif transport == "http":
            with smart_http(bare.parent, bare.name) as url:
                repo.store.set_remote_url(url)
                err = _refused(repo.push, "remote.refused")
        else:
            repo.store.set_remote_url(str(bare) if transport == "path" else f"file://{bare}")
            err = _refused(repo.push, "remote.refused")
    assert "[policy.closed] no pushes on Sundays" in err.message, err.message
    assert _git(bare, "rev-parse", "main") == before


def test_the_real_hook_guards_a_path_remote(world: tuple[Path, Path], guarded: Path,
                                            tmp_path: Path) -> None:
    """With hooks/git/pre-receive on a path remote, gitstate push is checked by it like any
    push (its refusal names the rule); an honest push passes."""
    _bare, b = world
    hook = guarded / "hooks" / "pre-receive"
    text = hook.read_text()
    hook.write_text(text.replace("status=0\n", "status=0\necho 'gitstate: [test.seen] "
                                 "checked' >&2\n"))
    with StateRepo(b) as repo:
        repo.store.set_remote_url(str(guarded))
        repo.set("position_cap", 3, "size down")
        assert repo.remote.push().pushed == 1
    assert _git(guarded, "rev-parse", "main") == _git(b / "state", "rev-parse", "main")
    hook.write_text("#!/bin/sh\n" + text.split("\n", 1)[1].replace(
        "exit $status", 'echo "gitstate: [test.closed] refused after the checks" >&2\nexit 1'))
    with StateRepo(b) as repo:
        repo.set("position_cap", 4, "size up")
        err = _refused(repo.push, "remote.refused")
    assert "[test.closed]" in err.message


# -- 7. never a traceback --------------------------------------------------------------------

@pytest.mark.parametrize(("failure", "rule"), [
    ("bad-name", "remote.ref_name"), ("cut-and-closed", "remote.hung_up"),
    ("bomb", "remote.object_too_large"), ("no-repository", "remote.hung_up")])
def test_the_cli_names_the_rule_and_exits_3(world: tuple[Path, Path], tmp_path: Path,
                                            failure: str, rule: str) -> None:
    """Whatever the transport meets, `gitstate pull` prints its rule and exits 3."""
    bare, b = world
    sha = _git(bare, "rev-parse", "main")
    with StateRepo(tmp_path / "a") as a:
        a.set("more", 1, "news")
        a.push()
    servers = {
        "bad-name": lambda: HostileGitServer(bare, extra_refs={
            HOSTILE_NAMES["escapes-the-state-dir"]: sha}),
        "cut-and-closed": lambda: HostileGitServer(bare, cut_pack_after=150, cut="close"),
        "bomb": lambda: HostileGitServer(bare, edit=_main_is(b"1" * 40),  # type: ignore[arg-type]
                                         pack=doubling_deltas()),
        "no-repository": lambda: HostileGitServer(tmp_path / "missing.git"),
    }
    with servers[failure]() as url:
        with StateRepo(b) as repo:
            repo.store.set_remote_url(url)
        proc = _cli("pull", agent=b)
        _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    assert "Traceback" not in err and rule in err, err


# -- refusal journals: grow only, records by value ---------------------------------------------

@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("attack", ["rewritten", "bad_time"])
def test_pull_refuses_a_rewritten_or_forged_journal(world: tuple[Path, Path], transport: str,
                                                    attack: str) -> None:
    """A server replacing A's journal (that B already holds) by one well-formed root
    commit, or offering a record whose time is not a time: refused, nothing kept."""
    from tests.history.test_refusals import _forge

    bare, b = world
    with StateRepo(b) as repo:
        repo.remote.pull()  # B holds A's journal
    [(name, _held)] = [line.split() for line in _git(
        bare, "for-each-ref", "--format=%(refname) %(objectname)",
        "refs/gitstate/refusals/").splitlines()]
    if attack == "rewritten":
        _git(bare, "update-ref", name, _forge(bare, None))
    else:
        name = "refs/gitstate/refusals/00000000000000aa"
        _git(bare, "update-ref", name, _forge(bare, None, time="last tuesday"))
    before = Snapshot(b)
    with served(transport, bare) as url, StateRepo(b) as repo:
        repo.store.set_remote_url(url)
        err = _refused(repo.pull, "remote.refusals_invalid")
        repo.store.set_remote_url(str(bare))
    assert ("refusals.rewritten" if attack == "rewritten" else "refusals.bad_record") \
        in err.message
    before.unchanged()
