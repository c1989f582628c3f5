"""The package's shape, checked from its source with an AST walk (deferred and typing-only
imports count): every module lives in one of the declared packages, a package imports only
packages declared before it, imports between modules point one way, nobody takes another
module's private names or reaches into another object's private members, and modules and
classes stay readable.

Run with ``-s`` to see the package graph and the module layers (a module imports only
modules on lines above it).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "gitstate"
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 300

# The packages, lowest first: a package imports only itself and packages before it
# (docs/design.md, "The package map"; each package's __init__ says what it owns).
PACKAGES = ("core", "system", "store", "history", "write", "approvals", "accept", "runs",
            "threads", "remote", "api", "wakeup", "audit", "report", "langgraph", "mcp",
            "hosts", "cli")
# Modules of the root: the lazy public names, the command's entry point and the table of
# old module paths. Nothing inside imports the root or an old path.
ROOT_MODULES = {"gitstate", "gitstate.__main__", "gitstate.moved"}

# Private members of third-party objects that have no public equivalent, each with why.
THIRD_PARTY_PRIVATE = {
    # os._exit: a simulated crash must skip every cleanup handler
    ("gitstate.system.faults", "_exit"),
}


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, ast.Module]:
    return {module_name(p): ast.parse(p.read_text(encoding="utf-8"), str(p))
            for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(current: str, is_package: bool, level: int, target: str | None) -> str:
    base = current.split(".") if is_package else current.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, *([target] if target else [])])


def imports(mods: dict[str, ast.Module]) -> tuple[dict[str, set[str]], list[str]]:
    """Edges module -> gitstate modules it imports, and every private name taken."""
    packages = {m for m in mods if (PACKAGE.parent / m.replace(".", "/") / "__init__.py")
                .exists()}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    private: list[str] = []
    for name, tree in mods.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("gitstate"):
                        graph[name].add(_nearest(alias.name, mods))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    target = _resolve(name, name in packages, node.level, node.module)
                elif node.module and node.module.startswith("gitstate"):
                    target = node.module
                else:
                    continue
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    if full in mods:
                        graph[name].add(full)
                    else:
                        graph[name].add(_nearest(target, mods))
                        if alias.name.startswith("_") and not alias.name.startswith("__"):
                            private.append(f"{name} takes {target}.{alias.name}")
        graph[name].discard(name)
    return graph, private


def _nearest(dotted: str, mods: dict[str, ast.Module]) -> str:
    while dotted not in mods and "." in dotted:
        dotted = dotted.rsplit(".", 1)[0]
    return dotted


def private_reaches(mods: dict[str, ast.Module]) -> list[str]:
    """``x._member`` where x is not self / cls: a reach into someone else's internals."""
    found = []
    for name, tree in mods.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            attr = node.attr
            if not attr.startswith("_") or attr.startswith("__"):
                continue
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if (name, attr) in THIRD_PARTY_PRIVATE:
                continue
            found.append(f"{name}:{node.lineno} reaches .{attr} of {ast.unparse(owner)}")
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def layers(graph: dict[str, set[str]]) -> list[list[str]]:
    """Modules by depth: layer 0 imports nothing of gitstate, layer n only layers < n."""
    depth: dict[str, int] = {}

    def d(v: str, seen: frozenset[str] = frozenset()) -> int:
        if v in depth:
            return depth[v]
        if v in seen:
            return 0  # a cycle: reported by the cycle test
        depth[v] = max((d(w, seen | {v}) + 1 for w in graph[v] if w != "gitstate"),
                       default=0)
        return depth[v]

    for v in graph:
        d(v)
    out: list[list[str]] = [[] for _ in range(max(depth.values()) + 1)]
    for v, n in depth.items():
        out[n].append(v)
    return [sorted(layer) for layer in out]


@pytest.fixture(scope="module")
def source() -> dict[str, ast.Module]:
    return modules()


def test_dependency_graph_has_no_cycle(source: dict[str, ast.Module]) -> None:
    graph, _ = imports(source)
    graph.pop("gitstate", None)  # the root's lazy __getattr__ re-exports; nothing imports it
    for deps in graph.values():
        deps.discard("gitstate")
    print("\ndependency layers (each module imports only modules on lines above it):")
    for n, layer in enumerate(layers(graph)):
        print(f"  {n:>2}: {' '.join(m.removeprefix('gitstate.') for m in layer)}")
    assert cycles(graph) == []


