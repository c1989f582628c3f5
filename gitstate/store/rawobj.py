"""Raw trees and commits from elsewhere, parsed by git fsck's rules before anyone reads them.

dulwich parses a tree into a dict, so of two entries with the same name the last one wins,
while git, cgit and every forge show the first: a tree holding ``working_state.json`` twice
gives the auditor one state and the agent another. Foreign trees are therefore read from
their raw bytes here and refused, naming the rule, when git fsck would flag them: an entry
cut short, a mode that is not one of git's (or is zero-padded), an empty name, a name holding
``/``, ``.``, ``..`` or ``.git`` (in any case, or spelt so that NTFS or HFS+ read it as
``.git``), entries out of git's order, duplicate names, a null object id. Commits likewise:
``tree`` first, then the parents, then exactly one ``author`` and one ``committer`` with
well-formed identities, no second ``tree``, and an ``encoding`` header, if any, that says
UTF-8 (git shows a message in another encoding transcoded; gitstate would show the bytes).

Pure: bytes in, entries or a :class:`~gitstate.core.errors.StoreError` out.
"""

from __future__ import annotations

import re
import unicodedata

from ..core.errors import StoreError

DIR_MODE = 0o040000
MODES = frozenset({0o100644, 0o100755, 0o120000, DIR_MODE, 0o160000})
# the characters HFS+ ignores in a name (git's is_hfs_dotgit)
_HFS_IGNORED = frozenset("\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                         "\u206a\u206b\u206c\u206d\u206e\u206f\ufeff")
_IDENT = re.compile(rb"[^<>\n]*<[^<>\n]*> [0-9]{1,20} [+-][0-9]{4}")
_HEX = re.compile(rb"[0-9a-f]{40}|[0-9a-f]{64}")


def _refuse(rule: str, message: str) -> StoreError:
    return StoreError(message, rule=rule)


def _dotgit(name: bytes) -> bool:
    """Whether git, NTFS or HFS+ would take ``name`` for ``.git``."""
    text = name.decode("utf-8", "replace")
    if text.lower() == ".git":
        return True
    stripped = text.rstrip(". ").lower()  # NTFS drops trailing dots and spaces
    if stripped in (".git", "git~1") or stripped.startswith((".git:", "git~1:")):
        return True
    folded = "".join(c for c in unicodedata.normalize("NFC", text) if c not in _HFS_IGNORED)
    return folded.lower() == ".git"


def tree_entries(raw: bytes, oid_length: int = 20) -> list[tuple[bytes, int, str]]:
    """A raw tree's (name, mode, object id) entries, in order; StoreError (rule
    ``tree.*``) when git fsck would refuse the tree."""
    out: list[tuple[bytes, int, str]] = []
    seen: set[bytes] = set()
    previous: bytes | None = None
    at = 0
    while at < len(raw):
        space = raw.find(b" ", at, at + 8)
        nul = raw.find(b"\0", space + 1) if space > at else -1
        if space <= at or nul < 0 or nul + 1 + oid_length > len(raw):
            raise _refuse("tree.bad_tree", f"tree entry {len(out) + 1} is cut short or "
                          "malformed")
        mode_text, name = raw[at:space], raw[space + 1:nul]
        oid = raw[nul + 1:nul + 1 + oid_length]
        at = nul + 1 + oid_length
        if not mode_text.isdigit() or mode_text.strip(b"01234567"):
            raise _refuse("tree.bad_mode", f"entry {name[:60]!r} has mode {mode_text!r}, "
                          "which is not an octal number")
        if mode_text.startswith(b"0"):
            raise _refuse("tree.zero_padded_mode", f"entry {name[:60]!r} has the "
                          f"zero-padded mode {mode_text.decode()}: git writes none")
        mode = int(mode_text, 8)
        if mode not in MODES:
            raise _refuse("tree.bad_mode", f"entry {name[:60]!r} has mode {mode:o}, which "
                          "is not one of git's (100644, 100755, 120000, 40000, 160000)")
        if not name:
            raise _refuse("tree.bad_name", "an entry has an empty name")
        if b"/" in name:
            raise _refuse("tree.bad_name", f"entry {name[:60]!r} holds '/': a tree entry is "
                          "one path component")
        if name in (b".", b".."):
            raise _refuse("tree.bad_name", f"an entry is named {name.decode()!r}")
        if _dotgit(name):
            raise _refuse("tree.bad_name", f"entry {name[:60]!r} would be read as .git")
        if oid == b"\0" * oid_length:
            raise _refuse("tree.null_sha", f"entry {name[:60]!r} names the null object id")
        if name in seen:
            raise _refuse("tree.duplicate_entries", f"the tree holds {name[:60]!r} twice: "
                          "git shows the first entry, a dict-based reader the last")
        key = name + b"/" if mode == DIR_MODE else name
        if previous is not None and key <= previous:
            raise _refuse("tree.not_sorted", f"entry {name[:60]!r} is out of git's order")
        seen.add(name)
        previous = key
        out.append((name, mode, oid.hex()))
    return out


def check_commit(raw: bytes) -> None:
    """Refuse (StoreError, rule ``commit.*``) a raw commit git fsck would refuse, or one
    whose ``encoding`` header is not UTF-8."""
    head, sep, _message = raw.partition(b"\n\n")
    if not sep:
        raise _refuse("commit.bad_header", "the commit has no blank line before its message")
    lines = head.split(b"\n")
    order: list[bytes] = []
    for line in lines:
        if line.startswith(b" "):
            if not order:
                raise _refuse("commit.bad_header", "the commit starts with a continuation")
            continue  # a multi-line header's continuation (gpgsig, mergetag)
        name, space, value = line.partition(b" ")
        if not space:
            raise _refuse("commit.bad_header", f"header line {line[:60]!r} has no value")
        order.append(name)
        if name in (b"tree", b"parent") and not _HEX.fullmatch(value):
            raise _refuse("commit.bad_header", f"the {name.decode()} header is not an "
                          "object id")
        if name in (b"author", b"committer") and not _IDENT.fullmatch(value):
            raise _refuse("commit.bad_header", f"the {name.decode()} header is not "
                          "'name <email> time zone'")
        if name == b"encoding" and value.lower() not in (b"utf-8", b"utf8"):
            raise _refuse("commit.encoding", f"the commit declares encoding "
                          f"{value[:40].decode('ascii', 'replace')!r}: gitstate commits "
                          "carry UTF-8 only, so that git and gitstate show the same text")
    parents = 0
    while 1 + parents < len(order) and order[1 + parents] == b"parent":
        parents += 1
    if order[:1] != [b"tree"] or order[1 + parents:3 + parents] != [b"author", b"committer"]:
        raise _refuse("commit.bad_header", "the commit's headers are not tree, parents, "
                      "author, committer in that order")
    rest = order[3 + parents:]
    if any(name in (b"tree", b"parent", b"author", b"committer") for name in rest) or \
            rest.count(b"encoding") > 1:
        raise _refuse("commit.bad_header", "the commit repeats a tree, parent, author, "
                      "committer or encoding header")
