"""Redacted keys (schema.yaml ``sensitive: redact``): the value is stored as a keyed hash, so
equality and compare-and-swap still work while the history never holds the value itself.

The hash is HMAC-SHA256 under a key that never enters git: ``.git/gitstate-redact.key``, 32
random bytes made on first use (mode 0600, never followed through a symlink). It is per
repository: a clone has its own key, so a value redacted in one repository does not compare
equal in another unless the key file is copied to it (docs/security.md). Without the key, a
guessable value (a PIN, a short password) cannot be recovered from the history by trying
candidates; with it, it can, which is why the key stays out of every push.
The checkpointer's fence signs its claim records with the same key (gitstate/langgraph/fence.py).

A redacted value is the string ``redacted:hmac-sha256:<64 hex>``; the section and every text
view show it as ``[redacted]``. Values are hashed in their comparison form (``262`` and
``"262"`` hash alike, as they compare alike).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core import layout, secretscan
from ..core.compare import canonical_text
from ..core.model import Value
from ..system import safefile

PREFIX = "redacted:hmac-sha256:"
KEY_FILE = layout.REDACT_KEY_FILE
_FORM = re.compile(r"redacted:hmac-sha256:[0-9a-f]{64}")


def is_redacted(value: object) -> bool:
    return isinstance(value, str) and _FORM.fullmatch(value) is not None


def repo_key(git_dir: Path) -> bytes:
    """The repository's redaction key, made on first use."""
    path = git_dir / KEY_FILE
    try:
        data = safefile.read_regular(path, 64, sole=True)
    except FileNotFoundError:
        data = b""
    if len(data) == 32:
        return data
    if data:
        raise OSError(f"{path} is not a 32-byte redaction key; restore it from a backup "
                      "(without it, redacted values no longer compare)")
    fresh = os.urandom(32)
    try:
        fd = safefile.create_new(path, 0o600)
    except FileExistsError:  # made meanwhile by another writer: use that one
        return repo_key(git_dir)
    try:
        os.write(fd, fresh)
        os.fsync(fd)  # losing it would make every redacted value incomparable
    finally:
        os.close(fd)
    return fresh


def redact(value: Value, key: bytes) -> str:
    if is_redacted(value):
        return str(value)  # already a hash: never hash twice
    digest = hmac.new(key, canonical_text(value).encode("utf-8"), hashlib.sha256).hexdigest()
    return PREFIX + digest


def redactor(git_dir: Path, schema: Any, key: str) -> Callable[[Value], str] | None:
    """What a set of ``key`` stores instead of its value, and of its expected value: the
    keyed hash, when the schema marks the key ``sensitive: redact``; else None."""
    spec = schema.spec(key) if schema is not None else None
    if spec is None or spec.sensitive != "redact":
        return None
    secret = repo_key(git_dir)
    return lambda value: redact(value, secret)


def redact_secrets(value: Any, key: bytes) -> Any:
    """``value`` (any JSON-like structure: dicts, lists, tuples, strings) with every string
    that trips the secret scan replaced by its keyed hash, as ``sensitive: redact`` stores a
    value: for a writer that must keep going rather than refuse (docs/security.md)."""
    return secretscan.replace(value, lambda text: redact(text, key))
