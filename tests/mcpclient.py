"""The official Python SDK's client over stdio, on either SDK line (1.x or 2.x): the
session's answers as the MCP wire JSON (camelCase), so one test reads the same on both.

Only ``ClientSession`` and ``stdio_client`` are used: both lines have them (2.x's
``mcp.Client`` does not exist in 1.x)."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

LINE = int(version("mcp").split(".")[0])


def wire(obj: Any) -> Any:
    return obj.model_dump(by_alias=True, exclude_none=True, mode="json")


def _timeout(seconds: float | None) -> Any:
    if seconds is None:
        return None
    return timedelta(seconds=seconds) if LINE == 1 else seconds


def server_params(agent_dir: Path, env: dict[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "gitstate", "--agent-dir", str(agent_dir), "mcp"],
                                 env=env if env is not None else dict(os.environ))


class Client:
    """A connected session; every answer is wire JSON."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self.initialize: dict[str, Any] = {}

    async def list_tools(self) -> dict[str, dict[str, Any]]:
        return {t["name"]: t for t in wire(await self.session.list_tools())["tools"]}

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        timeout: float | None = None) -> dict[str, Any]:
        kwargs = {"read_timeout_seconds": _timeout(timeout)} if timeout is not None else {}
        result: dict[str, Any] = wire(await self.session.call_tool(name, arguments, **kwargs))
        return result

    async def call(self, name: str, **arguments: Any) -> tuple[bool, dict[str, Any], str]:
        """(isError, structuredContent, text) of one call."""
        result = await self.call_tool(name, arguments)
        text = " ".join(c.get("text", "") for c in result.get("content", []))
        return bool(result.get("isError")), result.get("structuredContent") or {}, text

    async def read(self, uri: str) -> str:
        text: str = wire(await self.session.read_resource(uri))["contents"][0]["text"]
        return text

    async def request(self, method: str, *args: Any) -> Any:
        """Any session method by name (list_prompts, get_prompt, complete, subscribe_resource,
        set_logging_level, ...), its answer as wire JSON."""
        answer = await getattr(self.session, method)(*args)
        return wire(answer) if hasattr(answer, "model_dump") else answer


@asynccontextmanager
async def connect(agent_dir: Path, *, env: dict[str, str] | None = None,
                  timeout: float = 30,
                  on_message: Callable[[Any], Awaitable[None]] | None = None,
                  ) -> AsyncIterator[Client]:
    """A session with ``gitstate mcp`` for ``agent_dir`` over stdio."""
    async with stdio_client(server_params(agent_dir, env)) as (read, write):
        extra: dict[str, Any] = {"message_handler": on_message} if on_message else {}
        async with ClientSession(read, write, read_timeout_seconds=_timeout(timeout),
                                 **extra) as session:
            client = Client(session)
            client.initialize = wire(await session.initialize())
            yield client