def package_of(module: str) -> str | None:
    """The declared package a module belongs to (None for the root's own modules)."""
    if module in ROOT_MODULES:
        return None
    return module.split(".")[1]


def package_problems(graph: dict[str, set[str]]) -> list[str]:
    """A module outside every declared package, or an import of a package declared later."""
    problems = []
    for module, deps in sorted(graph.items()):
        own = package_of(module)
        if own is None:
            continue
        if own not in PACKAGES:
            problems.append(f"{module}: not in a declared package")
            continue
        for dep in sorted(deps):
            other = package_of(dep)
            if other is not None and other in PACKAGES and \
                    PACKAGES.index(other) > PACKAGES.index(own):
                problems.append(f"{module} imports {dep}: {other} comes after {own}")
    return problems


def package_graph(graph: dict[str, set[str]]) -> list[str]:
    """One line per package, lowest first: the packages its modules import."""
    uses: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for module, deps in graph.items():
        own = package_of(module)
        for dep in deps:
            other = package_of(dep)
            if own in uses and other is not None and other != own:
                uses[own].add(other)
    return [f"{n:>2}: {pkg:<10} <- "
            f"{' '.join(p for p in PACKAGES if p in uses[pkg]) or '(nothing of gitstate)'}"
            for n, pkg in enumerate(PACKAGES)]


def test_packages_import_only_the_packages_below_them(source: dict[str, ast.Module]) -> None:
    graph, _ = imports(source)
    lines = package_graph(graph)
    print("\npackage graph (lowest first; each imports only packages above it):")
    print("\n".join(lines))
    assert package_problems(graph) == []
    # docs/design.md shows the same graph (it is what a reader checks the map against)
    design = (PACKAGE.parent / "docs" / "design.md").read_text(encoding="utf-8")
    shown = design.split("The package graph:", 1)[1].split("```text\n", 1)[1].split("```")[0]
    assert shown.splitlines() == lines, "update docs/design.md's package graph"


def may_import(doc: str, own: str) -> set[str]:
    """The packages a package's docstring says it may import: those its ``May import:``
    paragraph names, or every package before it when it says so."""
    text = " ".join(doc.split("May import:", 1)[1].split("\n\n", 1)[0].split())
    if "every package" in text:
        return set(PACKAGES[:PACKAGES.index(own)])
    return {p for p in PACKAGES if re.search(rf"\b{p}\b", text)} - {own}


def docstring_problems(graph: dict[str, set[str]], docs: dict[str, str]) -> list[str]:
    """An import of a package the importer's own docstring does not allow."""
    problems = []
    for module, deps in sorted(graph.items()):
        own = package_of(module)
        if own not in docs:
            continue
        allowed = may_import(docs[own], own) | {own}
        for dep in sorted(deps):
            other = package_of(dep)
            if other is not None and other not in allowed:
                problems.append(f"{module} imports {dep}: gitstate/{own}/__init__.py's "
                                f"May import line does not name {other}")
    return problems


def test_imports_are_what_each_package_docstring_allows(source: dict[str, ast.Module]) -> None:
    docs = {pkg: ast.get_docstring(ast.parse((PACKAGE / pkg / "__init__.py").read_text()))
            or "" for pkg in PACKAGES}
    assert docstring_problems(imports(source)[0], docs) == []
    assert may_import(docs["core"], "core") == set()  # "nothing of gitstate"
    assert may_import(docs["api"], "api") == set(PACKAGES[:PACKAGES.index("api")])
    broken = {"gitstate.threads.x": {"gitstate.runs.model"}}
    assert docstring_problems(broken, docs) == [
        "gitstate.threads.x imports gitstate.runs.model: gitstate/threads/__init__.py's "
        "May import line does not name runs"]


def test_nothing_inside_takes_a_name_an_old_module_path_hands_on(
        source: dict[str, ast.Module]) -> None:
    """``from ..audit import verify`` would take a deprecated name through the package's
    __getattr__ (gitstate/moved.py): inside gitstate every name comes from its module."""
    from gitstate.moved import FORWARDED

    graph, _ = imports(source)
    assert sorted(f"{m} imports {d}" for m, deps in graph.items() for d in deps
                  if d in FORWARDED and m != d) == []


