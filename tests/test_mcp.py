"""Specification of the MCP server, through the SDK's real client over stdio."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from gitstate.repo import StateRepo
from tests.helpers import commit_count

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _params(agent_dir: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "gitstate", "--agent-dir", str(agent_dir), "mcp"],
                                 env=dict(os.environ))


@asynccontextmanager
async def connect(agent_dir: Path) -> AsyncIterator[Client]:
    async with Client(_params(agent_dir), read_timeout_seconds=30) as client:
        yield client


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    StateRepo.init(tmp_path / "agent").close()
    return tmp_path / "agent"


async def _call(client: Client, tool: str, **args: Any) -> tuple[bool, dict[str, Any], str]:
    result = await client.call_tool(tool, args)
    text = " ".join(getattr(c, "text", "") for c in result.content)
    return bool(result.is_error), result.structured_content or {}, text


async def test_tools_schemas_and_annotations(agent: Path) -> None:
    """Four tools with the seed's names, input and output schemas, and annotations."""
    async with connect(agent) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"working_state_set", "working_state_clear", "working_state_handoff",
                          "working_state_get", "run_get", "run_propose"}
    s = tools["working_state_set"]
    assert set(s.input_schema["required"]) == {"key", "value", "reason"}
    assert {"ttl_hours", "expected_value"} <= set(s.input_schema["properties"])
    assert set(tools["working_state_clear"].input_schema["required"]) == {"key", "reason"}
    assert set(tools["working_state_handoff"].input_schema["properties"]) == {
        "note", "status", "next_steps", "evidence", "blocker", "request_id"}
    for name, tool in tools.items():
        assert tool.output_schema is not None, name
        assert tool.annotations is not None and tool.annotations.open_world_hint is False
        assert tool.annotations.read_only_hint is (name in ("working_state_get", "run_get"))
    assert "ttl_hours" in s.description and "expected_value" in s.description
    assert "handoff" in tools["working_state_handoff"].description


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
        section = await client.read_resource("gitstate://section")
        assert "stop_loss.2317 = 262" in section.contents[0].text  # type: ignore[union-attr]
        as_json = await client.read_resource("gitstate://state")
        assert json.loads(as_json.contents[0].text)["head"] == state["head"]  # type: ignore[union-attr]
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
        for args in ({"key": "k"}, {"key": 1, "value": 1, "reason": "r"},
                     {"key": "k", "value": {"a b": 1}, "reason": "r"},
                     {"key": "k", "value": [[[[[[[[[1]]]]]]]]], "reason": "r"},
                     {"key": "k", "value": 1, "reason": "r", "ttl_hours": -1}):
            result = await client.call_tool("working_state_set", args)
            assert result.is_error, args
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
    schema = (Path(__file__).resolve().parent.parent / "examples" / "schemas" /
              "trading.yaml").read_text()
    with StateRepo(agent) as repo:
        repo.set_schema(schema, "typed")
    async with connect(agent) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        description = tools["working_state_set"].description or ""
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
            await client.call_tool("working_state_set", args, read_timeout_seconds=0.0001)
        await anyio.sleep(0.5)  # the server finished the first call meanwhile
        err, out, _ = await _call(client, "working_state_set", **args)
        assert not err and out["replayed"] is True
        err, out, _ = await _call(client, "working_state_set", **{**args, "value": 254})
        assert err and out["error"] == "request.conflict"
    assert commit_count(agent / "state") == before + 1
