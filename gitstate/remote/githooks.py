"""Git hooks that ``gitstate init`` installs into the state repository.

gitstate writes commits through the object store, which runs no git hooks, so a pre-commit
hook that always refuses stops only commits made with the git CLI, which would bypass the
rules, the trailers and the audit trail. (``git commit --no-verify`` still gets through;
``gitstate verify`` then names the commit.) The same text is shipped as hooks/git/pre-commit.
"""

from __future__ import annotations

from pathlib import Path

from ..core.layout import PRE_COMMIT_HOOK
from ..system import safefile

PRE_COMMIT = """\
#!/bin/sh
# Installed by `gitstate init`. This repository is written only through gitstate, so that
# every change carries a reason and machine-readable trailers and passes the rules.
# gitstate's own commits do not run git hooks; this refuses commits made with the git CLI.
echo "gitstate: refusing a commit made outside gitstate." >&2
echo "  Change the state with: gitstate set | clear | handoff | revert," >&2
echo "  or commit a hand edit of working_state.json with: gitstate adopt --reason '...'" >&2
exit 1
"""


def install(git_dir: Path) -> Path:
    """Write the pre-commit hook (idempotent); returns its path."""
    path = git_dir / PRE_COMMIT_HOOK
    path.parent.mkdir(exist_ok=True)
    # a fresh file renamed over the name: a link planted there is replaced, never written
    # through or chmod'ed
    safefile.write_atomic(path, PRE_COMMIT.encode("utf-8"), 0o755)
    return path
