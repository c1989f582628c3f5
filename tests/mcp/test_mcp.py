"""Specification of the MCP server, through the SDK's real client over stdio."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from gitstate.api.repo import StateRepo
from tests.helpers import commit_count
from tests.mcpclient import Client, connect

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    StateRepo.init(tmp_path / "agent").close()
    return tmp_path / "agent"


async def _call(client: Client, tool: str, **args: Any) -> tuple[bool, dict[str, Any], str]:
    return await client.call(tool, **args)


async def test_tools_schemas_and_annotations(agent: Path) -> None:
    """Four tools with the seed's names, input and output schemas, and annotations."""
    async with connect(agent) as client:
        tools = await client.list_tools()
    assert set(tools) == {"working_state_set", "working_state_clear", "working_state_handoff",
                          "working_state_get", "run_get", "run_propose"}
    s = tools["working_state_set"]
    assert set(s["inputSchema"]["required"]) == {"key", "reason"}
    assert {"value", "value_json", "ttl_hours", "expected_value", "expected_json"} <= set(
        s["inputSchema"]["properties"])
    assert set(tools["working_state_clear"]["inputSchema"]["required"]) == {"key", "reason"}
    assert set(tools["working_state_handoff"]["inputSchema"]["properties"]) == {
        "note", "status", "next_steps", "evidence", "blocker", "request_id"}
    for name, tool in tools.items():
        assert tool["outputSchema"]["type"] == "object", name
        assert tool["inputSchema"]["additionalProperties"] is False, name
        assert tool["annotations"]["openWorldHint"] is False
        assert tool["annotations"]["readOnlyHint"] is (name in ("working_state_get", "run_get"))
    assert "ttl_hours" in s["description"] and "expected_value" in s["description"]
    assert "handoff" in tools["working_state_handoff"]["description"]


async def test_round_trips(agent: Path) -> None:
    """set, get, clear and handoff work end to end; each write is one commit."""
    async with connect(agent) as client:
        err, out, _ = await _call(client, "working_state_set", key="stop_loss.2317", value=262,
                                  reason="跌破即出場", ttl_hours=4.5)
        assert not err and out["new"]["value"] == 262 and out["new"]["expires_at"]
        err, out, _ = await _call(client, "working_state_set", key="label", value="262",
                                  reason="text stays text")
        assert out["new"]["value"] == "262"
        err, out, _ = await _call(client, "working_state_handoff", note="checking",
                                  status="continue", next_steps="report totals")
        assert not err and out["handoff"]["status"] == "continue"
        err, out, _ = await _call(client, "working_state_clear", key="label", reason="done",
                                  expected_value=262)
        assert not err
        err, state, _ = await _call(client, "working_state_get")
        assert not err and set(state["keys"]) == {"stop_loss.2317"}
        assert state["handoff"]["next_steps"] == "report totals"
        assert state["history"][0]["op"] == "clear" and state["max_keys"] == 32
        assert "stop_loss.2317 = 262" in await client.read("gitstate://section")
        assert json.loads(await client.read("gitstate://state"))["head"] == state["head"]
    assert commit_count(agent / "state") == 5


async def test_refusals_are_tool_errors_with_structure(agent: Path) -> None:
    """Every refusal is isError, names the rule, and carries what the model needs."""
    async with connect(agent) as client:
        await _call(client, "working_state_set", key="stop", value=262, reason="rule")
        err, out, text = await _call(client, "working_state_set", key="stop", value=254,
                                     reason="stale", expected_value=250)
        assert err and out["error"] == "cas.mismatch" and out["current"]["value"] == 262
        assert out["current"]["reason"] == "rule" and out["current"]["set_at"]
        assert "262" in text
        err, out, _ = await _call(client, "working_state_set", key="stop", value=1,
                                  reason="x", expect_absent=True)
        assert err and out["error"] == "cas.mismatch"
        for i in range(31):
            await _call(client, "working_state_set", key=f"k{i}", value=i, reason="fill")
        err, out, text = await _call(client, "working_state_set", key="k99", value=1,
                                     reason="too many")
        assert err and out["error"] == "keys.cap" and len(out["live_key_names"]) == 32
        cases = [
            ("working_state_set", {"key": "../etc", "value": 1, "reason": "x"}, "key.charset"),
            ("working_state_set", {"key": "k", "value": "a\nb", "reason": "x"}, "value.control"),
            ("working_state_set", {"key": "k0", "value": 1, "reason": "   "}, "reason.empty"),
            ("working_state_clear", {"key": "nope", "reason": "x"}, "clear.absent"),
            ("working_state_handoff", {"status": "complete"}, "handoff.complete"),
            ("working_state_handoff", {"next_steps": "x"}, "handoff.status_required"),
            ("working_state_handoff", {"status": "continue", "next_steps": "字" * 6000},
             "handoff.max_bytes"),
        ]
        for tool, args, rule in cases:
            err, out, _ = await _call(client, tool, **args)
            assert err and out.get("error") == rule, (tool, args, out)
    assert commit_count(agent / "state") == 1 + 1 + 31


