"""gitstate[mcp] in one environment with the agent frameworks, each driving the real server
over stdio: fastmcp's client, pydantic-ai (a direct call and an agent run with a scripted
model), langchain-mcp-adapters (the tool a LangGraph agent calls) and the OpenAI Agents SDK
(its strict-mode conversion and its tool wrapper). A refusal must reach the model behind
each of them as text it can act on: the rule, the current value with its reason and set
time, and what to do next (docs/mcp.md, "Refusals").

The frameworks are test extras; langchain-mcp-adapters pins ``mcp<2``, so it runs in the
``mcp<2`` environment `.ci/run` builds (it cannot be installed beside mcp 2.x)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from gitstate.api.repo import StateRepo
from tests.mcpclient import LINE

pytestmark = pytest.mark.anyio
ARGS = ["-m", "gitstate", "--agent-dir"]
RULE = {"key": "stop_loss.2317", "value": 262, "reason": "the 09:04 rule"}
STALE = {"key": "stop_loss.2317", "value": 254, "reason": "patrol", "expected_value": 250}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    StateRepo.init(tmp_path / "agent").close()
    return tmp_path / "agent"


def actionable(text: str) -> None:
    """What a model needs from a stale compare-and-swap, whatever its host kept."""
    assert "cas.mismatch" in text, text
    assert "HEAD holds 262" in text and "the 09:04 rule" in text, text
    assert re.search(r"set 20\d\d-\d\d-\d\dT\d\d:\d\d", text), text
    assert "Nothing was written" in text, text
    assert "next" in text and "expected_value set to the current value (262)" in text, text


def _installed(name: str) -> bool:
    try:
        version(name)
    except PackageNotFoundError:
        return False
    return True


def test_one_environment_holds_gitstate_and_the_frameworks() -> None:
    """pip check finds no broken requirement; every framework that can share this SDK line
    is here (langchain-mcp-adapters only on the 1.x line, which it pins)."""
    check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True,
                           text=True, timeout=120, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    wanted = ["openai-agents", "pydantic-ai-slim", "fastmcp-slim"]
    if LINE == 1:
        wanted.append("langchain-mcp-adapters")
    missing = [name for name in wanted if not _installed(name) and
               not (name == "fastmcp-slim" and _installed("fastmcp"))]
    if missing and not os.environ.get("CI"):
        pytest.skip(f"not installed here (pip install -e '.[test,mcp]'): {missing}")
    assert not missing


def _stdio(agent: Path) -> Any:
    from fastmcp.client.transports import StdioTransport

    return StdioTransport(command=sys.executable, args=[*ARGS, str(agent), "mcp"],
                          env=dict(os.environ))


async def test_fastmcp_client_raises_the_refusal_text(agent: Path) -> None:
    """fastmcp's Client raises ToolError on isError by default: its text is the refusal's,
    and with raise_on_error=False the structured refusal is there too."""
    pytest.importorskip("fastmcp")
    from fastmcp import Client
    from fastmcp.exceptions import ToolError

    async with Client(_stdio(agent)) as client:
        await client.call_tool("working_state_set", RULE)
        with pytest.raises(ToolError) as caught:
            await client.call_tool("working_state_set", STALE)
        actionable(str(caught.value))
        result = await client.call_tool("working_state_set", STALE, raise_on_error=False)
        assert result.is_error and result.structured_content["current"]["value"] == 262


async def test_pydantic_ai_direct_call_and_agent_run(agent: Path) -> None:
    """pydantic-ai raises ModelRetry on a direct call's tool error, and an agent's model
    gets the refusal as its retry prompt: both carry what the model needs."""
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent, ModelRetry
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    toolset: Any = MCPToolset(_stdio(agent))
    async with toolset:
        await toolset.direct_call_tool("working_state_set", RULE)
        with pytest.raises(ModelRetry) as caught:
            await toolset.direct_call_tool("working_state_set", STALE)
        actionable(str(caught.value))

    seen: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            assert "working_state_set" in {t.name for t in info.function_tools}
            return ModelResponse(parts=[ToolCallPart("working_state_set", STALE)])
        seen.extend(str(getattr(part, "content", "")) for part in messages[-1].parts)
        return ModelResponse(parts=[TextPart("re-read; deciding again")])

    run = await Agent(FunctionModel(model), toolsets=[toolset]).run("patrol stop_loss.2317")
    assert run.output == "re-read; deciding again"
    actionable("\n".join(seen))


async def test_langchain_mcp_adapters_tool_message(agent: Path) -> None:
    """The LangChain tool the adapters build answers a refused call with a ToolMessage of
    status error whose text is the refusal's (the structured artifact is dropped)."""
    if LINE == 2:
        pytest.skip("langchain-mcp-adapters 0.3.2 pins mcp<2: it runs in .ci/run's mcp<2 "
                    "environment")
    from langchain_mcp_adapters.client import MultiServerMCPClient

    client = MultiServerMCPClient({"gitstate": {
        "command": sys.executable, "args": [*ARGS, str(agent), "mcp"],
        "env": dict(os.environ), "transport": "stdio"}})
    tools = {t.name: t for t in await client.get_tools()}
    assert len(tools) == 6
    setter = tools["working_state_set"]
    await setter.ainvoke({"type": "tool_call", "id": "c1", "name": setter.name, "args": RULE})
    message = await setter.ainvoke({"type": "tool_call", "id": "c2", "name": setter.name,
                                    "args": STALE})
    assert message.status == "error"
    content = message.content
    text = content if isinstance(content, str) else "\n".join(
        block.get("text", "") for block in content if isinstance(block, dict))
    actionable(text)


async def test_openai_agents_strict_schemas_and_tool_text(agent: Path) -> None:
    """Every tool converts to OpenAI strict mode (no fallback), and the SDK's tool wrapper
    hands the model the refusal's text, strict-mode nulls for the unused arguments
    included."""
    pytest.importorskip("agents")
    from agents import Agent, RunContextWrapper
    from agents.mcp import MCPServerStdio, MCPUtil
    from agents.tool_context import ToolContext

    params: Any = {"command": sys.executable, "args": [*ARGS, str(agent), "mcp"],
                   "env": dict(os.environ)}
    async with MCPServerStdio(params=params, client_session_timeout_seconds=60) as server:
        context: RunContextWrapper[None] = RunContextWrapper(context=None)
        tools: list[Any] = await MCPUtil.get_all_function_tools(
            [server], True, context, Agent(name="patrol", mcp_servers=[server]))
        assert len(tools) == 6
        assert [t.name for t in tools if not t.strict_json_schema] == []
        setter = next(t for t in tools if t.name == "working_state_set")
        properties = setter.params_json_schema["properties"]
        assert set(setter.params_json_schema["required"]) == set(properties)

        async def invoke(args: dict[str, Any]) -> str:
            full = {name: args.get(name) for name in properties}  # what a strict model sends
            raw = json.dumps(full)
            out = await setter.on_invoke_tool(ToolContext(
                context=None, tool_name=setter.name, tool_call_id="c", tool_arguments=raw), raw)
            return str(out)

        assert '"ok": true' in await invoke(RULE)
        actionable(await invoke(STALE))
