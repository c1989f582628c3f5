"""Peak memory and time of a pull, each in a fresh process, through a loopback git:// server
(tests/hostile_git_server.py: the real upload-pack, or a crafted pack):

* the baseline: a pull with nothing new (what the pulling process weighs anyway);
* an honest pull of N new commits: gitstate's receiving (pack to a file, checked from its
  headers, indexed with bounded memory) side by side with dulwich's own ``client.fetch``;
* the bombs: a blob that inflates to 3 GiB (3 MB sent) and the doubling-delta pack
  (1.7 KB, 2 GiB after eleven deltas), refused from their headers;
* the pre-receive hook (hooks/git/pre-receive, gitstate's part of a push) on a pushed
  schema.yaml stored loose that inflates to 600 MiB.

    python bench/wire_memory.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gitstate.api.repo import StateRepo  # noqa: E402
from tests.bombs import PEAK_MIB, blob_bomb, doubling_deltas  # noqa: E402
from tests.helpers import install_pre_receive  # noqa: E402
from tests.hostile_git_server import HostileGitServer  # noqa: E402

_GITSTATE = PEAK_MIB + """
import json, resource, sys, time
from gitstate.core.errors import GitStateError
from gitstate.api.repo import StateRepo
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
                  "peak": peak_mib()}))
"""

_DULWICH = PEAK_MIB + """
import json, resource, sys, tempfile, time
from dulwich.client import get_transport_and_path
from dulwich.repo import Repo
started = time.monotonic()
target = Repo.init_bare(tempfile.mkdtemp(), default_branch=b"main")
client, path = get_transport_and_path(sys.argv[2])
client.fetch(path, target)
print(json.dumps({"rule": "ok", "seconds": time.monotonic() - started,
                  "peak": peak_mib()}))
"""


def child(script: str, agent: Path, url: str, mode: str = "pull") -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", script, str(agent), url, mode],
                         capture_output=True,
                         text=True, timeout=1800, check=True, cwd=ROOT)
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _loose(repo: Path, header: bytes, body: bytes | None, stream: bytes = b"") -> str:
    """A loose object written into ``repo`` (``stream``: deflated content after the header,
    for one never built in memory; its name is then made up)."""
    import hashlib
    import zlib

    sha = hashlib.sha1(header + (body or b"")).hexdigest()
    if body is not None:
        data = zlib.compress(header + body)
    else:
        head = zlib.compressobj(9, zlib.DEFLATED, -15)
        data = b"\x78\xda" + head.compress(header) + head.flush(zlib.Z_FULL_FLUSH) + \
            stream[2:-4] + b"\0\0\0\0"
    path = repo / "objects" / sha[:2] / sha[2:]
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return sha


def hook_bomb(tmp: Path, bare: Path) -> dict[str, object]:
    """Peak memory of the real hook refusing a commit whose schema.yaml inflates to 600 MiB."""
    from tests.bombs import zeros_stream

    server = tmp / "guarded.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(bare), str(server)], check=True)
    install_pre_receive(server, tmp)
    base = subprocess.run(["git", "-C", str(server), "rev-parse", "main"], capture_output=True,
                          text=True, check=True).stdout.strip()
    state = subprocess.run(["git", "-C", str(server), "rev-parse", "main:working_state.json"],
                           capture_output=True, text=True, check=True).stdout.strip()
    schema = _loose(server, b"blob %d\0" % (600 << 20), None, zeros_stream(600 << 20))
    entries = (b"100644 schema.yaml\0" + bytes.fromhex(schema) +
               b"100644 working_state.json\0" + bytes.fromhex(state))
    tree = _loose(server, b"tree %d\0" % len(entries), entries)
    when = int(subprocess.run(["git", "-C", str(server), "log", "-1", "--format=%ct"],
                              capture_output=True, text=True, check=True).stdout) + 60
    body = (f"tree {tree}\nparent {base}\nauthor m <m@x> {when} +0000\ncommitter m <m@x> "
            f"{when} +0000\n\nbomb\n\nGitstate-Op: set\n").encode()
    commit = _loose(server, b"commit %d\0" % len(body), body)
    # in a process of its own, so that the children's peak is the hook's alone
    script = ("import json, resource, subprocess, sys, time\n"
              "t = time.monotonic()\n"
              "out = subprocess.run([sys.argv[1]], capture_output=True, text=True, "
              "input=sys.argv[2])\n"
              "print(json.dumps({'code': out.returncode, 'stderr': out.stderr, 'seconds': "
              "time.monotonic() - t, 'peak': resource.getrusage(resource.RUSAGE_CHILDREN)"
              ".ru_maxrss / 1024}))\n")
    out = subprocess.run([sys.executable, "-c", script, str(server / "hooks" / "pre-receive"),
                          f"{base} {commit} refs/heads/main\n"], capture_output=True,
                         text=True, env={**os.environ, "GIT_DIR": str(server)}, cwd=server,
                         check=True)
    result = json.loads(out.stdout)
    words = result["stderr"].split()
    rule = next((w.strip("[]") for w in words if w.startswith("[")), "?")
    return {"rule": rule if result["code"] else "accepted!", "seconds": result["seconds"],
            "peak": result["peak"]}


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
    rows.append(("the pre-receive hook on a 600 MiB loose schema.yaml", hook_bomb(tmp, bare)))
    base = float(rows[0][1]["peak"])  # type: ignore[arg-type]
    print(f"{'case':<52} {'peak RSS MiB':>12} {'x baseline':>10} {'seconds':>8}  result")
    for name, r in rows:
        peak = float(r["peak"])  # type: ignore[arg-type]
        print(f"{name:<52} {peak:>12.1f} {peak / base:>10.2f} "
              f"{float(r['seconds']):>8.2f}  {r['rule']}")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
