"""Specification of sync through real git servers on loopback: git daemon and smart HTTP
(git http-backend), push with lease, semantic re-apply, fast-forward pulls, remote-first races,
a server dying mid-push, and the server-side pre-receive check."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitstate.api.repo import StateRepo
from gitstate.audit import integrity
from gitstate.audit.fleet import fleet
from gitstate.core.errors import CasMismatch, Refused, StoreError
from tests.helpers import GIT, free_port, git, install_pre_receive, run_cli

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(GIT is None, reason="needs the git CLI for the servers")


def _bare(root: Path, name: str = "remote.git") -> Path:
    path = root / name
    subprocess.run([GIT or "git", "init", "-q", "--bare", "-b", "main", str(path)], check=True)
    subprocess.run([GIT or "git", "-C", str(path), "config", "http.receivepack", "true"],
                   check=True)
    return path


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[str]:
    """git daemon on 127.0.0.1 serving an empty bare repository, receive-pack enabled."""
    root = tmp_path / "srv"
    root.mkdir()
    _bare(root)
    port = free_port()
    proc = subprocess.Popen([GIT or "git", "daemon", "--reuseaddr", "--export-all",
                             "--enable=receive-pack", f"--base-path={root}",
                             "--listen=127.0.0.1", f"--port={port}", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 10
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        assert time.monotonic() < deadline, "git daemon did not start"
        time.sleep(0.05)
    yield f"git://127.0.0.1:{port}/remote.git"
    os.killpg(proc.pid, signal.SIGKILL)  # the daemon and its per-connection children
    proc.wait()


def _http(root: Path, *flags: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "git_http_server.py"),
                             str(root), *flags], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    return proc, f"http://127.0.0.1:{port}/remote.git"


@pytest.fixture
def http(tmp_path: Path) -> Iterator[str]:
    root = tmp_path / "httpsrv"
    root.mkdir()
    _bare(root)
    proc, url = _http(root)
    yield url
    proc.kill()
    proc.wait()


def _publish(tmp_path: Path, url: str, name: str = "a") -> StateRepo:
    repo = StateRepo.init(tmp_path / name)
    repo.set("stop_loss.2317", 262, "跌破即出場")
    repo.store.set_remote_url(url)
    assert repo.remote.push().action == "push"
    return repo


@pytest.mark.parametrize("server", ["daemon", "http"])
def test_init_remote_push_clone(tmp_path: Path, server: str,
                                request: pytest.FixtureRequest) -> None:
    """init, remote set and push publish to an empty remote; clone reproduces the state."""
    url = request.getfixturevalue(server)
    a = _publish(tmp_path, url)
    b = StateRepo.clone(url, tmp_path / "b")
    assert b.head() == a.head() and b.state() == a.state()
    assert all(c.ok for c in integrity.verify(b))
    assert a.remote.status().ahead == 0
    a.set("stop_loss.2317", 257, "review", expected=262)
    assert a.remote.status().ahead == 1  # queued locally
    a.push()
    assert b.pull().action == "fast-forward" and b.state().keys["stop_loss.2317"].value == 257
    assert all(c.ok for c in integrity.verify(b))
    a.close()
    b.close()


def test_cli_forms(tmp_path: Path, daemon: str) -> None:
    """gitstate remote set / show / unset, push, clone and pull from the command line."""
    a, b = tmp_path / "a", tmp_path / "b"
    run_cli("init", agent_dir=a)
    run_cli("set", "k", "1", "-r", "r", agent_dir=a)
    assert run_cli("remote", "set", daemon, agent_dir=a).returncode == 0
    assert run_cli("remote", "show", agent_dir=a).stdout.strip() == daemon
    assert run_cli("push", agent_dir=a).returncode == 0
    assert run_cli("clone", daemon, str(b)).returncode == 0
    run_cli("set", "k", "2", "-r", "r2", agent_dir=a)
    run_cli("push", agent_dir=a)
    out = run_cli("pull", agent_dir=b)
    assert out.returncode == 0 and "fast-forward" in out.stdout
    assert run_cli("remote", "unset", agent_dir=a).returncode == 0
    assert run_cli("remote", "show", agent_dir=a).returncode == 1
    assert run_cli("push", agent_dir=a).returncode == 2


def test_push_reapplies_and_refuses_with_both_sides(tmp_path: Path, daemon: str) -> None:
    """A remote that moved on: independent changes are re-applied; a conflict is refused,
    shown with both sides and kept on a named ref; nothing is lost."""
    a = _publish(tmp_path, daemon)
    b = StateRepo.clone(daemon, tmp_path / "b")
    a.set("stop_loss.2317", 257, "a: review", expected=262)
    a.push()
    b.set("position_cap", "96%", "b: unrelated")
    b.set("stop_loss.2317", 254, "b: stale patrol", expected=262)
    result = b.push()
    assert result.rebased == 1 and len(result.refused) == 1
    refused = result.refused[0]
    assert refused["local"]["stop_loss.2317"]["value"] == 254
    assert refused["remote"]["stop_loss.2317"]["value"] == 257
    assert refused["remote"]["stop_loss.2317"]["reason"] == "a: review"
    assert result.kept_on and b.store.ref(result.kept_on) is not None
    kept_log = git(b.state_dir, "log", "--format=%s", result.kept_on).stdout
    assert "b: stale patrol" in kept_log
    a.pull()
    assert a.state().keys["position_cap"].value == "96%"
    assert a.state().keys["stop_loss.2317"].value == 257
    for repo in (a, b):
        assert all(c.ok for c in integrity.verify(repo)), [c for c in integrity.verify(repo) if not c.ok]


def test_pull_refuses_divergence(tmp_path: Path, daemon: str) -> None:
    """pull is fast-forward only: a diverged local main is reported, never merged."""
    a = _publish(tmp_path, daemon)
    b = StateRepo.clone(daemon, tmp_path / "b")
    a.set("k", 1, "a")
    a.push()
    b.set("k", 2, "b")
    with pytest.raises(Refused) as err:
        b.pull()
    assert err.value.rule == "remote.diverged"
    assert b.state().keys["k"].value == 2


@pytest.mark.slow
def test_remote_first_race_exactly_one_wins(tmp_path: Path, daemon: str) -> None:
    """Two clones in remote-first mode race CAS writes on one key: one wins every time."""
    _publish(tmp_path, daemon).close()
    repos = []
    for name in ("x", "y"):
        StateRepo.clone(daemon, tmp_path / name).close()
        (tmp_path / name / "config.toml").write_text('[gitstate]\nsync = "remote-first"\n')
        repos.append(StateRepo(tmp_path / name))
    races = int(os.environ.get("GITSTATE_RACES", "40"))
    wins = {"x": 0, "y": 0}
    for n in range(races):
        barrier = threading.Barrier(2)
        outcome: dict[str, object] = {}

        def write(repo: StateRepo, who: str, n: int = n,
                  barrier: threading.Barrier = barrier,
                  outcome: dict[str, object] = outcome) -> None:
            current = repo.state().keys["stop_loss.2317"].value if n else 262
            barrier.wait()
            try:
                repo.set("stop_loss.2317", 1000 + n, f"{who} round {n}",
                         expected=262 if n == 0 else current)
                outcome[who] = "won"
            except CasMismatch as exc:
                outcome[who] = exc.details["current"]["reason"]

        threads = [threading.Thread(target=write, args=(r, w)) for r, w in zip(repos, "xy",
                                                                                 strict=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [w for w, o in outcome.items() if o == "won"]
        assert len(winners) == 1, outcome
        loser = "y" if winners[0] == "x" else "x"
        assert outcome[loser] == f"{winners[0]} round {n}"  # refused with the winner's value
        wins[winners[0]] += 1
        for repo in repos:  # both start the next race from the same remote head
            repo.remote.pull()
    print(f"\nremote-first races: {races}, wins {wins}")
    for repo in repos:
        failed = [c for c in integrity.verify(repo) if not c.ok]
        assert not failed, failed
        repo.close()


def test_remote_first_offline_is_refused_local_first_queues(tmp_path: Path) -> None:
    """Unreachable remote: remote-first refuses the write; local-first commits and queues."""
    repo = StateRepo.init(tmp_path / "a")
    repo.store.set_remote_url(f"git://127.0.0.1:{free_port()}/nothing.git")
    repo.set("k", 1, "local-first: committed, queued")
    assert repo.remote.status().ahead == 2
    repo.close()
    (tmp_path / "a" / "config.toml").write_text('[gitstate]\nsync = "remote-first"\n')
    with StateRepo(tmp_path / "a") as rf, pytest.raises(StoreError) as err:
        rf.set("k", 2, "remote-first: refused")
    assert err.value.rule == "remote.unreachable"


def test_server_killed_mid_push_loses_nothing(tmp_path: Path) -> None:
    """The HTTP server dies in the middle of a push: nothing lost; the next push completes."""
    root = tmp_path / "srv"
    root.mkdir()
    _bare(root)
    good, url = _http(root)
    try:
        a = _publish(tmp_path, url)
    finally:
        good.kill()
    for i in range(50):
        a.set(f"k{i % 10}", i, f"queued {i}")
    dying, dying_url = _http(root, "--die-on-push")
    a.store.set_remote_url(dying_url)
    with pytest.raises(StoreError):
        a.push()
    dying.wait(timeout=10)
    assert a.remote.status().ahead == 50 and a.state().keys["k9"].value == 49
    good, url = _http(root)
    try:
        a.store.set_remote_url(url)
        assert a.push().pushed == 50
        b = StateRepo.clone(url, tmp_path / "b")
        assert b.state() == a.state()
        assert all(c.ok for c in integrity.verify(b))
    finally:
        good.kill()


def test_pre_receive_refuses_bad_pushes(tmp_path: Path) -> None:
    """The server hook refuses a forced push, an amended commit and a hand-made commit that
    breaks the cap; a good push passes."""
    bare = _bare(tmp_path)
    install_pre_receive(bare, tmp_path)
    a = _publish(tmp_path, str(bare))
    a.set("k", 1, "good change")
    assert a.push().action == "push"  # passes the hook
    work = tmp_path / "work"
    env_git = ["-c", "user.name=x", "-c", "user.email=x@x"]
    subprocess.run([GIT or "git", "clone", "-q", str(bare), str(work)], check=True)
    # an amended commit, force-pushed
    git(work, *env_git, "commit", "-q", "--amend", "-m", "rewritten reason", "--no-verify")
    forced = git(work, "push", "--force", "origin", "main")
    assert forced.returncode != 0 and "does not descend" in forced.stderr
    git(work, "reset", "-q", "--hard", "origin/main")
    # a forced push that drops the last commit
    git(work, "reset", "-q", "--hard", "HEAD~1")
    dropped = git(work, "push", "--force", "origin", "main")
    assert dropped.returncode != 0 and "non-fast-forward" in dropped.stderr
    git(work, "reset", "-q", "--hard", "origin/main")
    # a fast-forward commit made with plain git: no trailers, no gitstate reason
    (work / "working_state.json").write_text((work / "working_state.json").read_text()
                                             .replace('"value": 1', '"value": 2'))
    git(work, "add", "working_state.json")
    git(work, *env_git, "commit", "-q", "--no-verify", "-m", "just a commit")
    plain = git(work, "push", "origin", "main")
    assert plain.returncode != 0 and "no gitstate trailers" in plain.stderr
    git(work, "reset", "-q", "--hard", "origin/main")
    # a hand-made commit with 40 live keys
    import json

    state = json.loads((work / "working_state.json").read_text())
    for i in range(40):
        state["keys"][f"extra{i}"] = {"value": i, "set_at": "2026-08-13T00:00:00Z",
                                      "reason": "hand", "actor": "x", "expires_at": None}
    (work / "working_state.json").write_text(json.dumps(state, indent=2))
    git(work, "add", "working_state.json")
    git(work, *env_git, "commit", "-q", "--no-verify", "-m",
        "hand\n\nGitstate-Op: set\nGitstate-Key: extra0\nGitstate-Old: null\nGitstate-New: 0\n"
        "Gitstate-Expires: none\nGitstate-Actor: x\nGitstate-Version: 1")
    hand = git(work, "push", "origin", "main")
    # (its trailers name one key: the 39 others are a change no operation made; a commit that
    # replays exactly yet breaks the cap is in tests/remote/test_hostile_remote.py)
    assert hand.returncode != 0 and "[replay.mismatch]" in hand.stderr
    assert "differs from what the trailers say" in hand.stderr
    remote_head = git(bare, "rev-parse", "main").stdout.strip()
    assert remote_head == a.head()


def test_fleet_view(tmp_path: Path, daemon: str) -> None:
    """fleet: one row per agent with keys, last change, expiring keys, verify, ahead/behind."""
    root = tmp_path / "fleet"
    for name in ("alpha", "beta", "gamma"):
        with StateRepo.init(root / name) as repo:
            repo.set("stop", 262, f"{name} rule", ttl_hours=1)
            repo.set("cap", "96%", "cap")
    rows = {r["agent"]: r for r in fleet(root)}
    assert set(rows) == {"alpha", "beta", "gamma"}
    assert rows["beta"]["live_keys"] == 2 and rows["beta"]["expiring"] == ["stop"]
    assert rows["beta"]["verify"] == "ok" and rows["beta"]["last_change"]["reason"] == "cap"
    out = run_cli("fleet", str(root), "--json")
    assert out.returncode == 0 and len(__import__("json").loads(out.stdout)["agents"]) == 3
    shutil.rmtree(root / "gamma" / "state" / ".git" / "objects")
    rows = {r["agent"]: r for r in fleet(root)}
    assert "error" in rows["gamma"] or rows["gamma"]["verify"] != "ok"


SSHD = Path("/usr/sbin/sshd")


@pytest.fixture
def ssh_remote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An sshd on 127.0.0.1 (key authentication, its own config) in front of a bare repo."""
    if not SSHD.exists() or shutil.which("ssh-keygen") is None:
        pytest.skip("openssh-server is not installed")
    d = tmp_path / "sshd"
    d.mkdir()
    for name in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)],
                       check=True)
    (d / "authorized_keys").write_text((d / "client_key.pub").read_text())
    port = free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host_key'}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPermitRootLogin yes\n"
        "PasswordAuthentication no\nPubkeyAuthentication yes\nStrictModes no\nUsePAM no\n"
        f"PidFile {d / 'sshd.pid'}\n")
    Path("/run/sshd").mkdir(exist_ok=True)
    proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(d / "sshd_config")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.skip("sshd could not start here")
        time.sleep(0.05)
    (tmp_path / "srv").mkdir()
    bare = _bare(tmp_path / "srv")
    monkeypatch.setenv("GIT_SSH_COMMAND", f"ssh -i {d / 'client_key'} -o BatchMode=yes "
                       "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
                       "-o LogLevel=ERROR")
    user = os.environ.get("USER") or "root"
    yield f"ssh://{user}@127.0.0.1:{port}{bare}"
    proc.kill()
    proc.wait()


