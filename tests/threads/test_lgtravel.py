"""LangGraph threads travel (gitstate/threads/sync.py, gitstate/threads/check.py): push, pull and clone
carry a thread when asked; a graph interrupted in one clone resumes with
``Command(resume=...)`` in another; every commit of a thread from elsewhere is re-derived
(the saver's own messages and structure, never LangGraph's serde) on pull and by the
pre-receive hook, and a thread commit forged with dulwich is refused by both."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from dulwich.objects import Blob, Commit, Tree
from dulwich.repo import Repo
from langgraph.types import Command

from gitstate.api.repo import StateRepo
from gitstate.core.errors import InvalidInput, Refused
from gitstate.langgraph import GitCheckpointSaver, enc
from gitstate.threads import sync as lgsync
from gitstate.threads.check import check_thread
from tests.helpers import GIT, assert_fsck_clean, git, install_pre_receive
from tests.lg_graph import build

pytestmark = pytest.mark.skipif(GIT is None, reason="needs the git CLI for the server")
THREAD = "refund O-104"
REF = f"refs/gitstate/threads/{enc(THREAD)}/%/checkpoints"
CONF: Any = {"configurable": {"thread_id": THREAD}}


def _bare(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([GIT or "git", "init", "-q", "--bare", "-b", "main", str(path)], check=True)
    return path


def _interrupted(tmp_path: Path) -> tuple[Path, Path]:
    """Clone A with the refund graph interrupted for a human, its thread pushed."""
    bare = _bare(tmp_path / "srv" / "remote.git")
    a = tmp_path / "a"
    with GitCheckpointSaver(a) as saver:
        out = build(saver).invoke({"order": "O-104", "log": []}, CONF)
        assert "__interrupt__" in out
        saver.repo.store.set_remote_url(str(bare))
        saver.repo.remote.push()
        pushed = saver.push([THREAD])
        assert pushed["pushed"] == [THREAD] and pushed["pending"] == []
    return bare, a


def test_a_thread_interrupted_in_one_clone_resumes_in_another(tmp_path: Path) -> None:
    bare, a = _interrupted(tmp_path)
    b = tmp_path / "b"
    StateRepo.clone(str(bare), b, ).close()
    with StateRepo(b) as repo:
        assert repo.remote.pull_threads([THREAD])["pulled"] == [THREAD]
        assert repo.remote.pull_threads([THREAD])["pulled"] == []  # nothing new
    with GitCheckpointSaver(b) as saver:
        out = build(saver).invoke(Command(resume="approve"), CONF)
        assert out["log"] == ["looked up", "human: approve", "paid"]
        saver.repo.remote.push()
        assert saver.push([THREAD])["pushed"] == [THREAD]
    with StateRepo(a) as repo:  # and back: A sees the thread finished on B
        assert repo.remote.pull_threads(True)["pulled"] == [THREAD]
    with GitCheckpointSaver(a) as saver:
        latest = saver.get_tuple(CONF)
        assert latest is not None
        assert latest.checkpoint["channel_values"]["log"] == ["looked up", "human: approve",
                                                              "paid"]
    assert_fsck_clean(b / "state")


def test_cli_push_pull_and_clone_carry_threads_when_asked(tmp_path: Path) -> None:
    from tests.helpers import run_cli

    bare, _a = _interrupted(tmp_path)
    plain, asked = tmp_path / "plain", tmp_path / "asked"
    assert run_cli("clone", str(bare), str(plain)).returncode == 0
    assert git(plain / "state", "for-each-ref", "refs/gitstate/threads/").stdout == ""
    out = run_cli("clone", str(bare), str(asked), "--thread", THREAD)
    assert out.returncode == 0 and f"threads: {THREAD}" in out.stdout, out.stderr
    assert git(asked / "state", "rev-parse", REF).stdout.strip() == \
        git(bare, "rev-parse", REF).stdout.strip()
    pulled = run_cli("pull", "--threads", agent_dir=plain)
    assert pulled.returncode == 0 and f"threads pulled: {THREAD}" in pulled.stdout
    again = run_cli("push", "--thread", THREAD, "--json", agent_dir=plain)
    assert again.returncode == 0 and '"pushed": []' in again.stdout


def test_cli_push_commits_pending_writes_first(tmp_path: Path) -> None:
    """Writes still in a thread's journal (no checkpoint after them yet) are committed by
    the saver's own commit_pending_writes before the push, so they travel."""
    from tests.helpers import run_cli

    bare, a = _interrupted(tmp_path)
    with GitCheckpointSaver(a) as saver:
        latest = saver.get_tuple(CONF)
        assert latest is not None
        saver.put_writes(latest.config, [("log", ["noted"])], "task-9")
        assert lgsync.pending(saver.store, THREAD)
    out = run_cli("push", "--thread", THREAD, "--json", agent_dir=a)
    assert out.returncode == 0 and '"pending": []' in out.stdout, out.stdout
    assert git(bare, "log", "-1", "--format=%s", REF).stdout.startswith("pending writes of")


