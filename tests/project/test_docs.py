"""The suite runs the documentation: every shell and Python block of README.md, docs/*.md and
examples/*.md, with Sybil (docs/cli.md, "Documentation that runs").

- ``python`` blocks run in one namespace per document; an ``output`` block right after one
  is what it printed.
- ``console`` blocks are ``$ command`` lines, each followed by what it prints (stdout and
  stderr), compared with placeholders: a commit id (7 to 40 hex digits) and an ISO 8601 time
  match any, a line ``...`` any lines, and ``...`` inside a line any text.
- ``sh`` blocks are commands whose output is not shown; each must exit 0, or the status
  its comment names (``(exit 1)``).
- ``<!-- skip: next "illustration: why" -->`` before a block marks it as illustration only.

Commands run through ``sh`` in a sandbox: HOME is a fresh directory (so ``~/agents/trader``
is new), ``gitstate`` is this checkout's (warm: tests/docshell.py), and the documents'
machine-wide paths (``/tmp/...``, ``/srv/...``, ``/etc/...``, in commands and Python alike)
are mapped into it. Documents that audit the demo share one demo agent."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any
from unittest import SkipTest

import pytest
from sybil import Example, Sybil
from sybil.parsers.markdown import CodeBlockParser, SkipParser

from tests.docshell import client_script

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"),
               *(ROOT / "examples").glob("*.md")])
RUN = {"python", "output", "console", "sh"}
SHOWN = {"", "toml", "yaml", "json", "text"}  # data and output, not commands
ABSOLUTE = re.compile(r"(?<![\w./-])/(tmp|srv|etc)/")  # the documents' machine-wide paths

_ID = r"[0-9a-f]{7,40}|[0-9]{8}T[0-9]{6,12}Z-[0-9a-f]{4}"  # commits, objects; receipts
_TIME = "|".join([  # ISO 8601; git's --date=iso; a day and a minute (git log, the section)
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]+)?)?(?:Z|[+-][0-9]{2}:[0-9]{2})?",
    r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2} [+-][0-9]{4}",
    r"[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}"])


def pattern(expected: str) -> re.Pattern[str]:
    """A shown output as a regex: ids and times are placeholders, ``...`` elides."""
    parts = []
    for line in expected.rstrip("\n").split("\n"):
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
            continue
        chunks = []
        for piece in re.split(rf"(\.\.\.|{_TIME}|\b(?:{_ID})\b)", line.rstrip()):
            if piece == "...":
                chunks.append(r"[^\n]*")
            elif re.fullmatch(_TIME, piece):
                chunks.append(f"(?:{_TIME})")
            elif re.fullmatch(_ID, piece):
                chunks.append(f"(?:{_ID})")
            else:
                chunks.append(re.escape(piece))
        parts.append("".join(chunks) + r"[ \t]*\n")
    return re.compile("".join(parts))


class Shell:
    """The sandbox the documents' commands run in."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.home = base / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        bindir = base / "bin"
        bindir.mkdir(exist_ok=True)
        shim = bindir / "gitstate"
        shim.write_text(client_script(WARM.path) if WARM.path else
                        f'#!/bin/sh\nexec "{sys.executable}" -m gitstate "$@"\n')
        shim.chmod(0o755)
        self.env = {"PATH": f"{bindir}:{Path(sys.executable).parent}:{os.environ['PATH']}", "HOME": str(self.home),
                    "LANG": "C.UTF-8", "TZ": "UTC", "PYTHONPATH": str(ROOT),
                    "GIT_CONFIG_NOSYSTEM": "1"}
        self.exports: list[str] = []
        if not (base / "examples").exists():
            (base / "examples").symlink_to(ROOT / "examples")

    def mapped(self, text: str) -> str:
        """``text`` with /tmp/..., /srv/... and /etc/... moved into the sandbox."""
        return ABSOLUTE.sub(lambda m: f"{self.base}/{m.group(1)}/", text)

    def run(self, command: str) -> tuple[int, str]:
        """Run one command (after the block's and the document's earlier exports), its
        stderr joined to its stdout."""
        script = "\n".join(["exec 2>&1", *self.exports, self.mapped(command)])
        if command.lstrip().startswith("export "):
            self.exports.append(self.mapped(command))
        out = subprocess.run(["sh", "-c", script], cwd=self.base,
                             env=self.env, capture_output=True, text=True, timeout=120,
                             check=False)
        return out.returncode, out.stdout


def _commands(source: str) -> list[str]:
    """A block's commands: continuation lines (a backslash, an open quote) joined."""
    out, pending = [], ""
    for line in source.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        if pending.endswith("\\") or pending.split("#")[0].count("'") % 2:
            continue
        if pending.strip() and not pending.lstrip().startswith("#"):
            out.append(pending)
        pending = ""
    return out


