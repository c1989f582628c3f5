"""The facade's shape: capabilities are namespaces built on first use, an opening that only
reads builds none of them, and every method that moved into a namespace still answers
(with a DeprecationWarning naming its new place)."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from gitstate import StateRepo
from gitstate.api.approvals import Approvals
from gitstate.api.remote import RemoteSide
from gitstate.api.runs import Runs

ROOT = Path(__file__).resolve().parents[2]

SCHEMA = """version: 1
approvals:
  refund:
    writers: [human, runtime]
"""


def test_a_read_only_opening_builds_no_namespace_and_imports_none(tmp_path: Path) -> None:
    """In a fresh process: open, get, render, history and close import neither the
    approvals, the run ledgers, the remote side nor the thread sync (each its own module,
    loaded only by the namespace that needs it)."""
    StateRepo.init(tmp_path / "a").close()
    code = f"""
import sys
from gitstate import StateRepo
with StateRepo({str(tmp_path / "a")!r}) as repo:
    repo.get(); repo.render(); repo.history(); repo.state()
    print(sorted(name for name in ("approvals", "runs", "remote") if name in vars(repo)))
print(sorted(m for m in sys.modules if m.startswith(("gitstate.remote", "gitstate.runs",
    "gitstate.approvals", "gitstate.threads", "gitstate.accept", "gitstate.api.approvals",
    "gitstate.api.runs", "gitstate.api.remote"))))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    assert out.stdout.splitlines() == ["[]", "[]"], out.stdout


def test_namespaces_are_built_once_per_opening(tmp_path: Path) -> None:
    with StateRepo.init(tmp_path / "a") as repo:
        assert isinstance(repo.approvals, Approvals) and repo.approvals is repo.approvals
        assert isinstance(repo.runs, Runs) and repo.runs is repo.runs
        assert isinstance(repo.remote, RemoteSide) and repo.remote is repo.remote
        assert repo.remote.url() is None
        # one session id per opening: every run event of this opening names the same one
        assert repo.runs.session == repo.runs.session


def test_moved_methods_answer_with_a_warning_naming_the_namespace(tmp_path: Path) -> None:
    with StateRepo.init(tmp_path / "a") as repo:
        repo.set_schema(SCHEMA, "approvals for refunds")
        with pytest.warns(DeprecationWarning,
                          match=r"repo\.request_approval is deprecated: use "
                                r"repo\.approvals\.request"):
            request = repo.request_approval("refund", {"order": "O-1"}, "customer asked")
        with pytest.warns(DeprecationWarning, match=r"use repo\.approvals\.approve"):
            repo.approve(request, "looks right")
        with pytest.warns(DeprecationWarning, match=r"use repo\.approvals\.verdict"):
            assert repo.approval_verdict("refund", {"order": "O-1"}).ok
        with pytest.warns(DeprecationWarning, match=r"repo\.approvals\(\) is deprecated: "
                                                    r"use repo\.approvals\.list\(\)"):
            old = repo.approvals()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the new spellings never warn
            assert repo.approvals.list() == old and len(old) == 1
            with repo.approvals.spend(request, "refund", {"order": "O-1"}) as call:
                assert call.tool == "refund"
            assert repo.approvals.list()[0]["status"] == "consumed"
        for name, new in (("deny", "approvals.deny"), ("consume_approval", "approvals.consume"),
                          ("spend_approval", "approvals.spend"), ("promote", "runs.promote"),
                          ("push_threads", "remote.push_threads"),
                          ("pull_threads", "remote.pull_threads")):
            with pytest.warns(DeprecationWarning, match=rf"use repo\.{new}$"):
                bound = getattr(repo, name)
            owner, _, method = new.partition(".")
            assert bound == getattr(getattr(repo, owner), method), name