def test_every_commit_the_saver_makes_passes_the_thread_rule(tmp_path: Path) -> None:
    """A graph's checkpoints with pending writes folded before their checkpoint, a fork,
    a pending-writes commit, and both tombstones re-derive."""
    from langgraph.checkpoint.base import empty_checkpoint

    with GitCheckpointSaver(tmp_path / "a") as saver:
        app = build(saver)
        app.invoke({"order": "O-1", "log": []}, CONF)
        app.invoke(Command(resume="deny"), CONF)
        history = list(saver.list(CONF))
        app.update_state(history[2].config, {"log": ["forked"]})  # a fork
        parent = saver.get_tuple(CONF)
        assert parent is not None
        for run in ("r1", "r2"):
            cp = empty_checkpoint()
            stored = saver.put(parent.config, cp, {"source": "loop", "step": 9,
                                                   "run_id": run}, {})
            parent = saver.get_tuple(stored)
            assert parent is not None
        saver.put_writes(parent.config, [("log", ["w"])], "task-1")
        saver.commit_pending_writes(THREAD)
        saver.delete_for_runs(["r2"])
        saver.prune([THREAD], keep=2)
        head = saver.store.ref(REF)
        assert head is not None
        assert check_thread(saver.store, REF, None, head) == []
        kinds = {info.message.split()[0] for info in saver.store.walk(head)}
        assert {b"checkpoint", b"pending", b"delete", b"prune:"} <= kinds


# -- forged thread commits -----------------------------------------------------------------

def _forge(bare: Path, change: Callable[[Repo, Tree, bytes], tuple[Tree, bytes]]) -> str:
    """A commit on the thread's ref of ``bare``, made with dulwich: the head's tree and
    message, changed by ``change``."""
    repo = Repo(str(bare))
    head = repo.refs[REF.encode()]
    parent = repo[head]
    assert isinstance(parent, Commit)
    old = repo[parent.tree]
    assert isinstance(old, Tree)
    tree = Tree()
    for item in old.items():
        tree.add(item.path, item.mode, item.sha)
    tree, message = change(repo, tree, parent.message)
    repo.object_store.add_object(tree)
    commit = Commit()
    commit.tree, commit.parents, commit.message = tree.id, [head], message
    commit.author = commit.committer = parent.author
    commit.author_time = commit.commit_time = int(time.time())
    commit.author_timezone = commit.commit_timezone = 0
    repo.object_store.add_object(commit)
    repo.refs[REF.encode()] = commit.id
    repo.close()
    return commit.id.decode()


def _blob(repo: Repo, tree: Tree, name: bytes, data: bytes) -> None:
    blob = Blob.from_string(data)
    repo.object_store.add_object(blob)
    tree.add(name, 0o100644, blob.id)


def _rewrite_log(repo: Repo, tree: Tree, message: bytes) -> tuple[Tree, bytes]:
    """The human's answer planted as the thread's log, under the head's own message (its
    checkpoint id again)."""
    _blob(repo, tree, b"channel.log", b"json\0" + b'["looked up", "human: approve", "paid"]')
    return tree, message


# A checkpoint id above any the saver makes for centuries (LangGraph's ids are uuid6, so
# they grow with the clock: a fixed id of today's prefix falls behind the honest head).
_NEXT = "1fffffff-ffff-6fff-8fff-ffffffffffff"


