"""Raw trees and commits by git fsck's rules (gitstate/store/rawobj.py), and ref names by
git check-ref-format's (gitstate/core/layout.py), each checked against the git CLI itself."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitstate.core import layout
from gitstate.core.errors import StoreError
from gitstate.store.rawobj import check_commit, tree_entries
from tests.helpers import GIT

pytestmark = pytest.mark.skipif(GIT is None, reason="needs the git CLI as the checker")
OID = bytes.fromhex("e69de29bb2d1d6434b8b29ae775ad8c2e48c5391")  # the empty blob
TREE = bytes.fromhex("4b825dc642cb6eb9a060e54bf8d69288fbee4904")  # the empty tree


def _entry(mode: bytes, name: bytes, oid: bytes = OID) -> bytes:
    return mode + b" " + name + b"\0" + oid


BAD_TREES = {
    "duplicate": (_entry(b"100644", b"working_state.json") * 2, "tree.duplicate_entries",
                  "duplicateEntries"),
    "file-and-dir-same-name": (_entry(b"100644", b"a") + _entry(b"40000", b"a", TREE),
                               "tree.duplicate_entries", "duplicateEntries"),
    "unsorted": (_entry(b"100644", b"b") + _entry(b"100644", b"a"), "tree.not_sorted",
                 "treeNotSorted"),
    "zero-padded": (_entry(b"040000", b"d", TREE), "tree.zero_padded_mode",
                    "zeroPaddedFilemode"),
    "group-writable": (_entry(b"100664", b"a"), "tree.bad_mode", "badFilemode"),
    "empty-name": (_entry(b"100644", b""), "tree.bad_name", "empty filename"),
    "dotdot": (_entry(b"100644", b".."), "tree.bad_name", "hasDotdot"),
    "dot-git": (_entry(b"40000", b".GIT", TREE), "tree.bad_name", "hasDotgit"),
    "ntfs-dot-git": (_entry(b"40000", b"git~1", TREE), "tree.bad_name", "hasDotgit"),
    "hfs-dot-git": (_entry(b"40000", ".g\u200cit".encode(), TREE), "tree.bad_name",
                    "hasDotgit"),
    "cut-short": (_entry(b"100644", b"a")[:-3], "tree.bad_tree", "badTree"),
}


def _fsck_says(tmp_path: Path, kind: str, raw: bytes) -> str:
    """What `git fsck --strict` reports for the object ``raw`` written with --literally."""
    repo = tmp_path / "r.git"
    if not repo.exists():
        subprocess.run([GIT or "git", "init", "-q", "--bare", str(repo)], check=True)
    subprocess.run([GIT or "git", "-C", str(repo), "hash-object", "-t", kind, "--literally",
                    "-w", "--stdin"], input=raw, capture_output=True, check=True)
    out = subprocess.run([GIT or "git", "-C", str(repo), "fsck", "--strict"],
                         capture_output=True, text=True, check=False)
    return out.stdout + out.stderr


@pytest.mark.parametrize("case", sorted(BAD_TREES))
def test_a_tree_git_fsck_refuses_is_refused(tmp_path: Path, case: str) -> None:
    """Each crafted tree is flagged by git fsck --strict and refused here, naming the rule."""
    raw, rule, fsck_id = BAD_TREES[case]
    if case != "cut-short":  # git hash-object refuses to write a tree cut short
        assert fsck_id in _fsck_says(tmp_path, "tree", raw)
    with pytest.raises(StoreError) as err:
        tree_entries(raw)
    assert err.value.rule == rule


_NAME = st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF,
                              exclude_characters="/"), min_size=1, max_size=12).filter(
    lambda n: n not in (".", "..") and n.lower().rstrip(". ") not in (".git", "git~1"))


@settings(max_examples=25, deadline=None)
@given(st.dictionaries(_NAME, st.booleans(), min_size=1, max_size=8))
def test_trees_git_writes_are_read_as_git_lists_them(tmp_path_factory: pytest.TempPathFactory,
                                                     names: dict[str, bool]) -> None:
    """A tree git mktree writes parses to exactly what git ls-tree lists, in its order."""
    repo = tmp_path_factory.mktemp("t") / "r.git"
    subprocess.run([GIT or "git", "init", "-q", "--bare", str(repo)], check=True)
    listing = "".join(f"{'040000 tree ' + TREE.hex() if is_dir else '100644 blob ' + OID.hex()}"
                      f"\t{name}\0" for name, is_dir in names.items())
    if any(is_dir for is_dir in names.values()):
        subprocess.run([GIT or "git", "-C", str(repo), "hash-object", "-t", "tree", "-w",
                        "--stdin"], input=b"", check=True, capture_output=True)
    subprocess.run([GIT or "git", "-C", str(repo), "hash-object", "-w", "--stdin"],
                   input=b"", check=True, capture_output=True)
    tree = subprocess.run([GIT or "git", "-C", str(repo), "mktree", "-z"], input=listing.encode(),
                          capture_output=True, check=True).stdout.decode().strip()
    raw = subprocess.run([GIT or "git", "-C", str(repo), "cat-file", "tree", tree],
                         capture_output=True, check=True).stdout
    listed = subprocess.run([GIT or "git", "-C", str(repo), "ls-tree", "-z", tree],
                            capture_output=True, check=True).stdout.split(b"\0")[:-1]
    expected = []
    for line in listed:
        meta, _, name = line.partition(b"\t")
        mode, _kind, oid = meta.split()
        expected.append((name, int(mode, 8), oid.decode()))
    assert tree_entries(raw) == expected


def _commit(headers: bytes, message: bytes = b"reason\n") -> bytes:
    return headers + b"\n" + message


GOOD_HEAD = (b"tree " + TREE.hex().encode() + b"\nauthor a <a@x> 1786000000 +0000\n"
             b"committer a <a@x> 1786000000 +0000\n")
BAD_COMMITS = {
    "latin-1": (GOOD_HEAD + b"encoding ISO-8859-1\n", "commit.encoding"),
    "two-trees": (b"tree " + TREE.hex().encode() + b"\n" + GOOD_HEAD, "commit.bad_header"),
    "no-author": (b"tree " + TREE.hex().encode() + b"\ncommitter a <a@x> 1 +0000\n",
                  "commit.bad_header"),
    "bad-ident": (GOOD_HEAD.replace(b"a <a@x> 1786000000", b"a a@x 1786000000"),
                  "commit.bad_header"),
    "parent-after-author": (GOOD_HEAD + b"parent " + b"1" * 40 + b"\n", "commit.bad_header"),
}


@pytest.mark.parametrize("case", sorted(BAD_COMMITS))
def test_a_commit_git_would_misread_is_refused(case: str) -> None:
    """Headers out of git's order, doubled, malformed, or an encoding other than UTF-8."""
    head, rule = BAD_COMMITS[case]
    with pytest.raises(StoreError) as err:
        check_commit(_commit(head))
    assert err.value.rule == rule


