"""Running the git CLI without letting the repository, or anything near it, configure it.

git reads configuration from the system, from the user's ``~/.gitconfig`` (``$HOME``), from
``$XDG_CONFIG_HOME`` and from the repository's own ``.git/config``; several settings run a
program (``core.fsmonitor`` on any command that looks at the index, ``core.hooksPath``,
``core.sshCommand``, ``core.pager``, credential helpers, the ``ext::`` transport). A state
repository holds data that may have come from elsewhere, so every git process gitstate starts
(fsck, repack, prune, a fetch) runs here with:

* an environment of its own: PATH, a fresh empty HOME, no system or global config, no
  terminal prompt, no pager, and no inherited ``GIT_*`` variable (``GIT_SSH_COMMAND`` alone
  is passed through: it is the operator's, set in the environment, never in data);
* ``-c`` overrides, which win over every config file, that switch each program-running
  setting off.

:data:`DANGEROUS` lists the settings that run programs; ``verify`` reports a repository
config that sets any of them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

# each wins over the same setting in any config file
OVERRIDES = (
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "core.editor=false",
    "core.sshCommand=ssh",
    "core.gitProxy=",
    "core.alternateRefsCommand=",
    "credential.helper=",
    "protocol.ext.allow=never",
    "gc.auto=0",
    "maintenance.auto=false",
    "fetch.recurseSubmodules=false",
)

# settings whose value is a program git may run: (section, subsection, name), lower case;
# "*" matches anything, None means "no subsection"
DANGEROUS: tuple[tuple[str, str | None, str], ...] = (
    *(("core", None, n) for n in ("fsmonitor", "hookspath", "sshcommand", "pager", "editor",
                                  "gitproxy", "alternaterefscommand", "askpass")),
    ("credential", None, "helper"), ("credential", "*", "helper"),
    ("filter", "*", "clean"), ("filter", "*", "smudge"), ("filter", "*", "process"),
    ("diff", None, "external"), ("diff", "*", "textconv"), ("diff", "*", "command"),
    ("merge", "*", "driver"), ("gpg", None, "program"), ("gpg", "*", "program"),
    ("sequence", None, "editor"), ("uploadpack", None, "packobjectshook"),
    ("include", None, "path"), ("includeif", "*", "path"), ("pager", None, "*"),
    ("alias", None, "*"), ("remote", "*", "uploadpack"), ("remote", "*", "receivepack"),
    ("remote", "*", "proxy"), ("http", None, "proxy"), ("protocol", None, "allow"),
    ("protocol", "*", "allow"),
)


def git_binary() -> str | None:
    return shutil.which("git")


@contextlib.contextmanager
def environment() -> Iterator[dict[str, str]]:
    """A clean environment for one git process, with a HOME that exists only meanwhile."""
    home = tempfile.mkdtemp(prefix="gitstate-home-")
    try:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "XDG_CONFIG_HOME": os.path.join(home, ".config"),
            "LANG": "C",
            "LC_ALL": "C",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_PAGER": "cat",
            "PAGER": "cat",
        }
        if os.environ.get("GIT_SSH_COMMAND"):
            env["GIT_SSH_COMMAND"] = os.environ["GIT_SSH_COMMAND"]
        yield env
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run(repo: Path, args: Sequence[str], *, timeout: float = 3600,
        check: bool = False) -> subprocess.CompletedProcess[str]:
    """``git -C repo <overrides> args`` in a clean environment (text output)."""
    git = git_binary()
    if git is None:
        raise FileNotFoundError("git")
    argv = [git, "--no-pager", "-C", str(repo)]
    for override in OVERRIDES:
        argv += ["-c", override]
    with environment() as env:
        return subprocess.run([*argv, *args], env=env, capture_output=True, text=True,
                              timeout=timeout, check=check, stdin=subprocess.DEVNULL)


def config_entries(config_text: str) -> Iterator[tuple[str, str | None, str, str]]:
    """A git config file's settings as (section, subsection or None, key, raw value), the
    section and key in lower case, in file order."""
    section, sub = "", None
    for raw in config_text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            head = line[1:line.index("]")] if "]" in line else line[1:]
            name, _, rest = head.strip().partition(" ")
            if "." in name and not rest:  # the old [section.sub] form
                name, _, rest = name.partition(".")
            section, sub = name.lower(), (rest.strip().strip('"') or None)
            continue
        key, _, value = line.partition("=")
        yield section, sub, key.strip().lower(), value.strip()


def dangerous_settings(config_text: str) -> list[str]:
    """The program-running settings a git config file sets, as ``section[.sub].name``."""
    found: list[str] = []
    for section, sub, key, _ in config_entries(config_text):
        for want_section, want_sub, want_key in DANGEROUS:
            if want_section == section and want_key in ("*", key) and \
                    ((want_sub == "*" and sub is not None) or (want_sub is None and sub is None)):
                found.append(".".join(p for p in (section, sub, key) if p))
                break
    return found