def _fresh(tree: Tree, message: bytes) -> tuple[Tree, bytes]:
    """The message the saver would write for a next checkpoint (a new id, no pending
    writes): whatever else the forgery changed is all that is wrong."""
    from gitstate.threads.format import checkpoint_head, checkpoint_message, parse_trailers

    head = json.loads(parse_trailers(message)["Latest"])
    new = _NEXT
    if b"pending-writes" in tree:
        del tree[b"pending-writes"]
    return tree, checkpoint_message(checkpoint_head(new, head, "loop", 2, None),
                                    max(new, head), [])


def _pickle(repo: Repo, tree: Tree, message: bytes) -> tuple[Tree, bytes]:
    _blob(repo, tree, b"channel.order", b"pickle\0\x80\x04K\x01.")
    return _fresh(tree, message)


def _secret(repo: Repo, tree: Tree, message: bytes) -> tuple[Tree, bytes]:
    _blob(repo, tree, b"channel.note", b"json\0\"ghp_" + b"a1B2c3D4" * 5 + b"\"")
    return _fresh(tree, message)


def _stray(repo: Repo, tree: Tree, message: bytes) -> tuple[Tree, bytes]:
    _blob(repo, tree, b"run.sh", b"#!/bin/sh\n")
    return _fresh(tree, message)


def _latest(repo: Repo, tree: Tree, message: bytes) -> tuple[Tree, bytes]:
    """A next checkpoint claiming an older id as the newest (Gitstate-Latest)."""
    tree, fresh = _fresh(tree, message)
    return tree, fresh.replace(b'Latest: "' + _NEXT[:8].encode(), b'Latest: "0' + _NEXT[1:8].encode())


# A msgpack extension LangGraph's default decoder turns into os.system("true") (harmless
# here, but any command): refused on arrival, never decoded.
_CALL = b"\xc7\x11\x01\x93\xa2os\xa6system\x91\xa4true"


def _msgpack_call(repo: Repo, tree: Tree, message: bytes) -> tuple[Tree, bytes]:
    _blob(repo, tree, b"channel.order", b"msgpack\0" + _CALL)
    return _fresh(tree, message)


def _pending_call(repo: Repo, tree: Tree, message: bytes) -> tuple[Tree, bytes]:
    """A next checkpoint whose pending write holds the call."""
    from gitstate.threads import journal as lgjournal
    from gitstate.threads.format import checkpoint_head, checkpoint_message, parse_trailers

    tree, _ = _fresh(tree, message)
    head = json.loads(parse_trailers(message)["Latest"])
    new = _NEXT
    write = lgjournal.Write(new, "", "task-1", "~__pregel_pull, n", "order", 0, "msgpack",
                            _CALL)
    _blob(repo, tree, b"pending-writes", lgjournal.encode([write]))
    return tree, checkpoint_message(checkpoint_head(new, head, "loop", 2, None),
                                    max(new, head), [new])


def _smuggled(repo: Repo, tree: Tree, message: bytes) -> tuple[Tree, bytes]:
    """A summary whose U+001C (a line break to str.splitlines) starts a Prune-Keep
    trailer: a reader splitting there would rewind the thread."""
    from gitstate.threads.format import parse_trailers

    first = json.loads(parse_trailers(message)["Latest"])
    tree, fresh = _fresh(tree, message)
    summary, _, rest = fresh.partition(b"\n")
    smuggled = f'\x1cGitstate-Prune-Keep: ["{first}"]\x1c'.encode()
    return tree, summary[:-1] + smuggled + b")\n" + rest


def _fanout(repo: Repo, tree: Tree, message: bytes) -> tuple[Tree, bytes]:
    """One 9 MiB blob named by 15 channels: a tiny pack that inflates to 135 MiB."""
    blob = Blob.from_string(b"json\0[" + b" " * (9 << 20) + b"]")
    repo.object_store.add_object(blob)
    for i in range(15):
        tree.add(f"channel.c{i:02d}".encode(), 0o100644, blob.id)
    return _fresh(tree, message)


def _honest(repo: Repo, tree: Tree, message: bytes) -> tuple[Tree, bytes]:
    """The control: a next checkpoint as the saver writes it passes."""
    return _fresh(tree, message)


@pytest.mark.parametrize("forgery,rule", [(_rewrite_log,
                                           "thread.id_reused|thread.rederive"),
                                          (_pickle, "thread.value"),
                                          (_secret, "secret."),
                                          (_stray, "tree.unknown_name"),
                                          (_latest, "thread.rederive"),
                                          (_msgpack_call, "thread.unsafe_value"),
                                          (_pending_call, "thread.unsafe_value"),
                                          (_smuggled, "commit.line_break"),
                                          (_fanout, "tree.total_too_large")])