def _change_reaches(a: StateRepo, b: StateRepo) -> None:
    """A change pushed from ``a`` reaches the clone ``b`` by a fast-forward pull, verified."""
    a.set("stop_loss.2317", 257, "review", expected=262)
    a.push()
    assert b.pull().action == "fast-forward"
    assert b.state().keys["stop_loss.2317"].value == 257
    assert all(c.ok for c in integrity.verify(b))


def test_push_clone_pull_over_ssh(tmp_path: Path, ssh_remote: str) -> None:
    """ssh:// works like the other transports (GIT_SSH_COMMAND picks the key)."""
    a = _publish(tmp_path, ssh_remote)
    b = StateRepo.clone(ssh_remote, tmp_path / "b")
    assert b.state() == a.state()
    _change_reaches(a, b)


@pytest.fixture
def https_remote(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """git http-backend behind TLS on 127.0.0.1, with a self-signed certificate made here."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path / "tls"
    d.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")],
                   check=True, capture_output=True)
    root = tmp_path / "httpsrv"
    root.mkdir()
    _bare(root)
    proc, url = _http(root, "--tls", str(d / "cert.pem"), str(d / "key.pem"))
    yield url.replace("http://", "https://"), d / "cert.pem"
    proc.kill()
    proc.wait()


def test_https_trusts_only_a_configured_certificate(tmp_path: Path,
                                                    https_remote: tuple[str, Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """https:// like git: an unknown certificate is refused (the write stays queued); the
    repository's or the user's http.sslCAInfo makes it trusted for push, clone and pull."""
    url, cert = https_remote
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # no user-wide git config yet
    a = StateRepo.init(tmp_path / "a")
    a.set("stop_loss.2317", 262, "跌破即出場")
    a.store.set_remote_url(url)
    with pytest.raises(StoreError) as err:
        a.push()
    assert err.value.rule == "remote.unreachable"
    assert "certificate" in err.value.message.lower(), err.value.message
    assert a.remote.status().ahead == 2  # nothing lost: init and the set wait to be pushed

    assert git(a.state_dir, "config", "http.sslCAInfo", str(cert)).returncode == 0
    assert a.push().action == "push"
    with pytest.raises(StoreError):  # the clone has no repository config: not trusted yet
        StateRepo.clone(url, tmp_path / "b")
    assert not (tmp_path / "b").exists()  # a failed clone leaves nothing to clean up
    (home / ".gitconfig").write_text(f"[http]\n\tsslCAInfo = {cert}\n")
    b = StateRepo.clone(url, tmp_path / "b")
    assert b.state() == a.state()
    _change_reaches(a, b)
    a.close()
    b.close()


HIGH_FDS = """
import os, resource, sys
from gitstate.api.repo import StateRepo
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # the next fds are >= 1024
assert max(held) >= 1024
StateRepo.clone(sys.argv[1], sys.argv[2]).close()
with StateRepo(sys.argv[2]) as repo:
    print(repo.state().keys["k"].value)
"""


def test_a_process_holding_many_files_still_fetches(tmp_path: Path) -> None:
    """A long-lived process past 1,024 open files (an MCP server with many sessions) still
    talks to a remote: the transport waits with poll, which select could not do (it refused
    a descriptor numbered 1024 or more: 'filedescriptor out of range in select()')."""
    import resource

    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 1200:
        pytest.skip("the hard limit on open files is below 1,200")
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    with StateRepo.init(tmp_path / "a") as repo:
        repo.set("k", 7, "r")
    out = subprocess.run([sys.executable, "-m", "gitstate", "--agent-dir", str(tmp_path / "a"),
                          "remote", "set", str(bare)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    push = subprocess.run([sys.executable, "-m", "gitstate", "--agent-dir",
                           str(tmp_path / "a"), "push"], capture_output=True, text=True)
    assert push.returncode == 0, push.stderr
    got = subprocess.run([sys.executable, "-c", HIGH_FDS, str(bare), str(tmp_path / "b")],
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == 0 and got.stdout.strip() == "7", got.stderr[-2000:]
