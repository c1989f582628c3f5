"""config.toml: the agent directory's settings, read with the standard library only.

The file is shared with the agent platform, so only three tables belong to gitstate:
``[memory]`` (the seed's keys), ``[gitstate]`` and ``[trust]`` (signing and signers; its
paths are taken relative to the agent directory). Other tables are left alone. Inside those,
an unknown setting or a wrongly typed one is an error, never ignored: a typo in
``max_keys`` must not silently fall back to the default.
"""

from __future__ import annotations

import os

try:  # the builtin module imports in microseconds; hashlib loads OpenSSL (~3 ms)
    from _sha1 import sha1 as _sha1  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - other Python implementations
    from hashlib import sha1 as _sha1

from ..core.layout import CONFIG_CACHE_FILE, STATE_DIR
from ..core.layout import CONFIG_FILE as CONFIG_FILE  # re-exported for callers
from ..core.timebase import UTC, datetime, tzinfo

TYPE_CHECKING = False  # not `from typing import`: typing costs ~3 ms per wake-up
if TYPE_CHECKING:
    from typing import Any

    from ..core.errors import ConfigError

LOCALES = ("zh-TW", "en", "ja")
DURABILITY_MODES = ("auto", "strict", "fast")
MAX_CONFIG_BYTES = 256 * 1024


class Config:
    """Resolved settings; defaults are the seed's (class attributes, overridden per file)."""

    enabled: bool = True
    handoff_max_bytes: int = 16384
    max_keys: int = 32
    section_max_bytes: int = 3072
    # the longest injection a runtime of this agent keeps whole (Claude Code: 10,000
    # characters of a hook's additionalContext); enforced at write time, like the key cap
    injection_max_chars: int = 10000
    handoff_plain_max_chars: int = 1200
    locale: str = "zh-TW"
    # the MCP tool names the section tells the model to call (a runtime that exposes the
    # tools under other names sets them; docs/mcp.md, "Tool names in the section")
    set_tool: str = "working_state_set"
    get_tool: str = "working_state_get"
    timezone: str | None = None  # None: the machine's local time zone
    identity_name: str = "gitstate"
    identity_email: str = "gitstate@localhost"
    max_stored_keys: int = 256
    sync: str = "local-first"  # or "remote-first": every write is pushed before it returns
    auto_gc: bool = True
    gc_loose_objects: int = 3000
    # how writes reach the disk: auto (picked from the file system), strict or fast; see
    # docs/reliability.md, "Durability modes"
    durability: str = "auto"
    # what one pull or fetch may bring from a remote, and how long each network step may
    # take (docs/security.md, "What arrives from a remote")
    pull_max_new_runs: int = 1000
    pull_max_new_journals: int = 100
    fetch_max_objects: int = 1_000_000
    fetch_max_bytes: int = 512 << 20
    fetch_max_inflated_bytes: int = 4 << 30
    remote_connect_seconds: int = 15
    remote_stall_seconds: int = 60
    remote_total_seconds: int = 900
    # who may claim a role across machines (docs/security.md, "Who may claim a role"): the
    # private SSH key this clone signs its commits with, git's allowed-signers file naming
    # the keys that may act as human:<name> / runtime:<name>, and whether the remote's
    # pushers are trusted instead (its hook authenticates them)
    signing_key: str | None = None
    allowed_signers: str | None = None
    trust_remote: bool = False

    def __init__(self, **values: object) -> None:
        for name, value in values.items():
            if not hasattr(Config, name):
                raise TypeError(f"unknown setting {name}")
            setattr(self, name, value)

    def __repr__(self) -> str:
        return f"Config({vars(self)!r})"


