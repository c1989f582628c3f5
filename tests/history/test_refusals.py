"""The refusal journal: every refused write kept on refs/gitstate/refusals, never on main
or in the working tree; bounded; read by git; carried by push and pull; checked by verify
and by the pre-receive hook; a storm from several processes loses nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gitstate.api.repo import StateRepo
from gitstate.core.errors import GitStateError
from gitstate.core.trailers import encode_json
from gitstate.history import refusalrecord, refusals
from gitstate.report.html import slug
from tests.helpers import GIT, assert_fsck_clean, git, install_pre_receive, run_cli

ROOT = Path(__file__).resolve().parents[2]


def _refuse(repo: StateRepo, n: int = 1, reason: str = "patrol re-derived") -> None:
    for i in range(n):
        with pytest.raises(GitStateError):
            repo.set("stop_loss.2317", 254, reason, expected=250, request_id=f"r{i}")


def test_a_refused_write_is_recorded_and_touches_nothing_else(repo: StateRepo) -> None:
    repo.set("stop_loss.2317", 262, "break below, exit")
    head = repo.head()
    tree = (repo.state_dir / "working_state.json").read_bytes()
    _refuse(repo, reason="patrol\nGitstate-Seq: 99999\nGitstate-Refusal: {}")
    assert repo.head() == head and (repo.state_dir / "working_state.json").read_bytes() == tree
    [entry] = list(refusals.entries(repo.store))
    assert {k: entry[k] for k in ("rule", "op", "key", "attempted", "expected", "head_value",
                                  "writer", "request_id")} == {
        "rule": "cas.mismatch", "op": "set", "key": "stop_loss.2317", "attempted": 254,
        "expected": {"value": 250}, "head_value": 262, "writer": "runtime",
        "request_id": "r0"}
    assert entry["reason"].startswith("patrol\nGitstate-Seq") and entry["time"]
    if GIT is not None:  # plain git reads it: one commit, one file, trailers intact
        out = git(repo.state_dir, "log", "--format=%(trailers:key=Gitstate-Seq,valueonly)",
                  refusals.REF).stdout.split()
        assert out == ["1"]
        files = git(repo.state_dir, "ls-tree", "--name-only", refusals.REF).stdout.split()
        assert files == ["refusal.json"]
        assert_fsck_clean(repo.state_dir)
    out = run_cli("log", "--refused", "--key", "stop_loss.2317", agent_dir=repo.agent_dir)
    assert "refused set stop_loss.2317 254 (HEAD: 262) [cas.mismatch]" in out.stdout
    assert len(out.stdout.splitlines()) == 1  # the reason's line breaks forge nothing
    assert run_cli("log", "--refused", "--key", "other", agent_dir=repo.agent_dir).stdout == ""
    line = run_cli("log", "--refused", "--jsonl", agent_dir=repo.agent_dir).stdout
    assert json.loads(line)["commit"] == entry["commit"]


def test_retention_keeps_two_generations(repo: StateRepo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(refusals, "RETAIN", 5)
    repo.set("stop_loss.2317", 262, "rule")
    _refuse(repo, 12)
    kept = [e["request_id"] for e in refusals.entries(repo.store)]
    assert kept == ["r11", "r10", "r9", "r8", "r7", "r6", "r5"]  # 2 + a full generation
    assert sum(1 for _ in repo.store.walk(repo.store.ref(refusals.REF) or "")) == 2
    assert refusals.problems(repo.store) == []


STORM = """
import sys
from gitstate.api.repo import StateRepo
from gitstate.core.errors import GitStateError
from gitstate.report.html import slug
repo = StateRepo(sys.argv[1], writer="agent")
for i in range(int(sys.argv[3])):
    try:
        repo.set("stop_loss.2317", 254, "patrol", expected=250,
                 request_id=f"{sys.argv[2]}-{i}")
    except GitStateError:
        pass
"""
WRITER = """
import sys
from gitstate.api.repo import StateRepo
repo = StateRepo(sys.argv[1])
for i in range(int(sys.argv[2])):
    repo.set("counter", i, "main write beside the storm")