def run_sh(example: Example) -> None:
    shell: Shell = example.namespace["shell"]
    for command in _commands(example.parsed):
        wanted = re.search(r"#.*\bexit (\d)\b", command)
        code, output = shell.run(command)
        assert code == (int(wanted.group(1)) if wanted else 0), \
            f"{example.path}:{example.line}: {command!r} exited {code}:\n{output}"


def run_console(example: Example) -> None:
    shell: Shell = example.namespace["shell"]
    steps: list[tuple[str, list[str]]] = []
    for line in example.parsed.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps and steps[-1][0].endswith("\\"):
            steps[-1] = (steps[-1][0] + "\n" + line, [])
        elif steps:
            steps[-1][1].append(line)
    for command, shown in steps:
        _, output = shell.run(command)
        expected = "\n".join(shown).strip("\n")
        if expected:
            assert pattern(expected + "\n").fullmatch(output.rstrip("\n") + "\n"), \
                f"{example.path}:{example.line}: `{command}` printed:\n{output}"


def run_python(example: Example) -> None:
    buf = io.StringIO()
    source = example.namespace["shell"].mapped(example.parsed)
    with contextlib.redirect_stdout(buf):
        exec(compile(source, f"{example.path}:{example.line}", "exec"), example.namespace)
    example.namespace["_printed"] = buf.getvalue()


def check_output(example: Example) -> None:
    printed = example.namespace.pop("_printed", None)
    assert printed is not None, f"{example.path}:{example.line}: output with no python before"
    assert pattern(example.parsed).fullmatch(printed), \
        f"{example.path}:{example.line}: the block above printed:\n{printed}"


class Warm:
    """The warm gitstate server (tests/docshell.py) of this test module, once started."""

    path = ""
    process: subprocess.Popen[bytes] | None = None


WARM = Warm()


@pytest.fixture(scope="module", autouse=True)
def warm_gitstate(tmp_path_factory: pytest.TempPathFactory) -> Any:
    sock = tmp_path_factory.mktemp("warm") / "gitstate.sock"
    WARM.process = subprocess.Popen([sys.executable, "-m", "tests.docshell", str(sock)],
                                    cwd=ROOT)
    for _ in range(200):
        if sock.exists():
            break
        time.sleep(0.05)
    WARM.path = str(sock)
    yield
    WARM.process.kill()
    WARM.process.wait()
    WARM.path = ""


SYBIL = Sybil(parsers=[SkipParser(), CodeBlockParser("python", run_python),
                       CodeBlockParser("output", check_output),
                       CodeBlockParser("console", run_console), CodeBlockParser("sh", run_sh)])


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One demo agent for every document that audits it (docs/auditing.md's setup)."""
    base = tmp_path_factory.mktemp("demo")
    code, output = Shell(base).run("gitstate demo --agent-dir /tmp/audit-demo")
    assert code == 0, output
    return base / "tmp" / "audit-demo"


def test_every_block_is_run_or_marked() -> None:
    """No shell or Python block escapes: each fenced block's language is one the suite runs
    or one that only shows data."""
    for path in DOCS:
        for lang in re.findall(r"^```(\w*)", path.read_text(encoding="utf-8"), re.M):
            assert lang in RUN | SHOWN or lang == "", f"{path.name}: a ```{lang} block"


@pytest.mark.parametrize("path", DOCS, ids=[p.relative_to(ROOT).as_posix() for p in DOCS])
def test_document_runs(path: Path, tmp_path: Path, demo: Path) -> None:
    base = tmp_path / "sandbox"
    shutil.copytree(demo, base / "tmp" / "audit-demo", symlinks=True)
    document = SYBIL.parse(path)
    module = types.ModuleType(f"doc_{path.stem.replace('-', '_')}")  # what classes name
    sys.modules[module.__name__] = module
    document.namespace = module.__dict__
    document.namespace["shell"] = Shell(base)
    failures = []
    cwd, tempdir = os.getcwd(), tempfile.tempdir
    os.chdir(base)
    tempfile.tempdir = str(base)  # a block's tempfile.mkdtemp() stays in the sandbox
    try:
        for example in document:
            try:
                example.evaluate()
            except SkipTest as exc:
                assert str(exc).startswith("illustration"), f"{path.name}: skip reason {exc}"
            except AssertionError as exc:
                failures.append(str(exc).split("\nassert ")[0])
    finally:
        os.chdir(cwd)
        tempfile.tempdir = tempdir
        del sys.modules[module.__name__]
    assert not failures, "\n\n".join(failures)