async def test_bad_arguments_and_unexpected_failures_keep_the_server_up(agent: Path) -> None:
    """Wrong types, missing arguments and an internal failure are errors; the server lives."""
    async with connect(agent) as client:
        for args, rule in (({"key": "k"}, "input.invalid"),
                           ({"key": 1, "value": 1, "reason": "r"}, "input.invalid"),
                           ({"key": "k", "value": {"a": 1}, "reason": "r"}, "input.invalid"),
                           ({"key": "k", "value": 1, "reason": "r", "extra": 1},
                            "input.invalid"),
                           ({"key": "k", "value_json": '{"a b": 1}', "reason": "r"},
                            "value.key_charset"),
                           ({"key": "k", "value_json": "[[[[[[[[[1]]]]]]]]]", "reason": "r"},
                            "value.depth"),
                           ({"key": "k", "value_json": '{"a": 1, "a": 2}', "reason": "r"},
                            "input.invalid"),
                           ({"key": "k", "value_json": "[1,", "reason": "r"}, "input.invalid"),
                           ({"key": "k", "value": 1, "reason": "r", "ttl_hours": -1},
                            "input.invalid")):
            err, out, text = await _call(client, "working_state_set", **args)
            assert err and out["ok"] is False, args
            assert out["error"].split(".")[0] == rule.split(".")[0], (args, out)
            assert text.startswith(f"[{out['error']}]") and "next: " in text
        ref = agent / "state" / ".git" / "refs" / "heads" / "main"
        head = ref.read_bytes()
        ref.write_bytes(b"ref: refs/heads/main\n")  # a symref loop: fails as no rule names
        err, out, text = await _call(client, "working_state_get")
        assert err and out["error"] == "internal" and "Traceback" not in text
        ref.write_bytes(head)
        err, out, _ = await _call(client, "working_state_get")
        assert not err


async def test_two_clients_race_with_expected_value(agent: Path) -> None:
    """Two clients writing one key with the same expected value: exactly one wins."""
    with StateRepo(agent) as repo:
        repo.set("counter", 0, "start")
    async with connect(agent) as a, connect(agent) as b:
        for round_ in range(10):
            results: list[bool] = []

            async def write(client: Client, who: str, expect: int = round_,
                            results: list[bool] = results) -> None:
                err, _, _ = await _call(client, "working_state_set", key="counter",
                                        value=expect + 1, reason=f"{who} wins",
                                        expected_value=expect)
                results.append(not err)

            async with anyio.create_task_group() as tg:
                tg.start_soon(write, a, "a")
                tg.start_soon(write, b, "b")
            assert sorted(results) == [False, True], round_
    with StateRepo(agent) as repo:
        assert repo.state().keys["counter"].value == 10


async def test_typed_state_over_mcp(agent: Path) -> None:
    """The set tool describes declared keys; the agent cannot set a runtime-owned key."""
    schema = (Path(__file__).resolve().parents[2] / "examples" / "schemas" /
              "trading.yaml").read_text()
    with StateRepo(agent) as repo:
        repo.set_schema(schema, "typed")
    async with connect(agent) as client:
        tools = await client.list_tools()
        description = tools["working_state_set"]["description"]
        assert "stop_loss.*: number (> 0); default ttl 6.5 h" in description
        assert "phase: one of gather | apply | done; set by runtime only" in description
        err, out, _ = await _call(client, "working_state_set", key="phase", value="apply",
                                  reason="the model tries")
        assert err and out["error"] == "schema.writer"
        err, out, _ = await _call(client, "working_state_set", key="stop_loss.2317",
                                  value="262", reason="a string is not a number")
        assert err and out["error"] == "schema.type"
        err, state, _ = await _call(client, "working_state_get")
        assert state["allowed_tools"] == ["quote", "news"] and state["phase"] == "gather"


async def test_retry_after_client_timeout_is_idempotent(agent: Path) -> None:
    """A client that times out and retries with the same request_id gets one commit."""
    before = commit_count(agent / "state")
    async with connect(agent) as client:
        args = {"key": "stop", "value": 262, "reason": "rule", "request_id": "wake-7-set-1"}
        with pytest.raises(Exception):  # noqa: B017  (the SDK's timeout error type varies)
            await client.call_tool("working_state_set", args, timeout=0.0001)
        await anyio.sleep(0.5)  # the server finished the first call meanwhile
        err, out, _ = await _call(client, "working_state_set", **args)
        assert not err and out["replayed"] is True
        err, out, _ = await _call(client, "working_state_set", **{**args, "value": 254})
        assert err and out["error"] == "request.conflict"
    assert commit_count(agent / "state") == before + 1


async def test_the_docs_name_every_tool(agent: Path) -> None:
    """README, `gitstate mcp --help` and docs/mcp.md name each tool the server lists; none
    says "four tools"."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    async with connect(agent) as client:
        names = set(await client.list_tools())
    assert len(names) == 6
    helped = subprocess.run([sys.executable, "-m", "gitstate", "mcp", "--help"],
                            capture_output=True, text=True, timeout=60, check=True).stdout
    for where, text in (("README.md", (root / "README.md").read_text()),
                        ("mcp --help", helped),
                        ("docs/mcp.md", (root / "docs" / "mcp.md").read_text())):
        assert not [n for n in names if n not in text], where
        assert "four tools" not in text, where