"""


def test_a_refusal_storm_from_four_processes_loses_none(repo: StateRepo) -> None:
    """1,000 refused writes from 4 processes beside a process writing main: every refusal
    is in the journal once, every main write landed, verify is clean."""
    repo.set("stop_loss.2317", 262, "rule")
    procs = [subprocess.Popen([sys.executable, "-c", STORM, str(repo.agent_dir), f"p{n}",
                               "250"], cwd=ROOT) for n in range(4)]
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(repo.agent_dir), "50"],
                              cwd=ROOT)
    for p in [*procs, writer]:
        assert p.wait(timeout=300) == 0
    ids = [e["request_id"] for e in refusals.entries(repo.store)]
    assert len(ids) == 1000 and len(set(ids)) == 1000
    with StateRepo(repo.agent_dir) as fresh:
        assert fresh.state().keys["counter"].value == 49
        assert fresh.state().keys["stop_loss.2317"].value == 262
        from gitstate.audit.integrity import verify

        assert [c.name for c in verify(fresh) if not c.ok] == []


pytestmark_git = pytest.mark.skipif(GIT is None, reason="needs the git CLI")


def _bare(root: Path) -> Path:
    path = root / "remote.git"
    subprocess.run([GIT or "git", "init", "-q", "--bare", "-b", "main", str(path)], check=True)
    return path


@pytestmark_git
def test_journals_travel_with_push_and_pull(tmp_path: Path) -> None:
    bare = _bare(tmp_path)
    a = StateRepo.init(tmp_path / "a")
    a.set("stop_loss.2317", 262, "rule")
    a.store.set_remote_url(str(bare))
    a.push()
    b = StateRepo.clone(str(bare), tmp_path / "b")
    _refuse(a, 3)
    a.push()
    pulled = b.pull()
    assert pulled.runs["refusal_journals"] == [refusals.origin_id(a.store.git_dir)]
    seen = list(refusals.entries(b.store))
    assert len(seen) == 3 and {e["origin"] for e in seen} == {
        refusals.origin_id(a.store.git_dir)}
    _refuse(b, 1, "b's own")
    assert next(e["reason"] for e in refusals.entries(b.store)) == "b's own"
    assert refusals.problems(b.store) == []
    # a journal forged on the remote is refused as a whole
    blob = git(bare, "hash-object", "-w", "--stdin", input='{"rule": "x"}').stdout.strip()
    tree = git(bare, "mktree", input=f"100644 blob {blob}\trefusal.json\n").stdout.strip()
    forged = git(bare, "-c", "user.name=x", "-c", "user.email=x@x", "commit-tree", tree, "-m",
                 "x\n\nGitstate-Refusal: {}\n").stdout.strip()
    git(bare, "update-ref", refusals.REMOTE_PREFIX + "0123456789abcdef", forged)
    with pytest.raises(GitStateError) as exc:
        b.pull()
    assert exc.value.rule == "remote.refusals_invalid"
    assert b.store.ref(refusals.PULLED_PREFIX + "0123456789abcdef") is None
    a.close()
    b.close()


@pytestmark_git
def test_the_pre_receive_hook_checks_pushed_journals(tmp_path: Path) -> None:
    bare = _bare(tmp_path)
    install_pre_receive(bare, tmp_path)
    a = StateRepo.init(tmp_path / "a")
    a.set("stop_loss.2317", 262, "rule")
    _refuse(a, 2)
    name = refusals.REMOTE_PREFIX + refusals.origin_id(a.store.git_dir)
    ok = git(a.state_dir, "push", str(bare), "main", f"{refusals.REF}:{name}")
    assert ok.returncode == 0, ok.stderr
    deleted = git(a.state_dir, "push", str(bare), f":{name}")
    assert deleted.returncode != 0 and "the refusal journal is kept" in deleted.stderr
    blob = git(a.state_dir, "hash-object", "-w", "--stdin", input="{}").stdout.strip()
    tree = git(a.state_dir, "mktree", input=f"100644 blob {blob}\trefusal.json\n"
               f"100644 blob {blob}\tother\n").stdout.strip()
    forged = git(a.state_dir, "-c", "user.name=x", "-c", "user.email=x@x", "commit-tree",
                 tree, "-p", refusals.REF, "-m", "x\n\nGitstate-Refusal: {}\n").stdout.strip()
    refused = git(a.state_dir, "push", str(bare), f"{forged}:{name}")
    assert refused.returncode != 0 and "only refusal.json" in refused.stderr
    a.close()


TOKEN = "ghp_" + "1234567890abcdefghijklmnopqrstuvwxyZ"


@pytestmark_git
def test_a_refused_secret_never_reaches_the_journal(repo: StateRepo) -> None:
    """A value refused because it looks like a secret, and a run event refused before its
    fields were checked, are journaled without their text: `git log -p` of the journal
    holds no token."""
    with pytest.raises(GitStateError) as exc:
        repo.set("api.note", f"use {TOKEN}", "store the token")
    assert exc.value.rule.startswith("secret.")
    repo.runs.start("r1", description="d", criteria=["c"], reason="go")
    with pytest.raises(GitStateError) as run_exc:
        repo.runs.event("r1", {"type": "blocked", "reason": "x", "extra": TOKEN}, "odd")
    assert run_exc.value.rule == "run.invalid"
    records = list(refusals.entries(repo.store))
    assert {r["rule"] for r in records} == {exc.value.rule, "run.invalid"}
    by_rule = {r["rule"]: r for r in records}
    assert by_rule[exc.value.rule]["attempted"] == refusalrecord.WITHHELD
    assert by_rule["run.invalid"]["attempted"] == {
        "withheld": "the event did not pass the input rules"}
    patch = git(repo.state_dir, "log", "-p", refusals.REF).stdout
    assert TOKEN not in patch and "ghp_" not in patch


@pytestmark_git
def test_verify_names_a_journal_record_gitstate_did_not_write(repo: StateRepo) -> None:
    repo.set("stop_loss.2317", 262, "rule")
    _refuse(repo, 1)
    tree = git(repo.state_dir, "rev-parse", f"{refusals.REF}^{{tree}}").stdout.strip()
    forged = git(repo.state_dir, "-c", "user.name=x", "-c", "user.email=x@x", "commit-tree",
                 tree, "-p", refusals.REF, "-m", "x\n\nGitstate-Refusal: {}\n").stdout.strip()
    git(repo.state_dir, "update-ref", refusals.REF, forged)
    out = run_cli("verify", "--json", agent_dir=repo.agent_dir)
    report, _ = json.JSONDecoder().raw_decode(out.stdout)
    failed = {c["check"] for c in report["checks"] if not c["ok"]}
    assert out.returncode == 1 and failed == {"refusals"}


def _forge(repo_dir: Path, parent: str | None, previous: str | None = None,
           lie: dict[str, Any] | None = None, **fields: object) -> str:
    """A journal commit built as an attacker would, with git: a record whose commit is the
    one the journal writes for it (refusalrecord.written: the bytes, the message, the Seq, the
    dates), so that only the attacker's values are wrong — or what ``lie`` replaces
    (``data``: refusal.json's bytes, ``message``, ``when``: the commit time)."""
    entry: dict[str, object] = dict.fromkeys(refusalrecord.FIELDS)
    entry.update({"time": "2026-01-01T00:00:00Z", "rule": "cas.mismatch", "op": "set",
                  "key": "stop_loss.2317", "reason": "forged"}, **fields)
    seq = 1 if parent is None else \
        int(git(repo_dir, "rev-list", "--count", parent).stdout) + 1
    parent_time = None if parent is None else \
        int(git(repo_dir, "log", "-1", "--format=%ct", parent).stdout)
    try:
        data, message, when = refusalrecord.written(entry, seq, previous, parent_time)
    except (ValueError, TypeError):  # a time that is no time: the rest as written, dated now
        data, message, _ = refusalrecord.written({**entry, "time": "2026-01-01T00:00:00Z"}, seq,
                                            previous, parent_time)
        good = encode_json({**entry, "time": "2026-01-01T00:00:00Z"})
        message = message.replace(good.encode(), encode_json(entry).encode())
        data = (json.dumps(entry, ensure_ascii=False, indent=2, sort_keys=True)
                + "\n").encode()
        when = int(time.time())
    data, message = (lie or {}).get("data", data), (lie or {}).get("message", message)
    when = (lie or {}).get("when", when)
    blob = subprocess.run([GIT or "git", "-C", str(repo_dir), "hash-object", "-w", "--stdin"],
                          input=data, capture_output=True, check=True).stdout.decode().strip()
    tree = git(repo_dir, "mktree", input=f"100644 blob {blob}\trefusal.json\n").stdout.strip()
    env = {**os.environ, "GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@x",
           "GIT_COMMITTER_NAME": "x", "GIT_COMMITTER_EMAIL": "x@x",
           "GIT_COMMITTER_DATE": f"{when} +0000", "GIT_AUTHOR_DATE": f"{when} +0000"}
    return subprocess.run([GIT or "git", "-C", str(repo_dir), "commit-tree", tree,
                           *(["-p", parent] if parent else []), "-F", "-"], input=message,
                          capture_output=True, env=env, check=True).stdout.decode().strip()


def _ref(repo_dir: Path, ref: str) -> str:
    return git(repo_dir, "rev-parse", "--verify", "-q", ref).stdout.strip()


@pytestmark_git
def test_the_hook_keeps_a_journal_growing_only(tmp_path: Path) -> None:
    """A force push replacing the records by one forged root commit is refused, and so is
    a new generation naming a head the server never had, or naming the held head before
    its chain is full; a fast-forward is taken."""
    bare = _bare(tmp_path)
    install_pre_receive(bare, tmp_path)
    a = StateRepo.init(tmp_path / "a")
    a.set("stop_loss.2317", 262, "rule")
    _refuse(a, 3)
    name = refusals.REMOTE_PREFIX + refusals.origin_id(a.store.git_dir)
    assert git(a.state_dir, "push", str(bare), "main", f"{refusals.REF}:{name}").returncode == 0
    held = _ref(bare, name)
    root = _forge(a.state_dir, None)
    out = git(a.state_dir, "push", "--force", str(bare), f"{root}:{name}")
    assert out.returncode != 0 and "[refusals.rewritten]" in out.stderr, out.stderr
    elsewhere = _forge(a.state_dir, None, previous=root)  # names a head the server never had
    out = git(a.state_dir, "push", "--force", str(bare), f"{elsewhere}:{name}")
    assert out.returncode != 0 and "[refusals.rewritten]" in out.stderr, out.stderr
    assert _ref(bare, name) == held
    assert git(bare, "cat-file", "-e", root).returncode != 0  # nothing kept
    grown = _forge(a.state_dir, held)
    assert git(a.state_dir, "push", str(bare), f"{grown}:{name}").returncode == 0
    # a generation naming the held head, before the chain is full: it would hide them
    early = _forge(a.state_dir, None, previous=grown)
    out = git(a.state_dir, "push", "--force", str(bare), f"{early}:{name}")
    assert out.returncode != 0 and "rolls over only when full" in out.stderr, out.stderr
    assert _ref(bare, name) == grown
    a.close()


@pytestmark_git
@pytest.mark.parametrize("bad", [{"time": "yesterday"}, {"time": 7}, {"rule": "X;rm -rf"},
                                 {"op": "set\nGitstate-Seq: 9"}, {"key": "../../x"},
                                 {"reason": "ok\u202egnp.exe"}, {"actor": "a" * 3000}])
def test_forged_record_values_are_refused_by_hook_and_pull(tmp_path: Path,
                                                           bad: dict[str, object]) -> None:
    bare = _bare(tmp_path)
    install_pre_receive(bare, tmp_path)
    a = StateRepo.init(tmp_path / "a")
    a.set("stop_loss.2317", 262, "rule")
    a.store.set_remote_url(str(bare))
    a.push()
    b = StateRepo.clone(str(bare), tmp_path / "b")
    forged = _forge(a.state_dir, None, **bad)
    name = refusals.REMOTE_PREFIX + "0123456789abcdef"
    out = git(a.state_dir, "push", str(bare), f"{forged}:{name}")
    assert out.returncode != 0 and "[refusals.bad_record]" in out.stderr, out.stderr
    assert _ref(bare, name) == ""
    # the same record placed on the server behind the hook's back: pull refuses it
    forged = _forge(bare, None, **bad)
    assert git(bare, "update-ref", name, forged).returncode == 0
    with pytest.raises(GitStateError) as exc:
        b.pull()
    assert exc.value.rule == "remote.refusals_invalid" and "bad_record" in exc.value.message
    assert b.store.ref(refusals.PULLED_PREFIX + "0123456789abcdef") is None
    assert git(b.state_dir, "cat-file", "-e", forged).returncode != 0  # nothing kept
    a.close()
    b.close()


def _journal_pulled(tmp_path: Path) -> tuple[Path, StateRepo, StateRepo]:
    """A journal of two records pushed by ``a`` and pulled by its clone ``b``."""
    bare = _bare(tmp_path)
    a = StateRepo.init(tmp_path / "a")
    a.set("stop_loss.2317", 262, "rule")
    a.store.set_remote_url(str(bare))
    _refuse(a, 2)
    a.push()
    b = StateRepo.clone(str(bare), tmp_path / "b")
    b.pull()
    return bare, a, b


@pytestmark_git
def test_pull_refuses_a_rewritten_journal(tmp_path: Path) -> None:
    bare, a, b = _journal_pulled(tmp_path)
    origin = refusals.origin_id(a.store.git_dir)
    held = b.store.ref(refusals.PULLED_PREFIX + origin)
    assert held is not None
    root = _forge(a.state_dir, None)
    git(a.state_dir, "push", "--force", str(bare), f"{root}:{refusals.REMOTE_PREFIX}{origin}")
    with pytest.raises(GitStateError) as exc:
        b.pull()
    assert exc.value.rule == "remote.refusals_invalid" and "rewritten" in exc.value.message
    assert b.store.ref(refusals.PULLED_PREFIX + origin) == held
    a.close()
    b.close()


@pytestmark_git
def test_a_new_generation_travels_with_push_and_pull(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Honest rollover: push sends the full chain's end, then the new root naming it, and a
    clone holding that head pulls the new generation (check_update, as the hook runs it)."""
    monkeypatch.setattr(refusals, "RETAIN", 3)  # in this process; the hook would hold 10,000
    bare, a, b = _journal_pulled(tmp_path)
    _refuse(a, 3)  # the third record of the chain, then a new generation of two
    assert a.store.ref(refusals.PREVIOUS) is not None
    a.push()  # the full chain's end, then the new root naming it
    name = refusals.REMOTE_PREFIX + refusals.origin_id(a.store.git_dir)
    assert _ref(bare, name) == a.store.ref(refusals.REF)
    _refuse(a, 1)
    a.push()
    c = StateRepo.clone(str(bare), tmp_path / "c")
    c.pull()  # c holds the new generation; a later one naming its head is taken
    _refuse(a, 2)
    a.push()
    c.pull()
    assert c.store.ref(refusals.PULLED_PREFIX + refusals.origin_id(a.store.git_dir)) == \
        a.store.ref(refusals.REF)
    assert refusals.problems(c.store) == []
    c.close()
    a.close()
    b.close()


@pytestmark_git
def test_every_reader_survives_a_bad_record(repo: StateRepo, tmp_path: Path) -> None:
    """A record with a bad time on this clone's own journal (written behind gitstate's
    back): log, log --since, run stats and the html report name it, never a traceback."""
    repo.set("stop_loss.2317", 262, "rule")
    _refuse(repo, 1)
    bad = _forge(repo.state_dir, repo.store.ref(refusals.REF), time="not a time")
    git(repo.state_dir, "update-ref", refusals.REF, bad)
    damaged = [e for e in refusals.entries(repo.store) if e.get("damaged")]
    assert len(damaged) == 1 and "not an ISO 8601 time" in damaged[0]["problem"]
    for args in (["log", "--refused"], ["log", "--refused", "--since", "2000-01-01T00:00:00Z"],
                 ["run", "stats"], ["report", "--html", str(tmp_path / "html")]):
        out = run_cli(*args, agent_dir=repo.agent_dir)
        assert out.returncode == 0 and "Traceback" not in out.stdout + out.stderr, (args, out)
    out = run_cli("log", "--refused", agent_dir=repo.agent_dir)
    assert "[cas.mismatch]" in out.stdout and "not an ISO 8601 time" in out.stderr
    out = run_cli("run", "stats", agent_dir=repo.agent_dir)
    assert f"damaged refusal record {bad[:12]}" in out.stdout, out.stdout
    assert "not an ISO 8601 time" in out.stdout
    proc = subprocess.Popen([sys.executable, "-m", "gitstate", "--agent-dir",
                             str(repo.agent_dir), "serve", "--port", "0"], cwd=ROOT,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stderr is not None
        base = proc.stderr.readline().split()[1]
        for page in ("", f"keys/{slug('stop_loss.2317')}.html"):  # the key page lists refusals
            with urllib.request.urlopen(base + page, timeout=10) as resp:
                assert resp.status == 200 and "stop_loss.2317" in resp.read().decode()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
