"""Signed commits in git's own format: an SSH signature (``ssh-keygen -Y sign -n git``) in
the commit's ``gpgsig`` header, as ``git commit -S`` with ``gpg.format=ssh`` writes it, so
that plain ``git log --show-signature`` with ``gpg.ssh.allowedSignersFile`` verifies it.

This module owns every ssh-keygen process and the header's bytes: :func:`sign` (a payload,
a private key file) and :func:`signer_of` (a raw commit, git's allowed-signers file) ->
the principal that signed it, or None. Principals say which role a key may act as:
``human:<name>`` or ``runtime:<name>`` (docs/remote.md, "Who may claim a role across machines").

ssh-keygen runs with an environment of its own (PATH only), no terminal (a key with a
passphrase fails instead of prompting) and a deadline; its files live in a private
temporary directory.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable

from ..core.errors import ConfigError, InvalidInput

NAMESPACE = "git"  # what git itself signs and verifies commits under
HEADER = b"gpgsig"
DEADLINE_SECONDS = 20
ROLES = ("human", "runtime")


def _keygen() -> str:
    found = shutil.which("ssh-keygen")
    if found is None:
        raise ConfigError("ssh-keygen is not installed: signed decisions need OpenSSH's "
                          "ssh-keygen (8.2 or later)", rule="trust.no_ssh_keygen")
    return found


def _run(args: list[str], data: bytes) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run([_keygen(), *args], input=data, capture_output=True,
                              timeout=DEADLINE_SECONDS, check=False, start_new_session=True,
                              env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    except subprocess.TimeoutExpired as exc:
        raise ConfigError(f"ssh-keygen did not answer within {DEADLINE_SECONDS} s",
                          rule="trust.ssh_keygen") from exc


def sign(payload: bytes, key: str) -> bytes:
    """The armored SSH signature of ``payload`` by the private key file ``key``."""
    out = _run(["-Y", "sign", "-n", NAMESPACE, "-q", "-f", key], payload)
    if out.returncode != 0 or b"BEGIN SSH SIGNATURE" not in out.stdout:
        raise ConfigError(f"[trust] signing_key {key} cannot sign: "
                          f"{out.stderr.decode('utf-8', 'replace').strip()[:200]}",
                          rule="trust.signing_key")
    return out.stdout


def with_signature(body: bytes, signature: bytes) -> bytes:
    """A raw commit body with ``signature`` as its ``gpgsig`` header, after the others (where
    git puts it); continuation lines start with a space."""
    head, sep, message = body.partition(b"\n\n")
    value = signature.rstrip(b"\n").replace(b"\n", b"\n ")
    return head + b"\n" + HEADER + b" " + value + b"\n\n" + message if sep else body


def split(raw: bytes) -> tuple[bytes, bytes | None]:
    """(the payload git verifies, the signature) of a raw commit body; no signature: None."""
    head, sep, message = raw.partition(b"\n\n")
    lines = head.split(b"\n")
    kept: list[bytes] = []
    signature: list[bytes] | None = None
    inside = False
    for line in lines:
        if line.startswith(HEADER + b" "):
            if signature is not None:
                raise InvalidInput("a commit with two signatures", rule="trust.bad_signature")
            signature, inside = [line[len(HEADER) + 1:]], True
            continue
        if inside and line.startswith(b" "):
            assert signature is not None
            signature.append(line[1:])
            continue
        inside = False
        kept.append(line)
    payload = b"\n".join(kept) + sep + message
    return payload, None if signature is None else b"\n".join(signature) + b"\n"


def signer_of(raw: bytes, allowed_signers: str) -> str | None:
    """The principal of ``allowed_signers`` (git's format) whose key made the commit's
    signature over its payload; None when it is unsigned or no allowed key signed it."""
    payload, signature = split(raw)
    if signature is None:
        return None
    with tempfile.TemporaryDirectory(prefix="gitstate-sig-") as folder:
        sig_file = os.path.join(folder, "commit.sig")
        with open(sig_file, "wb") as f:
            f.write(signature)
        found = _run(["-Y", "find-principals", "-s", sig_file, "-f", allowed_signers], b"")
        for principal in found.stdout.decode("utf-8", "replace").split():
            good = _run(["-Y", "verify", "-f", allowed_signers, "-I", principal, "-n",
                         NAMESPACE, "-s", sig_file], payload)
            if good.returncode == 0:
                return principal
    return None


def role_of(principal: str | None) -> str | None:
    """``human`` or ``runtime`` for a principal ``human:<name>`` / ``runtime:<name>``."""
    if principal is None:
        return None
    role, colon, name = principal.partition(":")
    return role if colon and name and role in ROLES else None


def signer(key: str | os.PathLike[str] | None) -> Callable[[bytes], bytes] | None:
    """What a store signs its commits with for ``key`` (None: unsigned)."""
    return functools.partial(sign, key=str(key)) if key else None