def test_a_forged_thread_commit_is_refused_on_pull_and_by_the_hook(
        tmp_path: Path, forgery: Callable[[Repo, Tree, bytes], tuple[Tree, bytes]],
        rule: str) -> None:
    bare, _a = _interrupted(tmp_path)
    b = tmp_path / "b"
    StateRepo.clone(str(bare), b).close()
    guarded = tmp_path / "srv" / "guarded.git"
    subprocess.run([GIT or "git", "clone", "-q", "--bare", str(bare), str(guarded)],
                   check=True)
    install_pre_receive(guarded, tmp_path)
    honest = git(bare, "rev-parse", REF).stdout.strip()
    sent = subprocess.run([GIT or "git", "-C", str(bare), "push", str(guarded),
                           f"{REF}:{REF}"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert sent.returncode == 0, sent.stderr  # the honest thread passes the hook
    forged = _forge(bare, forgery)
    with StateRepo(b) as repo, pytest.raises(Refused) as refused:
        repo.remote.pull_threads([THREAD])
    assert refused.value.rule == "remote.thread_invalid"
    # (a head of pending writes, when LangGraph handed them over after the checkpoint, is
    # refused as a pending-writes commit that changes more than its writes)
    rules = rule.split("|")
    assert any(r in refused.value.message for r in rules), refused.value.message
    assert forged[:12] in refused.value.message
    assert git(b / "state", "for-each-ref", "refs/gitstate/threads/").stdout == ""
    assert git(b / "state", "cat-file", "-e", forged).returncode != 0  # nothing taken
    pushed = subprocess.run([GIT or "git", "-C", str(bare), "push", str(guarded),
                             f"{REF}:{REF}"], capture_output=True, text=True, timeout=120,
                            check=False)
    assert pushed.returncode != 0 and any(r in pushed.stderr for r in rules), pushed.stderr
    assert git(guarded, "rev-parse", REF).stdout.strip() == honest


def test_a_commit_made_elsewhere_as_the_saver_makes_it_is_taken(tmp_path: Path) -> None:
    bare, _a = _interrupted(tmp_path)
    b = tmp_path / "b"
    StateRepo.clone(str(bare), b).close()
    made = _forge(bare, _honest)
    with StateRepo(b) as repo:
        assert repo.remote.pull_threads([THREAD])["pulled"] == [THREAD]
    assert git(b / "state", "rev-parse", REF).stdout.strip() == made


def test_the_hook_refuses_deleting_or_rewriting_a_thread(tmp_path: Path) -> None:
    bare, _a = _interrupted(tmp_path)
    guarded = tmp_path / "srv" / "guarded.git"
    subprocess.run([GIT or "git", "clone", "-q", "--bare", str(bare), str(guarded)],
                   check=True)
    install_pre_receive(guarded, tmp_path)
    sent = subprocess.run([GIT or "git", "-C", str(bare), "push", str(guarded),
                           f"{REF}:{REF}"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert sent.returncode == 0, sent.stderr
    deleted = subprocess.run([GIT or "git", "-C", str(bare), "push", str(guarded),
                              f":{REF}"], capture_output=True, text=True, timeout=120,
                             check=False)
    assert deleted.returncode != 0 and "history is kept" in deleted.stderr
    first = git(bare, "rev-list", "--reverse", REF).stdout.split()[0]
    rewound = subprocess.run([GIT or "git", "-C", str(bare), "push", "--force",
                              str(guarded), f"{first}:{REF}"], capture_output=True,
                             text=True, timeout=120, check=False)
    assert rewound.returncode != 0 and "history.not_descendant" in rewound.stderr


@pytest.mark.parametrize("name,rule", [("x%1B%5B31mRED%1B%5B0m", "thread.id_text"),
                                       ("a%E2%80%AEgpj", "thread.id_text"),
                                       ("ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5",
                                        "secret.")])
def test_a_thread_id_in_a_ref_name_is_checked_as_the_saver_checks_one(
        tmp_path: Path, name: str, rule: str) -> None:
    """A thread pushed under an id the saver would refuse (a control or bidi character, a
    token) is refused by the hook and on pull, as a local put of that id is."""
    bare, _a = _interrupted(tmp_path)
    b = tmp_path / "b"
    StateRepo.clone(str(bare), b).close()
    guarded = tmp_path / "srv" / "guarded.git"
    subprocess.run([GIT or "git", "init", "-q", "--bare", str(guarded)], check=True)
    install_pre_receive(guarded, tmp_path)
    head = git(bare, "rev-parse", REF).stdout.strip()
    odd = f"refs/gitstate/threads/{name}/%/checkpoints"
    pushed = subprocess.run([GIT or "git", "-C", str(bare), "push", str(guarded),
                             f"{head}:{odd}"], capture_output=True, text=True, timeout=120,
                            check=False)
    assert pushed.returncode != 0 and rule in pushed.stderr, pushed.stderr
    git(bare, "update-ref", odd, head)
    with StateRepo(b) as repo, pytest.raises(Refused) as refused:
        repo.remote.pull_threads(True)
    assert refused.value.rule == "remote.thread_invalid" and rule in refused.value.message
    assert git(b / "state", "for-each-ref", "refs/gitstate/threads/").stdout == ""
    hook = "".join(line for line in pushed.stderr.splitlines(True)
                   if line.startswith("remote:"))  # not git's own report of the push
    shown = f"{hook}{refused.value.message}{refused.value.details}"
    assert name not in shown and "\x1b" not in shown  # the name is withheld, not echoed


def test_the_saver_escapes_line_breaks_in_a_summary(tmp_path: Path) -> None:
    """No character a reader could split a line at reaches a message the saver builds."""
    from gitstate.threads.format import LINE_BREAKS, checkpoint_head, checkpoint_message

    source = "loop" + "".join(sorted(LINE_BREAKS)) + "Gitstate-Prune-Keep: []"
    message = checkpoint_message(checkpoint_head("c1", None, source, 1, None), "c1", [])
    text = message.decode()
    assert not set(text) & LINE_BREAKS
    assert [line.split(": ")[0] for line in text.split("\n")[2:-1]] == [
        "Gitstate-Checkpoint", "Gitstate-Parent-Checkpoint", "Gitstate-Source",
        "Gitstate-Step", "Gitstate-Latest", "Gitstate-Writes-For", "Gitstate-Layout"]


def test_show_thread_constructs_nothing_from_a_thread_placed_behind_the_rule(
        tmp_path: Path) -> None:
    """A thread written into a clone by plain git (no pull, no hook): ``show --thread``
    decodes with LangGraph's strict serde, so the call in a channel value is not made."""
    import ormsgpack

    from tests.helpers import run_cli

    _unused, a = _interrupted(tmp_path)
    marker = tmp_path / "ran"
    call = ormsgpack.packb(ormsgpack.Ext(1, ormsgpack.packb(
        ["os", "system", [f"touch {marker}"]])))

    def plant(repo: Repo, tree: Tree, message: bytes) -> tuple[Tree, bytes]:
        _blob(repo, tree, b"channel.order", b"msgpack\0" + call)
        return _fresh(tree, message)

    _forge(a / "state", plant)
    shown = run_cli("show", "--thread", THREAD, agent_dir=a)
    assert not marker.exists()
    assert shown.returncode == 0, shown.stderr


LOOK_ALIKES = [  # beside THREAD ("refund O-104"): each a put refuses, with its rule
    ("refund O-1O4", "thread.confusable"),  # a letter O for the digit 0
    ("r\u0435fund O-104", "thread.confusable"),  # a Cyrillic e
    ("refund\u00a0O-104", "thread.confusable"),  # a no-break space (NFKC: a space)
    ("\uff52efund O-104", "thread.confusable"),  # a full-width r
    ("Refund O-104", "thread.case"),
    ("refund O-1\u033604", "thread.id_text"),  # a stroke drawn over the 0
    ("refund\u200b O-104", "thread.id_text"),  # a zero-width space
]


@pytest.mark.parametrize("name,rule", LOOK_ALIKES)
def test_a_thread_id_that_looks_like_another_is_refused_at_put(
        tmp_path: Path, name: str, rule: str) -> None:
    """A new thread whose id reads as an existing one's (look-alike letters, case, a mark
    over a digit, an invisible character) is refused at its first put, by the key rules'
    look-alike check and the text rule of values; nothing is written (git for-each-ref)."""
    agent = tmp_path / "agent"
    with GitCheckpointSaver(agent) as saver:
        build(saver).invoke({"order": "O-104", "log": []}, CONF)
        before = git(agent / "state", "for-each-ref", "refs/gitstate/threads/").stdout
        with pytest.raises(InvalidInput) as refused:
            build(saver).invoke({"order": "O-104", "log": []},
                                {"configurable": {"thread_id": name}})
        assert refused.value.rule == rule, refused.value.message
        with pytest.raises(InvalidInput):
            saver.copy_thread(THREAD, name)
        assert git(agent / "state", "for-each-ref", "refs/gitstate/threads/").stdout == before
        build(saver).invoke({"order": "O-104", "log": []},  # its own id, a new namespace
                            {"configurable": {"thread_id": THREAD, "checkpoint_ns": "sub"}})
        build(saver).invoke({"order": "O-105", "log": []},
                            {"configurable": {"thread_id": "refund O-105"}})


@pytest.mark.parametrize("name", ["r\u0435fund O-104", "refund O-1O4"])
def test_a_thread_arriving_under_a_look_alike_id_is_refused(tmp_path: Path,
                                                            name: str) -> None:
    """On pull and in the server's hook a thread new to the repository is checked as a
    put of its id is: one that looks like a thread the repository has is refused, and
    nothing of it is taken."""
    bare, _a = _interrupted(tmp_path)
    b = tmp_path / "b"
    StateRepo.clone(str(bare), b).close()
    with StateRepo(b) as repo:
        assert repo.remote.pull_threads([THREAD])["pulled"] == [THREAD]
    guarded = tmp_path / "srv" / "guarded.git"
    subprocess.run([GIT or "git", "init", "-q", "--bare", str(guarded)], check=True)
    install_pre_receive(guarded, tmp_path)
    head = git(bare, "rev-parse", REF).stdout.strip()
    sent = subprocess.run([GIT or "git", "-C", str(bare), "push", str(guarded),
                           f"{head}:{REF}"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert sent.returncode == 0, sent.stderr
    odd = f"refs/gitstate/threads/{enc(name)}/%/checkpoints"
    pushed = subprocess.run([GIT or "git", "-C", str(bare), "push", str(guarded),
                             f"{head}:{odd}"], capture_output=True, text=True, timeout=120,
                            check=False)
    assert pushed.returncode != 0 and "thread.confusable" in pushed.stderr, pushed.stderr
    assert git(guarded, "for-each-ref", "--format=%(refname)").stdout.split() == [REF]
    git(bare, "update-ref", odd, head)
    with StateRepo(b) as repo, pytest.raises(Refused) as refused:
        repo.remote.pull_threads(True)
    assert refused.value.rule == "remote.thread_invalid"
    assert "thread.confusable" in refused.value.message
    assert git(b / "state", "for-each-ref", "--format=%(refname)",
               "refs/gitstate/threads/").stdout.split() == [REF]


def _plain_git_fetch(source: Path, agent: Path) -> None:
    """The thread refs of ``source`` fetched into ``agent`` by plain git: no gitstate pull,
    no rule of foreign commits on the way in."""
    out = git(agent / "state", "fetch", "-q", str(source),
              "+refs/gitstate/threads/*:refs/gitstate/threads/*")
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("where", ["channel", "pending write"])
def test_a_thread_fetched_by_plain_git_is_decoded_with_the_strict_serde(
        tmp_path: Path, where: str) -> None:
    """A thread whose commits arrived by plain `git fetch` (not gitstate's pull and its
    re-derivation) is checked by the rule of foreign commits when the saver first reads
    it; one that fails is read with LangGraph's strict serde, whatever serde the saver was
    given: a channel value or a pending write that the default serde would turn into
    os.system(...) runs nothing, through get_tuple, list and a resumed graph."""
    import ormsgpack

    from gitstate.threads import journal as lgjournal
    from gitstate.threads.format import parse_trailers

    bare, _a = _interrupted(tmp_path)
    marker = tmp_path / "ran"
    call = ormsgpack.packb(ormsgpack.Ext(1, ormsgpack.packb(
        ["os", "system", [f"touch {marker}"]])))

    def plant(repo: Repo, tree: Tree, message: bytes) -> tuple[Tree, bytes]:
        if where == "channel":
            _blob(repo, tree, b"channel.order", b"msgpack\0" + call)
            return _fresh(tree, message)
        head = json.loads(parse_trailers(message)["Checkpoint"])
        write = lgjournal.Write(head, "", "task-1", "~__pregel_pull, n", "order", 0,
                                "msgpack", call)
        _blob(repo, tree, b"pending-writes", lgjournal.encode([write]))
        from gitstate.threads.format import writes_message
        return tree, writes_message([head], head)

    _forge(bare, plant)
    b = tmp_path / "b"
    StateRepo.clone(str(bare), b).close()
    _plain_git_fetch(bare, b)
    with GitCheckpointSaver(b) as saver:  # LangGraph's default serde
        latest = saver.get_tuple(CONF)
        assert latest is not None
        assert [t.config for t in saver.list(CONF)]
        out = build(saver).invoke(Command(resume="approve"), CONF)
        assert "human: approve" in out["log"]
    assert not marker.exists()


def test_an_honest_thread_fetched_by_plain_git_is_checked_once_and_resumes(
        tmp_path: Path) -> None:
    """An honest thread fetched by plain git passes the rule at its first read: it is then
    decoded with the saver's serde and resumes; the check is recorded in the checkpoint
    index (no second check), and the saver's own commits on it stay checked."""
    bare, _a = _interrupted(tmp_path)
    b = tmp_path / "b"
    StateRepo.clone(str(bare), b).close()
    _plain_git_fetch(bare, b)
    with GitCheckpointSaver(b) as saver:
        head = saver.store.ref(REF)
        assert head is not None
        assert saver._entries(THREAD, "", head).trusted
        out = build(saver).invoke(Command(resume="approve"), CONF)
        assert out["log"] == ["looked up", "human: approve", "paid"]
        new = saver.store.ref(REF)
        assert new != head and saver._entries(THREAD, "", str(new)).trusted
    line = (b / "state" / ".git" / "gitstate-threads.idx").read_text().splitlines()
    assert any(json.loads(x).get("checked") == head for x in line)


def test_a_thread_of_the_saver_s_own_is_checked_again_when_its_index_is_lost(
        tmp_path: Path) -> None:
    """The index is the record of what passed: without it every thread is checked again
    (the saver's own pass), so a deleted index never lets an unchecked head through."""
    agent = tmp_path / "a"
    with GitCheckpointSaver(agent) as saver:
        build(saver).invoke({"order": "O-104", "log": []}, CONF)
    (agent / "state" / ".git" / "gitstate-threads.idx").unlink()
    with GitCheckpointSaver(agent) as saver:
        head = saver.store.ref(REF)
        assert head is not None and saver._entries(THREAD, "", head).trusted
        out = build(saver).invoke(Command(resume="deny"), CONF)
        assert out["log"] == ["looked up", "human: deny", "not paid"]


def test_two_look_alike_threads_in_one_push_are_refused_by_the_hook(tmp_path: Path) -> None:
    """The hook checks each new thread against the server's threads and against the other
    threads the same push creates: two look-alike ids pushed together to a server that has
    neither are refused (as a pull taking both refuses), nothing lands; one alone lands."""
    bare, _a = _interrupted(tmp_path)
    guarded = tmp_path / "srv" / "guarded.git"
    subprocess.run([GIT or "git", "init", "-q", "--bare", str(guarded)], check=True)
    install_pre_receive(guarded, tmp_path)
    head = git(bare, "rev-parse", REF).stdout.strip()
    odd = f"refs/gitstate/threads/{enc('r' + chr(0x435) + 'fund O-104')}/%/checkpoints"
    git(bare, "update-ref", odd, head)
    both = subprocess.run([GIT or "git", "-C", str(bare), "push", str(guarded),
                           f"{REF}:{REF}", f"{odd}:{odd}"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert both.returncode != 0 and "thread.confusable" in both.stderr, both.stderr
    assert git(guarded, "for-each-ref", "--format=%(refname)").stdout.split() == []
    one = subprocess.run([GIT or "git", "-C", str(bare), "push", str(guarded),
                          f"{REF}:{REF}"], capture_output=True, text=True, timeout=120,
                         check=False)
    assert one.returncode == 0, one.stderr
    assert git(guarded, "for-each-ref", "--format=%(refname)").stdout.split() == [REF]
