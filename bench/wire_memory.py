"""Peak memory and time of a pull, each in a fresh process, through a loopback git:// server
(tests/hostile_git_server.py: the real upload-pack, or a crafted pack):

* the baseline: a pull with nothing new (what the pulling process weighs anyway);
* an honest pull of N new commits: gitstate's receiving (pack to a file, checked from its
  headers, indexed with bounded memory) side by side with dulwich's own ``client.fetch``;
* the bombs: a blob that inflates to 3 GiB (3 MB sent) and the doubling-delta pack
  (1.7 KB, 2 GiB after eleven deltas), refused from their headers.

    python bench/wire_memory.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gitstate.repo import StateRepo  # noqa: E402
from tests.bombs import blob_bomb, doubling_deltas  # noqa: E402
from tests.hostile_git_server import HostileGitServer  # noqa: E402

_GITSTATE = """
import json, resource, sys, time
from gitstate.errors import GitStateError
from gitstate.repo import StateRepo
started = time.monotonic()
rule = "ok"
with StateRepo(sys.argv[1]) as repo:
    repo.store.set_remote_url(sys.argv[2])
    try:
        if sys.argv[3] == "receive":  # the transfer alone: into the quarantine, indexed
            with repo.store.incoming(sys.argv[2]) as got:
                pass
        else:
            repo.remote.pull()
    except GitStateError as exc:
        rule = exc.rule
print(json.dumps({"rule": rule, "seconds": time.monotonic() - started,
                  "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

_DULWICH = """
import json, resource, sys, tempfile, time
from dulwich.client import get_transport_and_path
from dulwich.repo import Repo
started = time.monotonic()
target = Repo.init_bare(tempfile.mkdtemp(), default_branch=b"main")
client, path = get_transport_and_path(sys.argv[2])
client.fetch(path, target)
print(json.dumps({"rule": "ok", "seconds": time.monotonic() - started,
                  "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def child(script: str, agent: Path, url: str, mode: str = "pull") -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", script, str(agent), url, mode],
                         capture_output=True,
                         text=True, timeout=1800, check=True, cwd=ROOT)
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer commits (CI smoke run)")
    commits = 200 if parser.parse_args().quick else 3000
    tmp = Path(tempfile.mkdtemp(prefix="wire-bench-"))
    bare = tmp / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    with StateRepo.init(tmp / "a") as a:
        a.set("stop_loss.2317", 262, "the rule")
        a.store.set_remote_url(str(bare))
        a.push()
    StateRepo.clone(str(bare), tmp / "b").close()
    rows = []
    with HostileGitServer(bare) as url:
        rows.append(("pull, nothing new (baseline)", child(_GITSTATE, tmp / "b", url)))
    with StateRepo(tmp / "a") as a:
        for n in range(commits):
            a.set(f"key{n % 20}", n, f"step {n}")
        a.push()
    with HostileGitServer(bare) as url:
        rows.append((f"receive {commits} commits: gitstate",
                     child(_GITSTATE, tmp / "b", url, "receive")))
        rows.append((f"receive {commits} commits: dulwich's client.fetch",
                     child(_DULWICH, tmp / "b", url)))
        rows.append((f"pull of {commits} commits (+ every check)",
                     child(_GITSTATE, tmp / "b", url)))
    def main_is_fake(refs: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        return [(b"1" * 40 if n == b"refs/heads/main" else s, n) for s, n in refs]

    for name, data in (("pull of a blob inflating to 3 GiB (3 MB sent)", blob_bomb(3 << 30)),
                       ("pull of the doubling-delta pack (1.7 KB, 2 GiB)", doubling_deltas())):
        with HostileGitServer(bare, edit=main_is_fake, pack=data) as url:
            rows.append((name, child(_GITSTATE, tmp / "b", url)))
    base = float(rows[0][1]["peak"])  # type: ignore[arg-type]
    print(f"{'case':<52} {'peak RSS MiB':>12} {'x baseline':>10} {'seconds':>8}  result")
    for name, r in rows:
        peak = float(r["peak"])  # type: ignore[arg-type]
        print(f"{name:<52} {peak:>12.1f} {peak / base:>10.2f} "
              f"{float(r['seconds']):>8.2f}  {r['rule']}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
