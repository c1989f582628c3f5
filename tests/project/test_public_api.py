"""The public surface, pinned: every name ``gitstate`` exports, the error tree, the result
types; examples/ use nothing else; the CLI's help loads only what it uses; and the MCP
output schemas accept the JSON the CLI prints for the same operation."""

from __future__ import annotations

import ast
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

import gitstate
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]

EXPORTED = [
    "ChangeRecord", "Check", "Config", "ConfigError", "CasMismatch", "DiscardResult", "Entry", "Expected",
    "GitStateError", "Handoff", "HandoffTooLarge", "HistoryRewritten", "InjectionTooLarge",
    "InvalidInput", "KeyCapReached", "KeyState", "LockTimeout", "NotInitialized",
    "Observation", "Overridden", "Refusal", "Refused", "Scalar", "SchemaReport",
    "HistoryEntry", "RunSummary", "RunGoal", "NextAction", "ApprovalRequest",
    "SectionTooLarge", "Spend", "State", "StateDiff", "StateRepo", "StateView", "StoreError",
    "SyncResult", "SyncStatus", "UNSET", "Unset",
    "UsageError", "Value", "Verdict", "WriteResult", "__version__", "blame", "diff_states", "load_config", "log",
    "refusal", "section", "show", "to_json", "verify",
]

ERROR_TREE = {  # class: (parent, exit code)
    "UsageError": ("GitStateError", 2), "NotInitialized": ("UsageError", 2),
    "Refused": ("GitStateError", 1), "InvalidInput": ("Refused", 1),
    "CasMismatch": ("Refused", 1), "KeyCapReached": ("Refused", 1),
    "SectionTooLarge": ("Refused", 1), "InjectionTooLarge": ("Refused", 1),
    "HandoffTooLarge": ("Refused", 1), "ConfigError": ("GitStateError", 1),
    "StoreError": ("GitStateError", 3), "HistoryRewritten": ("StoreError", 3),
    "LockTimeout": ("StoreError", 3),
}

RESULT_FIELDS = {
    "WriteResult": ["op", "commit", "key", "old", "new", "handoff", "truncated", "live_keys",
                    "max_keys", "warnings", "replayed", "reverted", "overridden", "ok"],
    "StateView": ["head", "now", "keys", "handoff", "history", "live_keys", "max_keys",
                  "section_bytes", "section_max_bytes", "schema_version", "phase",
                  "allowed_tools", "warnings", "ok"],
    "KeyState": ["value", "set_at", "reason", "actor", "expires_at", "expired"],
    "DiscardResult": ["kept", "op", "ok"],
    "SyncResult": ["action", "head", "remote", "pushed", "pulled", "rebased", "refused",
                   "kept_on", "runs", "threads"],
    "Refusal": ["error", "message", "current", "expected", "live_key_names", "details", "ok"],
    "SyncStatus": ["head", "remote_url", "remote_seen", "ahead", "behind", "sync",
                   "unpushed_refs", "hand_edits"],
    "SchemaReport": ["schema", "live", "expired"],
    "HistoryEntry": ["commit", "parent", "time", "actor", "op", "key", "old", "new", "reason",
                     "expires_at", "reverts", "request", "handoff", "adopt", "observation",
                     "schema_version"],
    "RunSummary": ["run_id", "head", "status", "stop_reason", "updated_at", "error"],
    "RunGoal": ["goal_id", "run_id", "owner", "description", "success_criteria", "constraints",
                "risk_class", "status", "created_at", "updated_at"],
    "NextAction": ["action", "reason"],
    "Spend": ["approval_id", "tool", "args_json", "args_sha256", "commit", "actor", "run_id",
              "tool_call_id"],
}


def test_exported_names_are_pinned() -> None:
    assert sorted(gitstate.__all__) == sorted(EXPORTED)
    assert sorted(gitstate._EXPORTS) == sorted(set(EXPORTED) - {"__version__"})
    for name in gitstate.__all__:
        assert getattr(gitstate, name) is not None, name
    with pytest.raises(AttributeError):
        gitstate.StateRepository  # noqa: B018  # a typo is an AttributeError, not None


