"""A decision's cost with and without signing, and what checking its signature costs a
receiver: one human approval (request beforehand, not timed) on an agent without a signing
key, the same with an SSH key ([trust] signing_key: one ssh-keygen process per commit), and
the trust check of one signed decision as pull and the hook run it (find-principals and
verify: two ssh-keygen processes). Medians, side by side in one run.

    python bench/signing.py [--rounds N] [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from gitstate.accept.trust import Trust, claim_problem
from gitstate.api.repo import StateRepo

SCHEMA = "version: 1\nunknown_keys: allow\napprovals:\n  refund: {writers: [human]}\n"
ROOMY = "[gitstate]\nmax_keys = 256\nsection_max_bytes = 65536\ninjection_max_chars = 100000\n"


def decisions(agent: Path, key: Path | None, rounds: int) -> tuple[list[float], list[str]]:
    (agent / "config.toml").parent.mkdir(parents=True, exist_ok=True)
    (agent / "config.toml").write_text(ROOMY, encoding="utf-8")
    with StateRepo.init(agent) as runtime:
        runtime.set_schema(SCHEMA, "refunds are a human's")
    times, commits = [], []
    with StateRepo(agent) as runtime, \
            StateRepo(agent, writer="human", actor="alice", signing_key=key) as human:
        for n in range(rounds):
            approval = runtime.approvals.request("refund", {"round": n}, "bench")
            human.reader.head()  # the human's opening sees the request
            start = time.perf_counter()
            result = human.approvals.approve(approval, "checked")
            times.append((time.perf_counter() - start) * 1000)
            commits.append(result.commit)
    return times, commits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="5 rounds (the smoke test)")
    args = parser.parse_args()
    rounds = 5 if args.quick else args.rounds
    root = Path(tempfile.mkdtemp(prefix="gitstate-bench-signing-"))
    try:
        key = root / "human-alice"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "human:alice",
                        "-f", str(key)], check=True)
        allowed = root / "allowed_signers"
        allowed.write_text(f"human:alice {key.with_suffix('.pub').read_text()}")
        plain, _ = decisions(root / "plain", None, rounds)
        signed, commits = decisions(root / "signed", key, rounds)
        trust = Trust(str(allowed))
        checks = []
        with StateRepo(root / "signed") as repo:
            for commit in commits:
                start = time.perf_counter()
                assert claim_problem(repo.store, commit, ("human",), trust) is None
                checks.append((time.perf_counter() - start) * 1000)
        p, s, c = (statistics.median(x) for x in (plain, signed, checks))
        print(f"{'median of ' + str(rounds):<34}{'ms':>8}{'ratio':>8}")
        print(f"{'approve, unsigned':<34}{p:>8.2f}{1.0:>8.2f}")
        print(f"{'approve, signed (ssh-keygen)':<34}{s:>8.2f}{s / p:>8.2f}")
        print(f"{'check one signed claim (receiver)':<34}{c:>8.2f}{c / p:>8.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
