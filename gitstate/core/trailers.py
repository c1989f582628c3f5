"""Commit messages: the caller's reason verbatim, then one block of git trailers.

The trailer block is the machine-readable record of what a commit changed; history, log,
blame and the JSONL projection are built from it, never by re-diffing trees. Values are
JSON-encoded on one line (control characters and Unicode line separators escaped), so no
value can end the block early, add a trailer, or be read back differently by
``git interpret-trailers --parse``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

PREFIX = "Gitstate-"
VERSION = "1"
_ESCAPES = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\u0085": "\\u0085"}


def encode_json(value: Any) -> str:
    """One-line JSON; non-ASCII text stays readable, every line break is escaped."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    for raw, escaped in _ESCAPES.items():
        text = text.replace(raw, escaped)
    return text


@dataclass(frozen=True)
class Change:
    """What one commit did, as its trailers say."""

    op: str
    reason: str
    actor: str
    key: str | None = None
    old: Any = None
    new: Any = None
    expires_at: str | None = None
    handoff: dict[str, Any] | None = None
    reverts: str | None = None
    request: Any = None
    observation: str | None = None
    schema_version: int | None = None
    adopt: dict[str, Any] | None = None
    clock: str | None = None  # the writer's own clock, when the commit time had to be later
    extra: tuple[tuple[str, str], ...] = ()

    def trailers(self) -> list[tuple[str, str]]:
        out = [("Op", self.op)]
        if self.key is not None:
            out += [("Key", self.key), ("Old", encode_json(self.old))]
            if self.op != "clear":
                out.append(("New", encode_json(self.new)))
                out.append(("Expires", self.expires_at or "none"))
        if self.handoff is not None or self.op == "handoff":
            out.append(("Handoff", encode_json(self.handoff)))
        if self.adopt is not None:
            out.append(("Adopt", encode_json(self.adopt)))
        out.append(("Actor", self.actor))
        if self.reverts:
            out.append(("Reverts", self.reverts))
        if self.request:
            out.append(("Request", encode_json(self.request)))
        if self.observation:
            out.append(("Observation", self.observation))
        if self.schema_version is not None:
            out.append(("Schema-Version", str(self.schema_version)))
        if self.clock:
            out.append(("Clock", self.clock))
        out.extend(self.extra)
        out.append(("Version", VERSION))
        return out

    def message(self) -> bytes:
        block = "\n".join(f"{PREFIX}{name}: {value}" for name, value in self.trailers())
        return f"{self.reason}\n\n{block}\n".encode()


class NotAGitstateCommit(ValueError):
    """The message has no gitstate trailer block (a commit made by another tool)."""


def parse_message(message: bytes) -> Change:
    """Read a commit message written by :meth:`Change.message` back into a Change."""
    text = message.decode("utf-8", errors="replace").rstrip("\n")
    reason, sep, block = text.rpartition("\n\n")
    if not sep:
        raise NotAGitstateCommit("no trailer block")
    fields: dict[str, str] = {}
    extra: list[tuple[str, str]] = []
    for line in block.split("\n"):
        name, colon, value = line.partition(": ")
        if not colon or not name.startswith(PREFIX):
            raise NotAGitstateCommit(f"not a gitstate trailer: {line[:60]!r}")
        short = name[len(PREFIX):]
        if short in fields:
            raise NotAGitstateCommit(f"trailer {name} appears twice")
        fields[short] = value
        if short not in _KNOWN:
            extra.append((short, value))
    if "Op" not in fields or "Actor" not in fields:
        raise NotAGitstateCommit("missing Gitstate-Op or Gitstate-Actor")
    try:
        expires = fields.get("Expires")
        return Change(
            op=fields["Op"],
            reason=reason,
            actor=fields["Actor"],
            key=fields.get("Key"),
            old=json.loads(fields["Old"]) if "Old" in fields else None,
            new=json.loads(fields["New"]) if "New" in fields else None,
            expires_at=None if expires in (None, "none") else expires,
            handoff=json.loads(fields["Handoff"]) if "Handoff" in fields else None,
            reverts=fields.get("Reverts"),
            request=json.loads(fields["Request"]) if "Request" in fields else None,
            adopt=json.loads(fields["Adopt"]) if "Adopt" in fields else None,
            observation=fields.get("Observation"),
            clock=fields.get("Clock"),
            schema_version=int(fields["Schema-Version"]) if "Schema-Version" in fields else None,
            extra=tuple(extra),
        )
    except (json.JSONDecodeError, ValueError, RecursionError) as exc:
        raise NotAGitstateCommit(f"malformed trailer value: {exc}") from exc


_KNOWN = {"Op", "Key", "Old", "New", "Expires", "Handoff", "Actor", "Reverts", "Request",
          "Adopt", "Observation", "Schema-Version", "Clock", "Version"}
