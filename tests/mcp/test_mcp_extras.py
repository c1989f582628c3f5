"""What MCP clients expect of a state server beyond the tools: resource subscriptions that
notify on every change (made by any process), logging/setLevel, a resource template per key
with completion of key names, and the server's version. Real client, real server process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

pytest.importorskip("mcp")

from mcp.types import ResourceTemplateReference

from gitstate.api.repo import StateRepo
from tests import mcpclient
from tests.mcpclient import Client

# resources/subscribe and logging/setLevel are what hosts speak today; the SDK's client marks
# them as superseded by the 2026 revision, which is exactly what these tests exercise
pytestmark = [pytest.mark.anyio,
              pytest.mark.filterwarnings("ignore:.*2026-07-28:UserWarning")]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    with StateRepo.init(tmp_path / "agent") as repo:
        repo.set("stop_loss.2317", 262, "the 09:04 rule")
        repo.set("stop_loss.2330", 98, "the other rule")
        repo.set("position_cap", 3, "size")
    return tmp_path / "agent"


@asynccontextmanager
async def connect(agent_dir: Path, seen: list[Any] | None = None) -> AsyncIterator[Client]:
    async def on_message(message: Any) -> None:
        if seen is not None:
            seen.append(message)

    async with mcpclient.connect(agent_dir, on_message=on_message) as client:
        yield client


def _updated(seen: list[Any]) -> list[str]:
    uris = []
    for message in seen:
        root = getattr(message, "root", message)
        if getattr(root, "method", None) == "notifications/resources/updated":
            uris.append(str(root.params.uri))
    return uris


async def _wait_for(seen: list[Any], uri: str, timeout: float = 10) -> None:
    with anyio.fail_after(timeout):
        while uri not in _updated(seen):
            await anyio.sleep(0.05)


async def test_subscribers_hear_of_changes_made_by_other_processes(agent: Path) -> None:
    """A subscriber to the section and to one key is notified when the CLI (another
    process) changes that key; a key nobody changed sends nothing."""
    seen: list[Any] = []
    async with connect(agent, seen) as client:
        assert client.initialize["capabilities"]["resources"]["subscribe"] is True
        for uri in ("gitstate://section", "gitstate://key/stop_loss.2317",
                    "gitstate://key/position_cap"):
            await client.request("subscribe_resource", uri)
        out = subprocess.run([sys.executable, "-m", "gitstate", "--agent-dir", str(agent),
                              "set", "stop_loss.2317", "254", "--reason", "from the CLI"],
                             capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
        assert out.returncode == 0, out.stderr
        await _wait_for(seen, "gitstate://key/stop_loss.2317")
        await _wait_for(seen, "gitstate://section")
        assert "gitstate://key/position_cap" not in _updated(seen)
        await client.request("unsubscribe_resource", "gitstate://section")
        before = len(_updated(seen))
        await client.call_tool("working_state_set", {"key": "position_cap", "value": 2,
                                                     "reason": "from this server"})
        await _wait_for(seen, "gitstate://key/position_cap")
        assert "gitstate://section" not in _updated(seen)[before:]


async def test_key_template_and_completion(agent: Path) -> None:
    """gitstate://key/{key} reads one entry with its chain; key names complete by prefix."""
    async with connect(agent) as client:
        templates = await client.request("list_resource_templates")
        assert [t["uriTemplate"] for t in templates["resourceTemplates"]] == [
            "gitstate://key/{key}"]
        data = json.loads(await client.read("gitstate://key/stop_loss.2317"))
        assert data["entry"]["value"] == 262 and data["entry"]["reason"] == "the 09:04 rule"
        assert [h["new"] for h in data["history"]] == [262]
        done = await client.request("complete", ResourceTemplateReference(
            type="ref/resource", uri="gitstate://key/{key}"), {"name": "key",
                                                              "value": "stop_"})
        assert done["completion"]["values"] == ["stop_loss.2317", "stop_loss.2330"]
        absent = json.loads(await client.read("gitstate://key/nothing_here"))
        assert absent["entry"] is None and absent["history"] == []


async def test_logging_level_and_version(agent: Path) -> None:
    """logging/setLevel is answered, and serverInfo carries the package version."""
    from importlib.metadata import version

    async with connect(agent) as client:
        assert client.initialize["capabilities"]["logging"] == {}
        await client.request("set_logging_level", "info")
        assert client.initialize["serverInfo"]["version"] == version("gitstate")


async def test_the_prompt_and_protocol_errors(agent: Path) -> None:
    """The one prompt teaches the rules and shows the current section; an unknown prompt, a
    prompt argument and an unknown resource are JSON-RPC errors with valid codes (-32602
    invalid params, -32002 resource not found), never code 0."""
    async with connect(agent) as client:
        listed = await client.request("list_prompts")
        assert [p["name"] for p in listed["prompts"]] == ["working_state_rules"]
        got = await client.request("get_prompt", "working_state_rules")
        text = got["messages"][0]["content"]["text"]
        assert "working_state_set" in text and "expected_value" in text
        assert "stop_loss.2317 = 262" in text
        for call, code in ((("get_prompt", "nope"), -32602),
                           (("get_prompt", "working_state_rules", {"x": "1"}), -32602),
                           (("read_resource", "gitstate://nothing"), -32002),
                           (("read_resource", "gitstate://key/bad key!"), -32602)):
            with pytest.raises(Exception) as caught:
                await client.request(*call)
            error = getattr(caught.value, "error", caught.value)
            assert getattr(error, "code", None) == code, (call, caught.value)


async def test_a_refusal_text_shows_times_in_the_agents_zone(tmp_path: Path) -> None:
    """The lines a model reads quote the value's set time in the agent's zone, as the
    section does; the result line and the structured refusal keep the stored UTC."""
    agent = tmp_path / "agent"
    StateRepo.init(agent).close()
    (agent / "config.toml").write_text('[gitstate]\ntimezone = "Asia/Taipei"\n')
    with StateRepo(agent) as repo:
        repo.set("stop_loss.2317", 262, "the 09:04 rule")
        stored = repo.state().keys["stop_loss.2317"].set_at
    async with connect(agent) as client:
        error, content, text = await client.call(
            "working_state_set", key="stop_loss.2317", value=250, reason="r",
            expected_value=999)
    assert error and content["current"]["set_at"] == stored and stored.endswith("Z")
    current = text.split("\n")[1]
    assert "+08:00" in current and "Z " not in current.replace(")", " "), current
    result = next(line for line in text.split("\n") if line.startswith("result: "))
    assert stored in result
