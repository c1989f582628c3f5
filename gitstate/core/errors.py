"""The one error tree of gitstate.

Every failure a caller can see is a :class:`GitStateError`. Adapters (CLI, MCP server, hooks)
catch that one class; its ``exit_code`` is the CLI exit status and its ``rule`` names the rule
that refused the call, so a person or a model can act on it::

    GitStateError                       exit  rule
    ├── UsageError                         2  usage.*         bad arguments, bad --now, ...
    │   └── NotInitialized                 2  repo.not_initialized
    ├── Refused                            1  <rule>          refused; nothing written
    │   ├── InvalidInput                   1  key.* value.* reason.* ttl.* handoff.* ...
    │   │   └── SchemaError                1  schema.invalid  schema.yaml is malformed
    │   ├── CasMismatch                    1  cas.mismatch    carries the current entry
    │   ├── KeyCapReached                  1  keys.cap        carries the live keys
    │   ├── SectionTooLarge                1  section.max_bytes
    │   ├── InjectionTooLarge              1  injection.max_chars
    │   ├── HandoffTooLarge                1  handoff.max_bytes
    │   └── ThreadSuperseded               1  thread.superseded  another writer claimed it
    ├── ConfigError                        1  config.*        config.toml is invalid
    └── StoreError                         3  store.*         the repository cannot be used
        ├── HistoryRewritten               3  store.rewritten
        └── LockTimeout                    3  store.lock_timeout

``details`` is a JSON-ready dict with what the caller needs to retry (for a compare-and-swap
mismatch, the current value with its reason and set time).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `from typing import`: typing costs ~3 ms per wake-up

if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any


class GitStateError(Exception):
    """Root of every error gitstate raises on purpose."""

    exit_code = 1
    rule = "error"

    def __init__(self, message: str, *, rule: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        if rule is not None:
            self.rule = rule
        self.details: dict[str, Any] = details

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form used by ``--json`` output and MCP structured errors."""
        return {"error": self.rule, "message": self.message, **self.details}


class UsageError(GitStateError):
    """The call itself is malformed (exit 2)."""

    exit_code = 2
    rule = "usage"


class NotInitialized(UsageError):
    """The agent directory holds no gitstate repository."""

    rule = "repo.not_initialized"


class Refused(GitStateError):
    """A rule refused the call; nothing was written (exit 1)."""

    exit_code = 1
    rule = "refused"


class InvalidInput(Refused):
    """A key, value, reason, ttl or handoff field broke a documented limit."""


class SchemaError(InvalidInput):
    """schema.yaml itself is malformed (rule ``schema.invalid``)."""

    rule = "schema.invalid"


class CasMismatch(Refused):
    """``expected_value`` did not match the value in HEAD."""

    rule = "cas.mismatch"


class KeyCapReached(Refused):
    """A new live key would exceed ``max_keys``."""

    rule = "keys.cap"


class SectionTooLarge(Refused):
    """The rendered key lines would exceed ``section_max_bytes``."""

    rule = "section.max_bytes"


class InjectionTooLarge(Refused):
    """The whole rendered section would exceed ``injection_max_chars``."""

    rule = "injection.max_chars"


class HandoffTooLarge(Refused):
    """A structured handoff exceeds ``working_state_handoff_max_bytes``."""

    rule = "handoff.max_bytes"


class ThreadSuperseded(Refused):
    """Another writer claimed the LangGraph thread since this one did
    (gitstate/langgraph/fence.py): the write was refused and nothing of it was written."""

    rule = "thread.superseded"


class ConfigError(GitStateError):
    """config.toml is unreadable, has an unknown setting or a wrongly typed one."""

    exit_code = 1
    rule = "config"


class StoreError(GitStateError):
    """The git repository cannot be read or written (exit 3)."""

    exit_code = 3
    rule = "store"


DISK_FULL_HINT = "free some disk space, then run the command again"


def disk_full(what: str, again: str = DISK_FULL_HINT) -> StoreError:
    """``store.disk_full`` for ``what`` (what could not be written, and what was kept), with
    the hint every full disk gets: the one way each writer reports ENOSPC (its own text in
    ``again`` when the command to run again is known)."""
    return StoreError(f"{what}: the disk is full (no space left on device); {again}",
                      rule="store.disk_full")


class DiskFullAs:
    """``with DiskFullAs(what):`` an ENOSPC raised inside becomes :func:`disk_full` of
    ``what`` (for writers whose steps are many: a run's event, a thread's checkpoint)."""

    def __init__(self, what: str, again: str = DISK_FULL_HINT) -> None:
        self.what, self.again = what, again

    def __enter__(self) -> DiskFullAs:
        return self

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> None:
        import errno

        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            raise disk_full(self.what, self.again) from exc


class HistoryRewritten(StoreError):
    """HEAD no longer descends from a commit gitstate already recorded."""

    rule = "store.rewritten"


class LockTimeout(StoreError):
    """Another writer held the write lock for too long."""

    rule = "store.lock_timeout"


def did_you_mean(name: str, names: Iterable[str]) -> str:
    """The one suggestion for a name that does not exist (a key, a run, ...): " Did you
    mean 'x'?" for the nearest of ``names`` (difflib's ratio, at least 0.6), else ""."""
    import difflib

    close = difflib.get_close_matches(name, list(names), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""
