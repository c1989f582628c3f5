"""The hostile-server fixtures themselves: what plain git sees from them (so that a test
using them tests gitstate, not a fixture that quietly behaves)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import GIT
from tests.hostile_git_server import HostileGitServer, advertised, smart_http

pytestmark = pytest.mark.skipif(GIT is None, reason="needs the git CLI")
FORGED = "refs/gitstate/refusals/../../heads/main"


@pytest.fixture
def bare(tmp_path: Path) -> tuple[Path, str]:
    """A bare repository under tmp/srv holding one commit on main."""
    work = tmp_path / "work"
    subprocess.run([GIT or "git", "init", "-q", "-b", "main", str(work)], check=True)
    subprocess.run([GIT or "git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-q", "--allow-empty", "-m", "one"], check=True)
    (tmp_path / "srv").mkdir()
    repo = tmp_path / "srv" / "r.git"
    subprocess.run([GIT or "git", "clone", "-q", "--bare", str(work), str(repo)], check=True)
    sha = subprocess.run([GIT or "git", "-C", str(repo), "rev-parse", "main"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return repo, sha


def test_git_sees_the_forged_names(bare: tuple[Path, str]) -> None:
    """A name added to the advertisement is what a client reads, over git:// and HTTP."""
    repo, sha = bare
    with HostileGitServer(repo, extra_refs={FORGED: sha}) as url:
        assert (sha, FORGED) in list(advertised(url))
        assert (sha, "refs/heads/main") in list(advertised(url))
    with smart_http(repo.parent, repo.name, advertise={FORGED: sha}) as url:
        assert (sha, FORGED) in list(advertised(url))


def test_a_forged_name_is_served(bare: tuple[Path, str], tmp_path: Path) -> None:
    """The object a forged name points at is sent like a real ref's."""
    repo, sha = bare
    target = tmp_path / "t.git"
    subprocess.run([GIT or "git", "init", "-q", "--bare", str(target)], check=True)
    with HostileGitServer(repo, extra_refs={"refs/gitstate/refusals/0123456789abcdef": sha},
                          edit=lambda refs: [r for r in refs if r[1] != b"refs/heads/main"]
                          ) as url:
        names = [n for _, n in advertised(url)]
        assert "refs/heads/main" not in names
        out = subprocess.run([GIT or "git", "-C", str(target), "fetch", "-q", url,
                              "refs/gitstate/refusals/0123456789abcdef:refs/x"],
                             capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("mode", ["refs", "pack"])
def test_a_stalled_server_hangs_plain_git(bare: tuple[Path, str], tmp_path: Path,
                                          mode: str) -> None:
    """Stalling before the refs or half-way through the pack leaves git waiting."""
    repo, _sha = bare
    kwargs: dict[str, Any] = {"stall_refs": True} if mode == "refs" else {"cut_pack_after": 40}
    with HostileGitServer(repo, **kwargs) as url, \
            pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([GIT or "git", "clone", "-q", "--bare", url, str(tmp_path / "c")],
                       capture_output=True, timeout=3, check=False)


def test_a_cut_pack_fails_plain_git(bare: tuple[Path, str], tmp_path: Path) -> None:
    """Hanging up half-way through the pack makes git's clone fail."""
    repo, _sha = bare
    with HostileGitServer(repo, cut_pack_after=40, cut="close") as url:
        out = subprocess.run([GIT or "git", "clone", "-q", "--bare", url, str(tmp_path / "c")],
                             capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode != 0


def test_a_stalled_http_server_hangs_plain_git(bare: tuple[Path, str]) -> None:
    """--stall: the request is accepted and never answered."""
    repo, _sha = bare
    with smart_http(repo.parent, repo.name, stall=True) as url, \
            pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([GIT or "git", "ls-remote", url], capture_output=True, timeout=3,
                       check=False)