@pytest.mark.parametrize("encoding", [None, b"UTF-8", b"utf-8", b"utf8"])
def test_a_utf8_commit_passes(encoding: bytes | None) -> None:
    """No encoding header, or one that says UTF-8 in any spelling git accepts."""
    head = GOOD_HEAD + (b"encoding " + encoding + b"\n" if encoding else b"")
    check_commit(_commit(head, "réduire\n".encode()))


_REF_PART = st.text(st.characters(min_codepoint=32, max_codepoint=127), min_size=0,
                    max_size=10)


@settings(max_examples=150, deadline=None)
@given(st.lists(_REF_PART, min_size=1, max_size=4))
def test_ref_names_follow_git_check_ref_format(parts: list[str]) -> None:
    """layout's rules say what `git check-ref-format` says, for any name under refs/."""
    name = "refs/" + "/".join(parts)
    git = subprocess.run([GIT or "git", "check-ref-format", name], capture_output=True,
                         check=False).returncode == 0
    assert (layout.ref_format_problem(name) is None) == git, name


@pytest.mark.parametrize(("name", "namespace"), [
    ("refs/heads/main", "main"), ("refs/heads/runs/r-1.a_b", "runs"),
    ("refs/gitstate/refusals/0123456789abcdef", "journals"),
    ("refs/gitstate/threads/t1/%/checkpoints", "threads")])
def test_each_namespace_takes_its_own_names(name: str, namespace: str) -> None:
    """The names gitstate writes match their namespace's pattern."""
    assert layout.remote_namespace(name) == namespace
    assert layout.ref_name_problem(name) is None


def test_the_journal_pattern_is_what_origin_id_makes() -> None:
    """A journal's origin is 16 lowercase hex digits, as refusals.origin_id makes it."""
    made = hashlib.sha256(b"x").hexdigest()[:16]
    assert layout.ref_name_problem(layout.JOURNALS_PREFIX + made) is None
    assert layout.ref_name_problem(layout.JOURNALS_PREFIX + made.upper()) is not None
    assert layout.ref_name_problem(layout.JOURNALS_PREFIX + made[:15]) is not None
