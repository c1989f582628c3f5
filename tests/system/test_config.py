"""Specification of config.toml: defaults, the seed's keys, and loud errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitstate.core.errors import ConfigError
from gitstate.system.config import Config, load_config


def _load(tmp_path: Path, text: str) -> Config:
    (tmp_path / "config.toml").write_text(text, encoding="utf-8")
    return load_config(tmp_path)


def test_missing_file_means_defaults(tmp_path: Path) -> None:
    """No config.toml: the seed's defaults."""
    config = load_config(tmp_path)
    assert (config.enabled, config.handoff_max_bytes, config.max_keys,
            config.section_max_bytes, config.locale) == (True, 16384, 32, 3072, "zh-TW")


def test_seed_keys_and_gitstate_table(tmp_path: Path) -> None:
    """[memory] and [gitstate] settings are read; other tables are left alone."""
    config = _load(tmp_path, """
[memory]
working_state_enabled = false
working_state_handoff_max_bytes = 4096
[gitstate]
max_keys = 8
locale = "ja"
timezone = "Asia/Tokyo"
[platform]
anything = "goes"
""")
    assert not config.enabled and config.handoff_max_bytes == 4096
    assert config.max_keys == 8 and config.locale == "ja" and config.timezone == "Asia/Tokyo"


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("[memory]\nworking_state_enabeld = true\n", "config.unknown"),
        ("[gitstate]\nmax_key = 3\n", "config.unknown"),
        ("[memory]\nworking_state_enabled = \"yes\"\n", "config.type"),
        ("[gitstate]\nmax_keys = true\n", "config.type"),
        ("[gitstate]\nmax_keys = 0\n", "config.range"),
        ("[gitstate]\nsection_max_bytes = 100000000\n", "config.range"),
        ("[gitstate]\nlocale = \"fr\"\n", "config.locale"),
        ("[gitstate]\ntimezone = \"Mars/Olympus\"\n", "config.timezone"),
        ("[gitstate]\nidentity_name = \"a <b>\"\n", "config.identity"),
        ("memory = 3\n", "config.type"),
        ("[memory\n", "config.syntax"),
        ("x = " + "[" * 5000 + "]" * 5000 + "\n", "config.syntax"),
    ],
)
def test_bad_settings_are_reported(tmp_path: Path, text: str, rule: str) -> None:
    """Typos, wrong types, out-of-range values and broken TOML are errors, not defaults."""
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, text)
    assert err.value.rule == rule


def test_huge_config_is_refused(tmp_path: Path) -> None:
    """A config file over 256 KiB is refused before parsing."""
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, "# " + "x" * 300_000 + "\n")
    assert err.value.rule == "config.too_large"


def _agent(tmp_path: Path, text: str) -> Path:
    from gitstate.api.repo import StateRepo

    StateRepo.init(tmp_path).close()
    (tmp_path / "config.toml").write_text(text, encoding="utf-8")
    return tmp_path


def test_a_parsed_config_is_kept_and_a_wake_up_skips_tomllib(tmp_path: Path) -> None:
    """config.toml parsed once is cached beside the repository, keyed by its bytes' SHA-1:
    the next process reads it without importing tomllib (6-7 ms of every wake-up)."""
    import subprocess
    import sys

    agent = _agent(tmp_path, '[gitstate]\nlocale = "en"\nmax_keys = 7\n')
    assert load_config(agent).max_keys == 7
    cache = agent / "state" / ".git" / "gitstate-config.json"
    assert cache.is_file()
    code = ("import sys\nfrom gitstate.system.config import load_config\n"
            f"print(load_config({str(agent)!r}).max_keys, 'tomllib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["7", "False"]
    # a changed config.toml is parsed again: the key is its content, not a time stamp
    (agent / "config.toml").write_text('[gitstate]\nlocale = "en"\nmax_keys = 9\n')
    assert load_config(agent).max_keys == 9


@pytest.mark.parametrize("planted", ["garbage", "wrong-key", "symlink", "fifo", "bad-value"])
def test_a_planted_config_cache_changes_nothing(tmp_path: Path, planted: str) -> None:
    """A cache that does not name config.toml's bytes, or is not a regular file, changes
    nothing: the file itself is parsed again, and nothing outside is read through a link.
    One that names them is checked like a fresh parse (a bad value is refused): the cache
    lives in .git, trusted as much as the refs beside it (docs/security.md)."""
    import hashlib
    import json
    import os

    text = '[gitstate]\nmax_keys = 7\n'
    agent = _agent(tmp_path, text)
    cache = agent / "state" / ".git" / "gitstate-config.json"
    key = hashlib.sha1(text.encode()).hexdigest()
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"sha1": key, "raw": {"gitstate": {"max_keys": 99}}}))
    if planted == "garbage":
        cache.write_bytes(b"\x00not json")
    elif planted == "wrong-key":
        cache.write_text(json.dumps({"sha1": "0" * 40, "raw": {"gitstate": {"max_keys": 99}}}))
    elif planted == "symlink":
        cache.symlink_to(outside)
    elif planted == "fifo":
        os.mkfifo(cache)
    else:  # the right key, a value the checks refuse
        cache.write_text(json.dumps({"sha1": key, "raw": {"gitstate": {"max_keys": "x"}}}))
    if planted == "bad-value":
        with pytest.raises(ConfigError):
            load_config(agent)
        return
    assert load_config(agent).max_keys == 7
