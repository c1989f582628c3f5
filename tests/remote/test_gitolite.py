"""Who pushed, under a real gitolite3: Debian's gitolite, set up in a temporary HOME
(`gitolite setup -pk admin.pub`), behind a real sshd on 127.0.0.1 whose authorized_keys are
the ones gitolite writes (`command="gitolite-shell <user>"`, one line per key), so the user
the hook sees in GL_USER is the one gitolite's forced command names for the key that logged
in. Two users may write the agent's repository: agent7 (the agent's key, roles agent and
runtime in the server's pushers file) and alice (the human's key, role human). The
repository's pre-receive is gitstate's hooks/git/pre-receive, installed the way gitolite
supports (the repo-specific-hooks feature: `option hook.pre-receive = ...` in gitolite.conf,
the hook kept in LOCAL_CODE), and `gitstate.pushers` is set by gitolite.conf's `config`
line (GIT_CONFIG_KEYS in .gitolite.rc).

Each case runs twice: over the real sshd (skipped where sshd cannot start), and with
GIT_SSH_COMMAND pointing to a small script that does what sshd's forced command does — it
finds the authorized_keys line holding the key, and runs its command in a clean environment
with SSH_ORIGINAL_COMMAND set to the command git asked for — so the gitolite half is run
even where no sshd can listen. Skipped where gitolite3 or ssh-keygen is missing."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.accept.test_trust import Pair, _decide
from tests.helpers import GIT, free_port, git, write_pre_receive

SSHD = Path("/usr/sbin/sshd")
GITOLITE = shutil.which("gitolite")
pytestmark = pytest.mark.skipif(
    GIT is None or GITOLITE is None or shutil.which("ssh-keygen") is None,
    reason="needs the git CLI, Debian's gitolite3 and OpenSSH's ssh-keygen")
REPO = "agents/agent7"
PUSHERS = "alice human\nagent7 agent,runtime\n"
FORCED = """#!/bin/sh
# what sshd does for a key whose authorized_keys line has command="...": run that command,
# in a clean environment, with SSH_ORIGINAL_COMMAND set to what the client asked for and
# SSH_CONNECTION (client and server address and port) as sshd sets it
key=$(cut -d' ' -f2 "$KEY_PUB")
line=$(grep -F " $key" "$GL_HOME/.ssh/authorized_keys") || exit 255
cmd=$(printf '%s\\n' "$line" | sed -n 's/^command="\\([^"]*\\)".*/\\1/p')
for asked; do :; done
exec env -i HOME="$GL_HOME" USER="$(id -un)" PATH=/usr/local/bin:/usr/bin:/bin \\
    SSH_CONNECTION="127.0.0.1 0 127.0.0.1 22" SSH_ORIGINAL_COMMAND="$asked" sh -c "$cmd"
