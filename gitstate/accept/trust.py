"""Who may claim a role across machines: a commit from elsewhere that claims the human or
the runtime role counts only when its signer may act as that role.

Claims: on main, an approval's decision (``Gitstate-Approval: approve|deny``: the roles its
policy names) and a write of a key whose schema writers leave out the agent (those
writers); on a run ledger, an event whose ``Gitstate-Writer`` is ``human`` or ``runtime``.
The agent's own writes claim nothing.

With ``[trust] allowed_signers`` (git's allowed-signers file, principals ``human:<name>`` /
``runtime:<name>``), a claim must carry an SSH signature (``sshsig``) by a key whose
principal has one of the claimed roles. Without it, claims from elsewhere are refused —
unless ``[trust] trust_remote = true`` says the remote's own hook authenticates who pushes
(docs/remote.md). The server's pre-receive hook reads the same two settings from the bare
repository's git config (``gitstate.allowedSigners``, ``gitstate.trustRemote``), and
``gitstate.pushers``: a file mapping each authenticated pusher (gitolite's ``GL_USER``,
``REMOTE_USER`` under ``git http-backend``, or ``gitstate.pusherVariable``) to the roles
they may claim; then a pusher's claims count only within those roles, and one the file does
not name may push nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..system import sshsig

if TYPE_CHECKING:
    from collections.abc import Collection

    from ..store import GitStore
    from ..system.config import Config


@dataclass(frozen=True)
class Trust:
    allowed_signers: str | None = None
    trust_remote: bool = False
    # on a server with a pushers file: who pushed (as its transport authenticated them) and
    # the roles the file gives them; None without a pushers file
    pusher: str | None = None
    pusher_roles: frozenset[str] | None = None

    @classmethod
    def of(cls, config: Config) -> Trust:
        return cls(config.allowed_signers, config.trust_remote)

    @classmethod
    def of_server(cls, git_dir: Path) -> Trust:
        """The settings of a bare repository's hook, from its git config."""
        from dulwich.config import ConfigFile

        try:
            conf = ConfigFile.from_path(str(git_dir / "config"))
        except (OSError, ValueError):
            return cls()

        def value(name: bytes) -> bytes | None:
            try:
                return conf.get((b"gitstate",), name)
            except KeyError:
                return None

        signers, remote = value(b"allowedSigners"), value(b"trustRemote") or b""
        trust = cls(signers.decode("utf-8", "replace") if signers else None,
                    remote.lower() in (b"true", b"yes", b"on", b"1"))
        pushers = value(b"pushers")
        if pushers is None:
            return trust
        variable = (value(b"pusherVariable") or b"").decode("utf-8", "replace")
        names = [variable] if variable else ["GL_USER", "REMOTE_USER"]  # gitolite, http
        who = next((os.environ[n] for n in names if os.environ.get(n)), None)
        roles = read_pushers(Path(pushers.decode("utf-8", "replace"))).get(who or "")
        return cls(trust.allowed_signers, trust.trust_remote, who or "(unauthenticated)",
                   frozenset(roles or ()))


def read_pushers(path: Path) -> dict[str, tuple[str, ...]]:
    """The server's pushers file: one ``<user> <role>[,<role>...]`` per line (roles among
    agent, runtime, human), ``#`` comments; an unreadable file names no one."""
    out: dict[str, tuple[str, ...]] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return out
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if len(words) == 2:
            out[words[0]] = tuple(r for r in words[1].split(",")
                                  if r in ("agent", *sshsig.ROLES))
    return out


def claim_problem(store: GitStore, commit: str, roles: Collection[str],
                  trust: Trust) -> tuple[str, str] | None:
    """(rule, message) when ``commit`` claims one of ``roles`` and nothing proves it."""
    wanted = sorted(set(roles) & set(sshsig.ROLES))
    if not wanted:
        return None
    claimed = "/".join(wanted)
    if trust.pusher_roles is not None:  # the server knows who pushed: their roles decide
        if not set(wanted) & trust.pusher_roles:
            return ("trust.pusher_role", f"the commit claims the {claimed} role, and "
                    f"{trust.pusher}, who pushed it, may act only as "
                    f"{'/'.join(sorted(trust.pusher_roles)) or 'nothing'} (the server's "
                    "pushers file)")
        if trust.allowed_signers is None:
            return None
    if trust.allowed_signers is None:
        if trust.trust_remote:
            return None
        return ("trust.unverified_claim", f"the commit claims the {claimed} role, which "
                "only a signature can prove across machines: configure [trust] "
                "allowed_signers (docs/remote.md, \"Who may claim a role across machines\"), or "
                "[trust] trust_remote = true for a remote whose hook authenticates pushers")
    if not os.path.isfile(trust.allowed_signers):  # missing, a directory, a FIFO
        from ..core.errors import ConfigError

        raise ConfigError(f"the allowed signers file {trust.allowed_signers} is not a "
                          "readable file: fix [trust] allowed_signers (or the server's "
                          "gitstate.allowedSigners)", rule="trust.allowed_signers")
    principal = sshsig.signer_of(store.raw_commit(commit), trust.allowed_signers)
    if principal is None:
        return ("trust.unsigned", f"the commit claims the {claimed} role but carries no "
                "signature by a key of the allowed signers")
    if sshsig.role_of(principal) not in wanted:
        return ("trust.wrong_role", f"the commit claims the {claimed} role but is signed by "
                f"{principal}, who may not act as {claimed}")
    return None