# (table, setting) -> (Config field, type, lower bound, upper bound)
_SETTINGS: dict[tuple[str, str], tuple[str, type, int | None, int | None]] = {
    ("memory", "working_state_enabled"): ("enabled", bool, None, None),
    ("memory", "working_state_handoff_max_bytes"): ("handoff_max_bytes", int, 64, 1 << 20),
    ("gitstate", "max_keys"): ("max_keys", int, 1, 256),
    ("gitstate", "section_max_bytes"): ("section_max_bytes", int, 256, 65536),
    ("gitstate", "injection_max_chars"): ("injection_max_chars", int, 1000, 1_000_000),
    ("gitstate", "handoff_plain_max_chars"): ("handoff_plain_max_chars", int, 80, 16384),
    ("gitstate", "locale"): ("locale", str, None, None),
    ("gitstate", "set_tool"): ("set_tool", str, None, None),
    ("gitstate", "get_tool"): ("get_tool", str, None, None),
    ("gitstate", "timezone"): ("timezone", str, None, None),
    ("gitstate", "identity_name"): ("identity_name", str, None, None),
    ("gitstate", "identity_email"): ("identity_email", str, None, None),
    ("gitstate", "max_stored_keys"): ("max_stored_keys", int, 1, 4096),
    ("gitstate", "auto_gc"): ("auto_gc", bool, None, None),
    ("gitstate", "sync"): ("sync", str, None, None),
    ("gitstate", "gc_loose_objects"): ("gc_loose_objects", int, 50, 10_000_000),
    ("gitstate", "durability"): ("durability", str, None, None),
    ("gitstate", "pull_max_new_runs"): ("pull_max_new_runs", int, 1, 10_000_000),
    ("gitstate", "pull_max_new_journals"): ("pull_max_new_journals", int, 1, 1_000_000),
    ("gitstate", "fetch_max_objects"): ("fetch_max_objects", int, 100, 1 << 31),
    ("gitstate", "fetch_max_bytes"): ("fetch_max_bytes", int, 1 << 20, 1 << 40),
    ("gitstate", "fetch_max_inflated_bytes"): ("fetch_max_inflated_bytes", int, 1 << 20,
                                               1 << 44),
    ("gitstate", "remote_connect_seconds"): ("remote_connect_seconds", int, 1, 3600),
    ("gitstate", "remote_stall_seconds"): ("remote_stall_seconds", int, 1, 3600),
    ("gitstate", "remote_total_seconds"): ("remote_total_seconds", int, 1, 86400),
    ("trust", "signing_key"): ("signing_key", str, None, None),
    ("trust", "allowed_signers"): ("allowed_signers", str, None, None),
    ("trust", "trust_remote"): ("trust_remote", bool, None, None),
}
_ = [getattr(Config, attr) for attr, *_ in _SETTINGS.values()]  # every setting has a default


def _error(message: str, *, rule: str) -> ConfigError:
    """A ConfigError, its module imported only then: the wake-up path reads config.toml on
    every run, and the error tree is a third of a millisecond to import."""
    from ..core.errors import ConfigError

    return ConfigError(message, rule=rule)


