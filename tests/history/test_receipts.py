"""Wake-up receipts: each hook records what it delivered; `render --receipt` reproduces the
exact bytes later, whatever happened since; rotation, planted files and junk lines."""

from __future__ import annotations

import json
import os
from pathlib import Path

from gitstate.api.repo import StateRepo
from gitstate.history import receipts
from tests.helpers import run_cli


def _hook(agent: Path, *args: str, env: dict[str, str] | None = None) -> str:
    out = run_cli("hook", *args, agent_dir=agent, env=env, process=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _latest(agent: Path) -> dict[str, object]:
    listed = json.loads(run_cli("receipts", "--json", "-n", "1", agent_dir=agent).stdout)
    [rec] = listed["receipts"]
    return dict(rec)


def _again(agent: Path, rid: object) -> str:
    out = run_cli("render", "--receipt", str(rid), agent_dir=agent, process=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_receipt_reproduces_the_bytes_a_wake_up_received(repo: StateRepo) -> None:
    agent = repo.agent_dir
    repo.set("stop_loss.2317", 262, "break below, exit", ttl_hours=1)
    repo.handoff("watch 2317 at the open " * 40, reason="long note")
    delivered = _hook(agent, "claude-code", "--event", "SessionStart")
    rec = _latest(agent)
    assert rec["head"] == repo.head() and rec["runtime"] == "claude-code"
    assert rec["event"] == "SessionStart" and rec["bytes"] == len(delivered.encode())
    assert rec["sha256"] == receipts.digest(delivered.encode())
    # history moves on and the key expires: the receipt still names what was seen
    repo.set("stop_loss.2317", 254, "changed later")
    assert _again(agent, rec["id"]) == delivered
    # a gateway's budget that leaves the handoff out, and a run's block
    repo.runs.start("r1", description="refund O-104", criteria=["refund issued"],
                    reason="go")
    small = _hook(agent, "plain", "--max-chars", "1000", "--locale", "en",
                  env={"GITSTATE_RUN": "r1"})
    rec = _latest(agent)
    assert "</state>" in small and rec["run_id"] == "r1" and rec["max_chars"] is not None
    repo.runs.event("r1", {"type": "cancelled", "reason": "x"}, "later")
    assert _again(agent, rec["id"]) == small


def test_a_receipt_that_no_longer_matches_is_refused(repo: StateRepo) -> None:
    repo.set("k", 1, "rule")
    _hook(repo.agent_dir, "plain")
    path = repo.state_dir / ".git" / receipts.FILE
    rec = json.loads(path.read_text().splitlines()[-1])
    rec["sha256"] = "0" * 64
    path.write_text(json.dumps(rec) + "\n")
    out = run_cli("render", "--receipt", rec["id"], agent_dir=repo.agent_dir)
    assert out.returncode == 1 and "[receipt.mismatch]" in out.stderr and out.stdout == ""
    unknown = run_cli("render", "--receipt", "nope", agent_dir=repo.agent_dir)
    assert unknown.returncode == 1 and "[receipt.unknown]" in unknown.stderr


def test_rotation_junk_and_filters(repo: StateRepo) -> None:
    repo.set("k", 1, "rule")
    path = repo.state_dir / ".git" / receipts.FILE
    path.write_bytes(b"not json\n" + b"x" * (receipts.MAX_BYTES + 10) + b"\n{}\n")
    _hook(repo.agent_dir, "plain")
    assert (path.parent / (receipts.FILE + ".1")).exists()
    assert len(path.read_text().splitlines()) == 1
    _hook(repo.agent_dir, "plain")
    listed = json.loads(run_cli("receipts", "--json", agent_dir=repo.agent_dir).stdout)
    assert len(listed["receipts"]) == 2  # the junk lines are skipped
    later = json.loads(run_cli("receipts", "--json", "--since", "2999-01-01T00:00:00Z",
                               agent_dir=repo.agent_dir).stdout)
    assert later["receipts"] == []
    text = run_cli("receipts", agent_dir=repo.agent_dir).stdout
    assert len(text.splitlines()) == 2 and "plain" in text


def test_a_planted_symlink_is_never_followed(repo: StateRepo, tmp_path: Path) -> None:
    repo.set("k", 1, "rule")
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me\n")
    os.symlink(outside, repo.state_dir / ".git" / receipts.FILE)
    delivered = _hook(repo.agent_dir, "plain")
    assert "k = 1" in delivered  # the wake-up still gets its section
    assert outside.read_text() == "keep me\n"
    path = repo.state_dir / ".git" / receipts.FILE
    assert not path.is_symlink() and path.is_file()  # the link replaced by a file of its own
    fifo = repo.state_dir / ".git" / (receipts.FILE + ".1")
    os.mkfifo(fifo)
    listed = run_cli("receipts", "--json", agent_dir=repo.agent_dir)
    assert listed.returncode == 0  # the FIFO is never read, the repaired file is
    assert [r["runtime"] for r in json.loads(listed.stdout)["receipts"]] == ["plain"]