def test_every_package_says_what_it_owns_and_may_import() -> None:
    present = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    assert present == sorted(PACKAGES)
    for pkg in PACKAGES:
        doc = ast.get_docstring(ast.parse((PACKAGE / pkg / "__init__.py").read_text()))
        assert doc and "May import:" in doc, pkg
    roots = {module_name(p) for p in PACKAGE.glob("*.py")}
    assert roots == ROOT_MODULES


def test_the_package_checker_sees_what_it_forbids() -> None:
    graph = {"gitstate.core.a": {"gitstate.write.b"}, "gitstate.write.b": {"gitstate.core.a"},
             "gitstate.nowhere.c": set(), "gitstate.moved": set()}
    assert package_problems(graph) == [
        "gitstate.core.a imports gitstate.write.b: write comes after core",
        "gitstate.nowhere.c: not in a declared package"]


def test_nothing_imports_the_package_root(source: dict[str, ast.Module]) -> None:
    graph, _ = imports(source)
    users = sorted(m for m, deps in graph.items() if "gitstate" in deps and m != "gitstate")
    assert users == []


def test_no_private_names_taken(source: dict[str, ast.Module]) -> None:
    assert imports(source)[1] == []


def test_no_reach_into_private_members(source: dict[str, ast.Module]) -> None:
    assert private_reaches(source) == []


def test_modules_and_classes_stay_readable(source: dict[str, ast.Module]) -> None:
    too_long = []
    for name, tree in source.items():
        path = PACKAGE.parent / (name.replace(".", "/") + ".py")
        if not path.exists():
            path = PACKAGE.parent / name.replace(".", "/") / "__init__.py"
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            too_long.append(f"module {name}: {lines} lines")
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                size = node.end_lineno - node.lineno + 1
                if size > MAX_CLASS_LINES:
                    too_long.append(f"class {name}.{node.name}: {size} lines")
    assert too_long == []


def test_the_checker_sees_what_it_forbids() -> None:
    """The walk itself: a cycle, a private import and a reach are each found."""
    mods = {
        "gitstate.a": ast.parse("from .b import thing\ndef f(x):\n    return x._inner\n"),
        "gitstate.b": ast.parse("def g():\n    from .a import _hidden\n"),
    }
    graph, private = imports(mods)
    assert cycles(graph) == [["gitstate.a", "gitstate.b"]]
    assert private == ["gitstate.b takes gitstate.a._hidden"]
    assert private_reaches(mods) == ["gitstate.a:3 reaches ._inner of x"]


# -- file writes: one module (gitstate/system/safefile.py) owns every write-open ------------------
WRITE_CALLS = {"write_text", "write_bytes", "open", "chmod", "lchmod", "chown", "touch"}
OS_CALLS = {"open", "chmod", "lchmod", "chown", "mkfifo", "truncate"}
SHUTIL_WRITES = {"copy", "copy2", "copyfile", "copytree", "move", "copyfileobj"}
TEMPFILE_OPENS = {"NamedTemporaryFile", "mkstemp", "TemporaryFile", "SpooledTemporaryFile"}
WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC")
# Opens left outside safefile: reads only (each checked below to carry no write flag or
# mode), by (module, function), with why.
READ_OPENS = {
    ("gitstate.write.maintenance", "_stale"): "/proc/<pid>/stat, the kernel's: is the pid a zombie",
    ("gitstate.store.durability", "_device_name"): "/proc/self/mountinfo, the kernel's",
    ("gitstate.store.durability", "fsync_dir"): "a read-only descriptor, only to fsync it",
    ("gitstate.store.durability", "fsync_paths"): "read-only descriptors, only to fsync them",
    ("gitstate.store.fs", "fsync_file"): "a read-only descriptor, only to fsync it",
    ("gitstate.store.base", "_fsync_dirs"): "a read-only descriptor, only to fsync it",
    ("gitstate.store.refs", "ref"): "a loose ref, O_NOFOLLOW | O_NONBLOCK, fstat-checked",
    ("gitstate.store.objheader", "*"): "git objects and packs read by descriptor, O_NOFOLLOW",
    ("gitstate.store.packindex", "*"): "a pack read back to index it",
}
# The one write outside: not under an agent directory, a report or a log path.
OUTSIDE_WRITES = {
    ("gitstate.system.sshsig", "signer_of"): "the signature, into a TemporaryDirectory of its own "
                                      "that ssh-keygen reads",
}


