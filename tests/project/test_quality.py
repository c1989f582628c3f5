"""The code standards are part of the suite: ruff and mypy --strict stay clean, and every
file path the documents cite exists."""

from __future__ import annotations

import re
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


DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"),
               *(ROOT / "examples").glob("*.md")])
PACKAGES = sorted(p.name for p in (ROOT / "gitstate").iterdir() if (p / "__init__.py").exists())
# A cited file: gitstate/..., tests/... or bench/... from the repository's root, or
# <package>/<module>.py inside gitstate/ (store/fs.py); not the tail of a longer path.
CITED = re.compile(r"(?<![\w/.-])((?:gitstate|tests|bench|" + "|".join(PACKAGES)
                   + r")/[\w/]+\.py)\b")


def test_every_cited_file_exists() -> None:
    """A module path named in README.md, docs/*.md or examples/*.md names a file there is
    (modules move between packages; a document naming the old place would send a reader to
    nothing)."""
    sample = "`gitstate/repo.py`, store/fs.py (tests/runs/test_x.py), a/store/y.py, store/z.pyc"
    assert [m.group(1) for m in CITED.finditer(sample)] == [
        "gitstate/repo.py", "store/fs.py", "tests/runs/test_x.py"]
    missing = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for match in CITED.finditer(text):
            path = match.group(1)
            if path.split("/")[0] in PACKAGES:
                path = "gitstate/" + path
            if not (ROOT / path).is_file():
                line = text.count("\n", 0, match.start()) + 1
                missing.append(f"{doc.relative_to(ROOT)}:{line}: {match.group(1)}")
    assert missing == []