def test_version_matches_the_package_metadata() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert gitstate.__version__ == project["version"]


def test_error_tree_is_pinned() -> None:
    assert gitstate.GitStateError.__bases__ == (Exception,)
    for name, (parent, code) in ERROR_TREE.items():
        cls = getattr(gitstate, name)
        assert cls.__bases__ == (getattr(gitstate, parent),), name
        assert cls.exit_code == code, name


def test_result_types_are_pinned() -> None:
    for name, fields in RESULT_FIELDS.items():
        assert [f.name for f in dataclasses.fields(getattr(gitstate, name))] == fields, name


def test_examples_use_only_the_public_api() -> None:
    for path in sorted((ROOT / "examples").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gitstate"):
                assert node.module == "gitstate", f"{path.name} imports {node.module}"
                assert all(a.name in gitstate.__all__ for a in node.names), path.name
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("gitstate.") for a in node.names), path.name


def _loaded_by(*argv: str) -> set[str]:
    code = ("import sys\nfrom gitstate.cli import main\nmain(sys.argv[1:])\n"
            "print('\\n'.join(sorted(sys.modules)), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                         check=True, timeout=60)
    return set(out.stderr.split())


def test_help_loads_only_what_it_uses() -> None:
    """`gitstate --help` loads click and the command modules, never dulwich, pydantic,
    ruamel or the repository; one command's help loads that command's module alone."""
    heavy = {"dulwich", "pydantic", "ruamel.yaml", "mcp", "gitstate.api.repo", "gitstate.store"}
    top = _loaded_by("--help")
    assert not heavy & top
    one = _loaded_by("set", "--help")
    assert not heavy & one
    assert "gitstate.cli.write" in one
    assert not {"gitstate.cli.audit", "gitstate.cli.remote", "gitstate.cli.typed",
                "gitstate.cli.serve"} & one


CALLS = [  # (CLI arguments, MCP tool, MCP arguments, JSON schema of)
    (["set", "k", "262", "-r", "first"], "working_state_set",
     {"key": "k", "value": 262, "reason": "first"}, "write"),
    (["set", "k", "254", "-r", "stale", "--expect", "250"], "working_state_set",
     {"key": "k", "value": 254, "reason": "stale", "expected_value": 250}, "write"),
    (["set", "bad key", "1", "-r", "x"], "working_state_set",
     {"key": "bad key", "value": 1, "reason": "x"}, "write"),
    (["handoff", "next: watch 262"], "working_state_handoff", {"note": "next: watch 262"},
     "write"),
    (["clear", "k", "-r", "done"], "working_state_clear", {"key": "k", "reason": "done"},
     "write"),
    (["clear", "k", "-r", "again"], "working_state_clear", {"key": "k", "reason": "again"},
     "write"),
    (["get"], "working_state_get", {}, "state"),
]


def test_mcp_output_schema_accepts_the_cli_json(tmp_path: Path) -> None:
    """One type behind both surfaces: for each operation, success and refusal alike, the
    JSON `gitstate ... --json` prints validates against the output schema the MCP server
    advertises for the same tool (and so does the server's own structured content)."""
    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("mcp")
    from gitstate.mcp.schema import StateOut, WriteOut

    schemas = {"write": WriteOut.model_json_schema(), "state": StateOut.model_json_schema()}
    run_cli("init", agent_dir=tmp_path)
    outcomes = []
    for argv, _tool, _args, kind in CALLS:
        out = run_cli(*argv, "--json", agent_dir=tmp_path)
        data = json.loads(out.stdout)
        jsonschema.validate(data, schemas[kind])
        outcomes.append((out.returncode, data["ok"], data.get("error")))
    assert outcomes == [(0, True, None), (1, False, "cas.mismatch"), (1, False, "key.charset"),
                        (0, True, None), (0, True, None), (1, False, "clear.absent"),
                        (0, True, None)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_mcp_server_advertises_the_generated_schemas(tmp_path: Path) -> None:
    """The schemas the server lists are the ones generated from the result types (the
    ones the CLI's JSON was checked against above), and its own answers fit them."""
    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("mcp")
    from gitstate.mcp.schema import StateOut, WriteOut, output_schema
    from tests.mcpclient import connect

    schemas = {"write": output_schema(WriteOut.model_json_schema()),
               "state": output_schema(StateOut.model_json_schema())}
    run_cli("init", agent_dir=tmp_path)
    async with connect(tmp_path) as client:
        listed = {name: t["outputSchema"] for name, t in (await client.list_tools()).items()}
        for _argv, tool, args, kind in CALLS:
            assert listed[tool] == schemas[kind]
            result = await client.call_tool(tool, args)
            jsonschema.validate(result["structuredContent"], listed[tool])


def test_each_extra_installs_what_its_docs_import() -> None:
    """`pip install 'gitstate[langgraph]'` brings langgraph itself (the docs' example
    imports langgraph.graph), and the mcp extra the SDK."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    names = {extra: {r.split(">")[0].split("=")[0].split("[")[0].strip() for r in reqs}
             for extra, reqs in extras.items()}
    assert {"langgraph", "langgraph-checkpoint"} <= names["langgraph"]
    assert "mcp" in names["mcp"]


def test_old_module_paths_import_their_new_homes_with_a_warning() -> None:
    """Every module path of the earlier flat layout still imports (gitstate/moved.py): the
    very module of its new home, with a DeprecationWarning naming that home and pointing
    at the importing line; an old module that was split finds each of its names in its
    homes, and a package that took an old module's name hands on its names (once)."""
    from gitstate.moved import FORWARDED, MOVED, SPLIT

    code = f"""
import importlib, warnings
moved, forwarded, split = {MOVED!r}, {FORWARDED!r}, {SPLIT!r}
for old, new in moved.items():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    if old in split:  # a stand-in: each name from the home that has it
        assert module.__name__ == old and module.__doc__ == importlib.import_module(new).__doc__
    else:
        assert module is importlib.import_module(new) and module.__spec__.name == new, old
    assert [str(w.message).split(";")[0] for w in seen] == [f"{{old}} has moved to {{new}}"], old
from gitstate.sync import verify_push, Remote  # split: server.py and sync.py
from gitstate.model import canonical_text, values_match, State
from gitstate.remote.server import verify_push as vp
from gitstate.core.compare import values_match as vm
assert verify_push is vp and values_match is vm
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    from gitstate.runs import next_action  # an old module's name, now a package
    from gitstate.audit import fleet  # a submodule of that package: no warning
from gitstate.runs.model import next_action as real
assert next_action is real and fleet.__name__ == "gitstate.audit.fleet"
assert [str(w.message).split(";")[0] for w in seen] == [
    "gitstate.runs.next_action has moved to gitstate.runs.model.next_action"]
assert all(w.filename == "<string>" for w in seen), [w.filename for w in seen]
try:
    from gitstate.audit import no_such_name
except ImportError:
    pass
else:
    raise AssertionError("a name the old module never had")
print(len(moved) + len(forwarded))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == len(MOVED) + len(FORWARDED) == 84
    for old, new in MOVED.items():  # the table names only real homes, and no old file is left
        assert (ROOT / (new.replace(".", "/") + ".py")).exists(), new
        assert not (ROOT / (old.replace(".", "/") + ".py")).exists(), old
    assert set(FORWARDED) == {"gitstate.audit", "gitstate.report", "gitstate.runs",
                              "gitstate.approvals", "gitstate.langgraph"}
    assert set(SPLIT) <= set(MOVED)
    ran = subprocess.run([sys.executable, "-m", "gitstate.fastpath"], capture_output=True,
                         text=True, check=False, cwd=ROOT)  # python -m of an old path runs
    assert ran.returncode == 0 and "Traceback" not in ran.stderr, ran.stderr