def file_opens(mods: dict[str, ast.Module]) -> list[tuple[str, str, str, ast.Call]]:
    """(module, enclosing function, call, node) for every call that can open, create or
    chmod a file: builtin ``open``, ``os.open``/``chmod``..., ``X.write_text``/
    ``write_bytes``/``open``/``chmod``, ``shutil`` copies and moves, ``tempfile`` files."""
    found: list[tuple[str, str, str, ast.Call]] = []

    def visit(name: str, node: ast.AST, func: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = node.name
        if isinstance(node, ast.Call):
            f, call = node.func, None
            if isinstance(f, ast.Name) and f.id == "open":
                call = "open"
            elif isinstance(f, ast.Attribute):
                owner = ast.unparse(f.value)
                if owner == "os" and f.attr in OS_CALLS:
                    call = f"os.{f.attr}"
                elif owner == "shutil" and f.attr in SHUTIL_WRITES:
                    call = f"shutil.{f.attr}"
                elif owner == "tempfile" and f.attr in TEMPFILE_OPENS:
                    call = f"tempfile.{f.attr}"
                elif owner not in ("os", "shutil", "tempfile") and f.attr in WRITE_CALLS:
                    call = f".{f.attr}"
            if call is not None:
                found.append((name, func, call, node))
        for child in ast.iter_child_nodes(node):
            visit(name, child, func)

    for name, tree in mods.items():
        visit(name, tree, "<module>")
    return found


def _writes(tree: ast.Module, call: str, node: ast.Call) -> bool:
    """Whether an allowed open may write: a write flag in os.open's flags (a module-level
    name followed to its value), a mode other than read in open's."""
    if call == "os.open":
        flags = node.args[1] if len(node.args) > 1 else None
        text = ast.unparse(flags) if flags is not None else ""
        for stmt in tree.body:
            if isinstance(stmt, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == text for t in stmt.targets):
                text = ast.unparse(stmt.value)
        return any(flag in text for flag in WRITE_FLAGS)
    if call == "open":
        mode = node.args[1] if len(node.args) > 1 else next(
            (k.value for k in node.keywords if k.arg == "mode"), None)
        if mode is None:
            return False
        return not (isinstance(mode, ast.Constant) and isinstance(mode.value, str)
                    and mode.value.startswith("r") and "+" not in mode.value)
    return True  # write_text, chmod, shutil.copy...: writes by name


def write_open_problems(mods: dict[str, ast.Module]) -> list[str]:
    problems = []
    for module, func, call, node in file_opens(mods):
        if module == "gitstate.system.safefile":
            continue
        where = f"{module}:{node.lineno} ({func}) calls {call}"
        if (module, func) in OUTSIDE_WRITES:
            continue
        allowed = (module, func) in READ_OPENS or (module, "*") in READ_OPENS
        if not allowed:
            problems.append(f"{where}: open files through gitstate/system/safefile.py")
        elif _writes(mods[module], call, node):
            problems.append(f"{where}: allowed for reads only, and this one writes")
    return problems


def test_every_write_open_goes_through_safefile(source: dict[str, ast.Module]) -> None:
    assert write_open_problems(source) == []


def test_the_write_open_checker_sees_what_it_forbids() -> None:
    mods = {
        "gitstate.x": ast.parse(
            "import os, shutil\nfrom pathlib import Path\n"
            "def a(p):\n    Path(p).write_text('x')\n"
            "def b(p):\n    open(p, 'a').write('x')\n"
            "def c(p):\n    os.chmod(p, 0o755)\n"
            "def d(p):\n    shutil.copy(p, p + '.bak')\n"
            "def e(p):\n    return os.open(p, os.O_RDWR | os.O_CREAT)\n"
            "def f(p):\n    return p.open('w')\n"),
        "gitstate.write.maintenance": ast.parse(
            "def _stale(p):\n    open(p, 'rb')\n    open(p, 'wb')\n"),
        "gitstate.system.safefile": ast.parse("import os\ndef w(p):\n    os.open(p, os.O_WRONLY)\n"),
    }
    problems = write_open_problems(mods)
    assert [p.split(" calls ")[0] for p in problems] == [
        "gitstate.x:4 (a)", "gitstate.x:6 (b)", "gitstate.x:8 (c)", "gitstate.x:10 (d)",
        "gitstate.x:12 (e)", "gitstate.x:14 (f)", "gitstate.write.maintenance:3 (_stale)"]
    assert problems[-1].endswith("allowed for reads only, and this one writes")
