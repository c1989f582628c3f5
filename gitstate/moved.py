"""Where the modules of earlier releases went: each old path keeps working, with a
DeprecationWarning naming the new one (``from gitstate.repo import StateRepo`` gets
``gitstate.api.repo``'s class and a warning to import it from ``gitstate`` or its new home).

The package root puts a small finder at the end of ``sys.meta_path`` that hands a gitstate
name no file answered to :data:`FINDER`: it answers only for the names in :data:`MOVED`,
so it costs nothing on any other import; the wake-up path never imports this module. An old
module that was split later (:data:`SPLIT`) is a stand-in that finds each name in its
homes. Five old modules share their name with a new package (``gitstate.audit``,
``report``, ``runs``, ``approvals``, ``langgraph``): those packages hand the old module's
names on through :func:`forward` from their ``__getattr__``. The deprecated methods of
``StateRepo`` are :class:`Moved` attributes.
Nothing inside gitstate imports an old path (tests/project/test_architecture.py).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `from typing import`: the root imports this on every wake-up
if TYPE_CHECKING:
    from typing import Any

MOVED = {  # old module -> its new home
    "gitstate.approval_api": "gitstate.api.approvals",
    "gitstate.approval_life": "gitstate.history.approvals",
    "gitstate.approval_policy": "gitstate.core.policy",
    "gitstate.backlog": "gitstate.history.backlog",
    "gitstate.checks": "gitstate.write.checks",
    "gitstate.clockbase": "gitstate.system.clock",
    "gitstate.config": "gitstate.system.config",
    "gitstate.demo": "gitstate.cli.demo",
    "gitstate.engine": "gitstate.write.engine",
    "gitstate.errors": "gitstate.core.errors",
    "gitstate.fastpath": "gitstate.wakeup.fastpath",
    "gitstate.faults": "gitstate.system.faults",
    "gitstate.fleet": "gitstate.audit.fleet",
    "gitstate.foreign": "gitstate.accept.main",
    "gitstate.gitcli": "gitstate.system.gitcli",
    "gitstate.githooks": "gitstate.remote.githooks",
    "gitstate.hostcheck": "gitstate.hosts.check",
    "gitstate.htmlreport": "gitstate.report.html",
    "gitstate.httpguard": "gitstate.system.httpguard",
    "gitstate.install": "gitstate.hosts.install",
    "gitstate.layout": "gitstate.core.layout",
    "gitstate.ledger": "gitstate.runs.ledger",
    "gitstate.lgcheck": "gitstate.threads.check",
    "gitstate.lgfence": "gitstate.langgraph.fence",
    "gitstate.lgformat": "gitstate.threads.format",
    "gitstate.lgindex": "gitstate.langgraph.index",
    "gitstate.lgjournal": "gitstate.threads.journal",
    "gitstate.lgmatch": "gitstate.langgraph.match",
    "gitstate.lgread": "gitstate.langgraph.read",
    "gitstate.lgstore": "gitstate.langgraph.store",
    "gitstate.lgsync": "gitstate.threads.sync",
    "gitstate.lgvalue": "gitstate.threads.value",
    "gitstate.locking": "gitstate.system.locking",
    "gitstate.maintenance": "gitstate.write.maintenance",
    "gitstate.maintree": "gitstate.write.maintree",
    "gitstate.mcp_events": "gitstate.mcp.events",
    "gitstate.mcp_http": "gitstate.mcp.http",
    "gitstate.mcp_refusal": "gitstate.mcp.refusal",
    "gitstate.mcp_schema": "gitstate.mcp.schema",
    "gitstate.mcp_sdk": "gitstate.mcp.sdk",
    "gitstate.mcp_server": "gitstate.mcp.server",
    "gitstate.mcp_tools": "gitstate.mcp.tools",
    "gitstate.model": "gitstate.core.model",
    "gitstate.planners": "gitstate.write.planners",
    "gitstate.projection": "gitstate.history.projection",
    "gitstate.promote": "gitstate.write.promote",
    "gitstate.reader": "gitstate.history.reader",
    "gitstate.receipts": "gitstate.history.receipts",
    "gitstate.records": "gitstate.core.records",
    "gitstate.redact": "gitstate.history.redact",
    "gitstate.rederive": "gitstate.accept.rederive",
    "gitstate.refusals": "gitstate.history.refusals",
    "gitstate.render": "gitstate.core.render",
    "gitstate.replay": "gitstate.history.replay",
    "gitstate.repo": "gitstate.api.repo",
    "gitstate.reportchart": "gitstate.report.chart",
    "gitstate.reportdata": "gitstate.report.data",
    "gitstate.requests": "gitstate.write.requests",
    "gitstate.results": "gitstate.core.results",
    "gitstate.revert": "gitstate.write.revert",
    "gitstate.rules": "gitstate.core.rules",
    "gitstate.run_api": "gitstate.api.runs",
    "gitstate.runcheck": "gitstate.runs.check",
    "gitstate.runevents": "gitstate.core.runevents",
    "gitstate.runformat": "gitstate.runs.format",
    "gitstate.runrender": "gitstate.runs.render",
    "gitstate.runsync": "gitstate.runs.sync",
    "gitstate.safefile": "gitstate.system.safefile",
    "gitstate.schema": "gitstate.core.schema",
    "gitstate.secretscan": "gitstate.core.secretscan",
    "gitstate.shapes": "gitstate.core.shapes",
    "gitstate.sshsig": "gitstate.system.sshsig",
    "gitstate.sync": "gitstate.remote.sync",
    "gitstate.textsafe": "gitstate.core.textsafe",
    "gitstate.threadview": "gitstate.langgraph.view",
    "gitstate.timebase": "gitstate.core.timebase",
    "gitstate.trailers": "gitstate.core.trailers",
    "gitstate.trust": "gitstate.accept.trust",
    "gitstate.values": "gitstate.core.values",
}

# a package that took an old module's name -> the modules that module's names went to
# (split since: a name is looked up in each in turn, so one that another imports comes first)
FORWARDED = {
    "gitstate.approvals": ("gitstate.approvals.steps", "gitstate.approvals.recorded"),
    "gitstate.audit": ("gitstate.audit.views", "gitstate.audit.integrity"),
    "gitstate.langgraph": ("gitstate.langgraph.saver",),
    "gitstate.report": ("gitstate.report.build",),
    "gitstate.runs": ("gitstate.runs.validate", "gitstate.runs.model"),
}


SPLIT = {  # an old module whose names went to more than its main home: where else to look
    "gitstate.fastpath": ("gitstate.wakeup.slowpath",),
    "gitstate.install": ("gitstate.hosts.settings",),
    "gitstate.model": ("gitstate.core.compare", "gitstate.core.localtime"),
    "gitstate.refusals": ("gitstate.history.refusalrecord", "gitstate.history.receipts"),
    "gitstate.safefile": ("gitstate.system.publish",),
    "gitstate.schema": ("gitstate.core.schemafile",),
    "gitstate.sync": ("gitstate.remote.server",),
    "gitstate.trust": ("gitstate.system.sshsig",),
}


def deprecated(old: str, new: str) -> None:
    """Warn that ``old`` (a name of the Python API) is deprecated in favour of ``new``."""
    _warn(old, new, f"{old} is deprecated: use {new}")


def _warn(old: str, new: str, text: str | None = None) -> None:
    import inspect
    import warnings

    # Point the warning at the importer's line: the first frame outside the import
    # machinery and this package. warnings skips importlib's frozen frames by itself, so
    # only the others are counted.
    here = __file__.rpartition("/")[0] + "/"
    level, frame = 1, inspect.currentframe()  # stacklevel 1 is _warn itself
    while frame is not None and frame.f_code.co_filename.startswith(("<frozen", here)):
        if not frame.f_code.co_filename.startswith("<frozen importlib"):
            level += 1
        frame = frame.f_back
    warnings.warn(text or f"{old} has moved to {new}; import it from there",
                  DeprecationWarning, stacklevel=level)


class _Alias:
    """The loader of an old name: the module is the new home's, imported once; for an old
    module that was split (:data:`SPLIT`), a stand-in that finds each name in its homes."""

    def __init__(self, new: str) -> None:
        self.new = new
        self.spec: Any = None

    def create_module(self, spec: Any) -> Any:
        import importlib

        _warn(spec.name, self.new)
        module = importlib.import_module(self.new)
        homes = SPLIT.get(spec.name)
        if homes is None:
            self.spec = module.__spec__
            return module
        import types

        stand_in = types.ModuleType(spec.name, module.__doc__)
        stand_in.__dict__["__getattr__"] = lambda name: _find(spec.name, (self.new, *homes),
                                                              name)
        return stand_in

    def exec_module(self, module: Any) -> None:
        # The import system gave the module the old name's spec: give it back its own,
        # so that reloads, pickles and tracebacks still name the new home.
        if self.spec is not None:
            module.__spec__ = self.spec

    def get_code(self, name: str) -> Any:
        """``python -m <old path>`` runs the new home as ``__main__``."""
        return compile(f"import runpy\nrunpy.run_module({self.new!r}, run_name='__main__', "
                       "alter_sys=True)\n", f"<{name}: moved to {self.new}>", "exec")

    def is_package(self, name: str) -> bool:
        return False


def _find(old: str, homes: tuple[str, ...], name: str) -> Any:
    import importlib

    if not name.startswith("__"):
        for home in homes:
            module = importlib.import_module(home)
            if hasattr(module, name):
                return getattr(module, name)
    raise AttributeError(f"module {old!r} (now {homes[0]}) has no attribute {name!r}")


class Moved:
    """A deprecated attribute of a class that moved into one of its namespaces:
    ``approve = Moved("approvals.approve")`` makes ``repo.approve`` warn and return
    ``repo.approvals.approve``. Typed as ``Any`` for a type checker: use the new spelling
    to have the call checked."""

    def __init__(self, path: str) -> None:
        self.path, self.name = path, path

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = f"repo.{name}"  # as the docs spell an instance of the class

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        if obj is None:
            return self
        deprecated(self.name, f"repo.{self.path}")
        target: Any = obj
        for part in self.path.split("."):
            target = getattr(target, part)
        return target


class Finder:
    """A meta path finder for the names in :data:`MOVED` (duck-typed, like importlib's)."""

    @staticmethod
    def find_spec(name: str, path: Any = None, target: Any = None) -> Any:
        new = MOVED.get(name)
        if new is None:
            return None
        from importlib.machinery import ModuleSpec

        # A duck-typed loader: subclassing importlib.abc.Loader would cost imports here.
        return ModuleSpec(name, _Alias(new))  # type: ignore[arg-type]


FINDER = Finder()


_WARNED: set[tuple[str, str]] = set()


def forward(package: str, name: str) -> Any:
    """The attribute ``name`` of the old module whose name ``package`` took, with a warning;
    an AttributeError for a submodule of the package (the import system then loads it) and
    for a name the old module never had."""
    import importlib
    import importlib.util

    if name.startswith("__") or importlib.util.find_spec(f"{package}.{name}") is not None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    for home in FORWARDED[package]:
        module = importlib.import_module(home)
        if hasattr(module, name):
            if (package, name) not in _WARNED:  # once: ``from x import y`` asks twice
                _WARNED.add((package, name))
                _warn(f"{package}.{name}", f"{home}.{name}")
            return getattr(module, name)
    raise AttributeError(f"module {package!r} has no attribute {name!r}")
