"""Specification of config.toml: defaults, the seed's keys, and loud errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitstate.config import Config, load_config
from gitstate.errors import ConfigError


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