def load_config(agent_dir: str | os.PathLike[str]) -> Config:
    """Read ``<agent_dir>/config.toml``; a missing file means all defaults."""
    from .safefile import NotRegular, TooLarge, read_regular

    path = os.path.join(agent_dir, CONFIG_FILE)
    try:
        data = read_regular(path, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        return Config()
    except TooLarge as exc:
        raise _error(
            f"{path} is over {MAX_CONFIG_BYTES} bytes; such config files are refused",
            rule="config.too_large",
        ) from exc
    except NotRegular as exc:  # a symlink, FIFO or device: never followed or waited on
        raise _error(f"{path} is not a regular file (a symlink, FIFO or device); "
                     "config.toml must be a plain file", rule="config.not_regular") from exc
    except OSError as exc:
        raise _error(f"cannot read {path}: {exc}", rule="config.unreadable") from exc
    cache = os.path.join(agent_dir, STATE_DIR, ".git", CONFIG_CACHE_FILE)
    key = _sha1(data).hexdigest()
    raw = _cached(cache, key)
    if raw is None:
        import tomllib  # only for a config.toml not seen before

        try:
            raw = tomllib.loads(data.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise _error(f"{path} is not valid TOML: {exc}", rule="config.syntax") from exc
        _remember(cache, key, raw)
    config = config_from_dict(raw, source=str(path))
    for name in ("signing_key", "allowed_signers"):  # relative to the agent directory
        value = getattr(config, name)
        if value is not None:
            setattr(config, name, os.path.join(agent_dir, os.path.expanduser(value)))
    return config


def _cached(cache: str, key: str) -> dict[str, Any] | None:
    """config.toml as parsed before, when the cache names these very bytes (their SHA-1):
    tomllib costs 6-7 ms to import, and every wake-up reads config.toml. Whatever the cache
    holds is validated again by config_from_dict, like a fresh parse."""
    import json

    from .safefile import read_regular

    try:
        entry = json.loads(read_regular(cache, 1 << 20))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(entry, dict) or entry.get("sha1") != key or \
            not isinstance(entry.get("raw"), dict):
        return None
    raw: dict[str, Any] = entry["raw"]
    return raw


def _remember(cache: str, key: str, raw: dict[str, Any]) -> None:
    """Keep the parse for the next wake-up: a temporary file renamed over the cache, never
    flushed (it is re-derived from config.toml), never through a symlink; skipped when the
    repository is absent or read-only, or the TOML holds what JSON cannot (dates)."""
    import json

    if not os.path.isdir(os.path.dirname(cache)):
        return
    try:
        text = json.dumps({"sha1": key, "raw": raw}, sort_keys=True)
    except (TypeError, ValueError, RecursionError):  # dates; tables nested too deep
        return
    from .safefile import write_atomic

    try:
        write_atomic(cache, text.encode())
    except OSError:
        return  # no cache: the next read parses config.toml


def config_from_dict(raw: dict[str, Any], *, source: str = "config") -> Config:
    """Validate the ``[memory]`` and ``[gitstate]`` tables of a parsed config."""
    values: dict[str, Any] = {}
    for table in ("memory", "gitstate", "trust"):
        section = raw.get(table, {})
        if not isinstance(section, dict):
            raise _error(f"{source}: [{table}] must be a table", rule="config.type")
        for name, value in section.items():
            spec = _SETTINGS.get((table, name))
            if spec is None:
                known = sorted(n for t, n in _SETTINGS if t == table)
                raise _error(
                    f"{source}: unknown setting [{table}] {name}; known: {', '.join(known)}",
                    rule="config.unknown",
                )
            attr, kind, low, high = spec
            # bool is an int in Python; TOML keeps them apart, and so do we.
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise _error(
                    f"{source}: [{table}] {name} must be a {kind.__name__}, "
                    f"got {type(value).__name__}",
                    rule="config.type",
                )
            if isinstance(value, int) and (
                (low is not None and value < low) or (high is not None and value > high)
            ):
                raise _error(
                    f"{source}: [{table}] {name} = {value} is outside {low}..{high}",
                    rule="config.range",
                )
            values[attr] = value
    config = Config(**values)
    if config.locale not in LOCALES:
        raise _error(
            f"{source}: [gitstate] locale must be one of {', '.join(LOCALES)}",
            rule="config.locale",
        )
    if config.timezone is not None:
        check_timezone(config.timezone)
    for name in ("set_tool", "get_tool"):
        tool = getattr(config, name)
        if not (0 < len(tool) <= 64 and tool.isascii() and
                tool.replace("_", "a").replace("-", "a").replace(".", "a").isalnum()):
            raise _error(f"{source}: [gitstate] {name} must be a tool name (1-64 letters, "
                         f"digits, _ - .), not {tool!r}", rule="config.tool_name")
    if config.durability not in DURABILITY_MODES:
        raise _error(f"{source}: [gitstate] durability must be one of "
                     f"{', '.join(DURABILITY_MODES)}", rule="config.durability")
    if config.sync not in ("local-first", "remote-first"):
        raise _error(f"{source}: [gitstate] sync must be local-first or remote-first",
                     rule="config.sync")
    for name in ("identity_name", "identity_email"):
        text = getattr(config, name)
        if not text or any(c in text for c in "<>\n\r\0"):
            raise _error(f"{source}: [gitstate] {name} is not usable in a git identity",
                         rule="config.identity")
    return config


def check_timezone(name: str) -> None:
    """Refuse a time zone name that the zoneinfo database does not know."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        from ..core.errors import did_you_mean

        raise _error(f"unknown time zone {name!r} (an IANA name such as 'Asia/Taipei' or "
                     f"'UTC')." + did_you_mean(name, available_timezones()),
                     rule="config.timezone") from exc


def resolve_tz(name: str | None) -> tzinfo:
    """The configured time zone, or the machine's local one when none is set."""
    if name is None:
        local = datetime.now().astimezone().tzinfo
        return local if local is not None else UTC
    from zoneinfo import ZoneInfo

    return ZoneInfo(name)