"""


@dataclass
class Gitolite:
    home: Path
    port: int
    ssh: dict[str, str]  # GIT_SSH_COMMAND for each user's key

    @property
    def bare(self) -> Path:
        return self.home / "repositories" / f"{REPO}.git"

    def url(self) -> str:
        user = os.environ.get("USER") or "root"
        return f"ssh://{user}@127.0.0.1:{self.port}/{REPO}"

    def push(self, source: Path, user: str) -> subprocess.CompletedProcess[str]:
        """``git push`` of ``source``'s main over ssh with ``user``'s key."""
        return subprocess.run([GIT or "git", "-C", str(source), "push", self.url(), "main"],
                              capture_output=True, text=True, timeout=120, check=False,
                              env={**os.environ, "GIT_SSH_COMMAND": self.ssh[user],
                                   "GIT_SSH_VARIANT": "ssh"})

    def main(self) -> str:
        return git(self.bare, "rev-parse", "main").stdout.strip()


def _gitolite(env: dict[str, str], *args: str) -> None:
    out = subprocess.run([GITOLITE or "gitolite", *args], capture_output=True, text=True,
                         env=env, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.fixture(params=["sshd", "forced-command"])
def gitolite(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Gitolite]:
    home = tmp_path / "gl"
    keydir = tmp_path / "gl-keys"
    home.mkdir()
    keydir.mkdir()
    keys = {}
    for user in ("admin", "agent7", "alice", "host"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", user, "-f",
                        str(keydir / user)], check=True, capture_output=True)
        keys[user] = keydir / user
    env = {**os.environ, "HOME": str(home)}
    _gitolite(env, "setup", "-pk", str(keydir / "admin.pub"))
    # .gitolite.rc: the repo-specific-hooks feature, LOCAL_CODE for its hooks, and
    # gitstate.* allowed in gitolite.conf's `config` lines
    rc = home / ".gitolite.rc"
    text = rc.read_text(encoding="utf-8")
    text = re.sub(r"GIT_CONFIG_KEYS\s*=>\s*'',", lambda _: r"GIT_CONFIG_KEYS => 'gitstate\..*',",
                  text)
    text = text.replace('# LOCAL_CODE                =>  "$ENV{HOME}/local",',
                        'LOCAL_CODE                =>  "$ENV{HOME}/local",')
    text = text.replace("# 'repo-specific-hooks',", "'repo-specific-hooks',")
    assert r"'gitstate\..*'" in text and '\n        LOCAL_CODE' in text, text
    rc.write_text(text, encoding="utf-8")
    write_pre_receive(home / "local" / "hooks" / "repo-specific" / "gitstate", tmp_path)
    (home / "pushers").write_text(PUSHERS, encoding="utf-8")
    # administered on the server: keydir and conf in ~/.gitolite, then compile + triggers
    for user in ("agent7", "alice"):
        shutil.copy(keydir / f"{user}.pub", home / ".gitolite" / "keydir" / f"{user}.pub")
    (home / ".gitolite" / "conf" / "gitolite.conf").write_text(
        "repo gitolite-admin\n    RW+ = admin\n\n"
        f"repo {REPO}\n    RW = agent7 alice\n"
        "    option hook.pre-receive = gitstate\n"
        f"    config gitstate.pushers = {home / 'pushers'}\n", encoding="utf-8")
    _gitolite(env, "compile")
    _gitolite(env, "trigger", "POST_COMPILE")
    users = ("admin", "agent7", "alice")
    if request.param == "forced-command":
        script = tmp_path / "forced-ssh"
        script.write_text(FORCED, encoding="utf-8")
        script.chmod(0o755)
        yield Gitolite(home, 22, {u: f"env GL_HOME={home} KEY_PUB={keys[u]}.pub {script}"
                                  for u in users})
        return
    if not SSHD.exists():
        pytest.skip("openssh-server is not installed")
    # sshd on a free loopback port; HOME set so gitolite-shell finds this gitolite
    d = tmp_path / "sshd"
    d.mkdir()
    port = free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {keydir / 'host'}\n"
        f"AuthorizedKeysFile {home / '.ssh' / 'authorized_keys'}\nPermitRootLogin yes\n"
        "PasswordAuthentication no\nPubkeyAuthentication yes\nStrictModes no\nUsePAM no\n"
        f"SetEnv HOME={home}\nPidFile {d / 'sshd.pid'}\n")
    Path("/run/sshd").mkdir(exist_ok=True)
    proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(d / "sshd_config")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.skip("sshd could not start here")
            time.sleep(0.05)
        yield Gitolite(home, port, {
            u: f"ssh -i {keys[u]} -o IdentitiesOnly=yes -o BatchMode=yes "
               "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
            for u in users})
    finally:
        proc.kill()
        proc.wait()


def test_gitolite_writes_forced_commands_and_links_the_hook(gitolite: Gitolite) -> None:
    """The setup is gitolite's own: its authorized_keys run gitolite-shell for each key's
    user, and the repository's pre-receive is its hook driver chaining to gitstate's."""
    keys = (gitolite.home / ".ssh" / "authorized_keys").read_text(encoding="utf-8")
    for user in ("admin", "agent7", "alice"):
        assert re.search(rf'command="[^"]*gitolite-shell {user}"', keys), keys
    chained = list((gitolite.bare / "hooks").glob("pre-receive.*-gitstate"))
    assert len(chained) == 1 and chained[0].resolve() == (
        gitolite.home / "local" / "hooks" / "repo-specific" / "gitstate"), chained
    assert git(gitolite.bare, "config", "gitstate.pushers").stdout.strip() == str(
        gitolite.home / "pushers")


def test_under_gitolite_the_agent_cannot_push_a_human_decision_and_the_human_can(
        tmp_path: Path, gitolite: Gitolite) -> None:
    pair = Pair(tmp_path / "pair")
    first = gitolite.push(pair.plain, "agent7")  # the request: no claim in it
    assert first.returncode == 0, first.stderr
    assert gitolite.main() == git(pair.plain, "rev-parse", "main").stdout.strip()
    # a plain set by the agent, pushed with the agent's key
    pair.a.set("note", "checking the order", "looked at O-1")
    pair.a.push()
    plain = gitolite.push(pair.plain, "agent7")
    assert plain.returncode == 0, plain.stderr
    assert gitolite.main() == git(pair.plain, "rev-parse", "main").stdout.strip()
    # a human decision, unsigned: only the pusher's identity can vouch for it
    _decide(pair, None)
    before = gitolite.main()
    refused = gitolite.push(pair.plain, "agent7")
    assert refused.returncode != 0 and "[trust.pusher_role]" in refused.stderr, refused.stderr
    assert "agent7" in refused.stderr, refused.stderr
    assert gitolite.main() == before
    taken = gitolite.push(pair.plain, "alice")
    assert taken.returncode == 0, taken.stderr
    assert gitolite.main() == git(pair.plain, "rev-parse", "main").stdout.strip() != before
