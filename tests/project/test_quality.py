"""The code standards are part of the suite: ruff and mypy --strict stay clean."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool(name: str) -> list[str]:
    exe = Path(sys.executable).parent / name
    if exe.exists():
        return [str(exe)]
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed")
    return [found]


def test_ruff_clean() -> None:
    """ruff check reports nothing on the package and the tests."""
    paths = [p for p in ("gitstate", "tests", "bench", "examples", "hooks") if (ROOT / p).is_dir()]
    out = subprocess.run([*_tool("ruff"), "check", *paths], cwd=ROOT, capture_output=True,
                         text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_strict_clean() -> None:
    """mypy --strict (configured in pyproject.toml) reports nothing on the package."""
    out = subprocess.run([*_tool("mypy")], cwd=ROOT, capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stdout + out.stderr
