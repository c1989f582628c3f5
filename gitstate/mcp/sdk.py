"""The official MCP SDK's two lines behind one small interface, through public API only.

gitstate's server must install beside the agent frameworks, and they pin different lines of
the ``mcp`` package: langchain-mcp-adapters pins ``mcp<2``, fastmcp 4 needs ``mcp>=2.3``. Both
lines ship a low-level ``mcp.server.lowlevel.Server`` with the same job — dispatch each
request method to a handler — but register handlers differently:

* 1.x: decorators (``@server.list_tools()``, ``@server.call_tool(validate_input=False)``,
  ...); the handler's connection comes from ``server.request_context.session``, one object per
  connection. 1.x never advertises ``resources.subscribe`` (it hard-codes False), so gitstate
  subclasses the server and overrides the public ``get_capabilities``.
* 2.x: ``on_<method>=`` constructor arguments taking ``(ctx, params)``; ``ctx.session`` is
  made per request, but its notifications go out on the connection (not the request's
  stream), so it may be kept to notify later. The connection is told apart by the
  ``mcp-session-id`` header of ``ctx.request`` over HTTP; stdio has one.

Everything else is shared: both lines' ``mcp.types`` validate the wire form (camelCase) of
every result, so the handlers in :mod:`.server` build plain JSON and this module
turns it into the line's types; both have ``mcp.server.stdio.stdio_server`` and
``StreamableHTTPSessionManager`` (with the same arguments since 1.30).

Tested on the newest release of each line (CI runs the MCP tests in a second environment with
``mcp<2``).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from importlib.metadata import version as dist_version
from typing import Any, Protocol

import anyio
import anyio.to_thread
import mcp.types as types
from mcp.server.lowlevel import Server

LINE = int(dist_version("mcp").split(".")[0])
"""The SDK line installed: 1 or 2."""

INVALID_PARAMS = -32602
RESOURCE_NOT_FOUND = -32002


class ProtocolError(Exception):
    """A JSON-RPC error answer (not a tool result): an unknown prompt, a missing resource."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Sender(Protocol):
    async def send_resource_updated(self, uri: Any) -> None: ...


class Handlers(Protocol):
    """What a server serves; every result is the JSON of the MCP wire form."""

    def tools(self) -> list[dict[str, Any]]: ...
    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]: ...
    def resources(self) -> list[dict[str, Any]]: ...
    def templates(self) -> list[dict[str, Any]]: ...
    def read(self, uri: str) -> dict[str, Any]: ...
    def prompts(self) -> list[dict[str, Any]]: ...
    def prompt(self, name: str, arguments: dict[str, str]) -> dict[str, Any]: ...
    def complete(self, ref: dict[str, Any], argument: dict[str, Any]) -> dict[str, Any]: ...
    def subscribe(self, connection: object, sender: Sender, uri: str) -> None: ...
    def unsubscribe(self, connection: object, uri: str) -> None: ...
    def set_level(self, level: str) -> None: ...


@dataclass
class Spec:
    name: str
    version: str
    instructions: str
    handlers: Handlers
    lifespan: Callable[[], contextlib.AbstractAsyncContextManager[None]]


def _error(exc: ProtocolError) -> Exception:
    from mcp.shared import exceptions

    if LINE == 1:
        error: Exception = getattr(exceptions, "McpError")(  # noqa: B009 (1.x only)
            types.ErrorData(code=exc.code, message=exc.message))
        return error
    return exceptions.MCPError(exc.code, exc.message)


def _wire(obj: Any) -> dict[str, Any]:
    """An SDK object (reference, argument) as its wire JSON."""
    out: dict[str, Any] = obj.model_dump(by_alias=True, exclude_none=True, mode="json")
    return out


async def _call(handlers: Handlers, name: str, arguments: dict[str, Any] | None) -> Any:
    # sync tool code (dulwich, the write lock) runs on a worker thread, as the SDK does
    result = await anyio.to_thread.run_sync(handlers.call, name, dict(arguments or {}))
    return types.CallToolResult.model_validate(result)


async def _guarded(fn: Callable[[], Any]) -> Any:
    try:
        return await anyio.to_thread.run_sync(fn)
    except ProtocolError as exc:
        raise _error(exc) from None


def build(spec: Spec) -> Server[Any]:
    """The low-level server for ``spec`` on the installed SDK line."""
    return _build_v1(spec) if LINE == 1 else _build_v2(spec)


@contextlib.asynccontextmanager
async def _lifespan(spec: Spec) -> AsyncIterator[dict[str, Any]]:
    async with spec.lifespan():
        yield {}


def _build_v2(spec: Spec) -> Server[Any]:
    h = spec.handlers

    def connection(ctx: Any) -> object:
        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None)
        session_id = headers.get("mcp-session-id") if headers is not None else None
        return session_id or "stdio"

    async def list_tools(ctx: Any, params: Any) -> Any:
        return types.ListToolsResult.model_validate({"tools": h.tools()})

    async def call_tool(ctx: Any, params: Any) -> Any:
        return await _call(h, params.name, params.arguments)

    async def list_resources(ctx: Any, params: Any) -> Any:
        return types.ListResourcesResult.model_validate({"resources": h.resources()})

    async def list_templates(ctx: Any, params: Any) -> Any:
        return types.ListResourceTemplatesResult.model_validate(
            {"resourceTemplates": h.templates()})

    async def read_resource(ctx: Any, params: Any) -> Any:
        content = await _guarded(lambda: h.read(str(params.uri)))
        return types.ReadResourceResult.model_validate({"contents": [content]})

    async def list_prompts(ctx: Any, params: Any) -> Any:
        return types.ListPromptsResult.model_validate({"prompts": h.prompts()})

    async def get_prompt(ctx: Any, params: Any) -> Any:
        result = await _guarded(lambda: h.prompt(params.name, dict(params.arguments or {})))
        return types.GetPromptResult.model_validate(result)

    async def complete(ctx: Any, params: Any) -> Any:
        completion = h.complete(_wire(params.ref), _wire(params.argument))
        return types.CompleteResult.model_validate({"completion": completion})

    async def subscribe(ctx: Any, params: Any) -> Any:
        h.subscribe(connection(ctx), ctx.session, str(params.uri))
        return types.EmptyResult()

    async def unsubscribe(ctx: Any, params: Any) -> Any:
        h.unsubscribe(connection(ctx), str(params.uri))
        return types.EmptyResult()

    async def set_level(ctx: Any, params: Any) -> Any:
        h.set_level(str(params.level))
        return types.EmptyResult()

    with warnings.catch_warnings():  # logging/setLevel: deprecated by the 2026 revision,
        warnings.simplefilter("ignore")  # still what today's hosts send
        server: Server[Any] = Server(
            spec.name, version=spec.version, instructions=spec.instructions,
            lifespan=lambda _: _lifespan(spec),
            on_list_tools=list_tools, on_call_tool=call_tool,
            on_list_resources=list_resources, on_list_resource_templates=list_templates,
            on_read_resource=read_resource, on_subscribe_resource=subscribe,
            on_unsubscribe_resource=unsubscribe, on_list_prompts=list_prompts,
            on_get_prompt=get_prompt, on_completion=complete,
            on_set_logging_level=set_level)
    return server


def _build_v1(spec: Spec) -> Server[Any]:  # pragma: no cover - run in the mcp<2 environment
    h = spec.handlers
    base: Any = Server

    class V1Server(base):  # type: ignore[misc]
        def get_capabilities(self, *args: Any, **kwargs: Any) -> Any:
            caps = super().get_capabilities(*args, **kwargs)
            if caps.resources is not None:
                caps.resources.subscribe = True
            return caps

    server: Any = V1Server(spec.name, version=spec.version, instructions=spec.instructions,
                           lifespan=lambda _: _lifespan(spec))

    def connection() -> Any:
        return server.request_context.session

    async def list_tools() -> Any:
        return [types.Tool.model_validate(t) for t in h.tools()]

    async def call_tool(name: str, arguments: dict[str, Any]) -> Any:
        return await _call(h, name, arguments)

    async def list_resources() -> Any:
        return [types.Resource.model_validate(r) for r in h.resources()]

    async def list_templates() -> Any:
        return [types.ResourceTemplate.model_validate(t) for t in h.templates()]

    async def read_resource(uri: Any) -> Any:
        from mcp.server.lowlevel.helper_types import ReadResourceContents

        content = await _guarded(lambda: h.read(str(uri)))
        return [ReadResourceContents(content=content["text"], mime_type=content["mimeType"])]

    async def list_prompts() -> Any:
        return [types.Prompt.model_validate(p) for p in h.prompts()]

    async def get_prompt(name: str, arguments: dict[str, str] | None) -> Any:
        result = await _guarded(lambda: h.prompt(name, dict(arguments or {})))
        return types.GetPromptResult.model_validate(result)

    async def complete(ref: Any, argument: Any, context: Any) -> Any:
        return types.Completion.model_validate(h.complete(_wire(ref), _wire(argument)))

    async def subscribe(uri: Any) -> None:
        session = connection()
        h.subscribe(session, session, str(uri))

    async def unsubscribe(uri: Any) -> None:
        h.unsubscribe(connection(), str(uri))

    async def set_level(level: Any) -> None:
        h.set_level(str(level))

    for register, handler in ((server.list_tools(), list_tools),
                              (server.call_tool(validate_input=False), call_tool),
                              (server.list_resources(), list_resources),
                              (server.list_resource_templates(), list_templates),
                              (server.read_resource(), read_resource),
                              (server.list_prompts(), list_prompts),
                              (server.get_prompt(), get_prompt),
                              (server.completion(), complete),
                              (server.subscribe_resource(), subscribe),
                              (server.unsubscribe_resource(), unsubscribe),
                              (server.set_logging_level(), set_level)):
        register(handler)

    result: Server[Any] = server
    return result


async def run_stdio(server: Server[Any]) -> None:
    """Serve one client on stdin/stdout until it closes the connection. A line that is
    not a JSON-RPC message reaches the server as an exception, which both SDK lines drop
    without a word, so the client would wait forever: it is answered here, -32700 for a
    line that is not JSON, -32600 (with the request's id when it has one) for JSON that is
    no valid message."""
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        send, receive = anyio.create_memory_object_stream[Any](0)

        async def pump() -> None:
            async with send:
                async for item in read:
                    if isinstance(item, Exception):
                        await write.send(_invalid_line(item))
                    else:
                        await send.send(item)

        async with anyio.create_task_group() as group:
            group.start_soon(pump)
            await server.run(receive, write, server.create_initialization_options())
            group.cancel_scope.cancel()


def _invalid_line(exc: Exception) -> Any:
    """The JSON-RPC error answering a line the SDK could not read as a message."""
    from mcp.shared.message import SessionMessage

    errors: Any = getattr(exc, "errors", list)()
    details = [e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else []
    code, message = -32600, "Invalid Request: not a JSON-RPC 2.0 message"
    if not details or any(e.get("type") == "json_invalid" for e in details):
        code, message = -32700, "Parse error: the line is not JSON"
    request_id: Any = next((e["input"]["id"] for e in details if isinstance(e.get("input"), dict)
                            and type(e["input"].get("id")) in (int, str)), None)
    error = types.ErrorData(code=code, message=message)
    # 1.x's JSONRPCError takes no null id (a parse error's id): built without validation
    reply = types.JSONRPCError.model_construct(jsonrpc="2.0", id=request_id, error=error)
    message_type: Any = types.JSONRPCMessage  # a RootModel on 1.x, a union on 2.x
    return SessionMessage(reply if LINE != 1 else message_type.model_construct(root=reply))


def session_manager(server: Server[Any], **options: Any) -> Any:
    """The Streamable HTTP session manager (``handle_request`` per request, ``run()`` as
    the app's lifespan); the options are the manager's own (security_settings, event_store,
    retry_interval, max_request_body_size, ...)."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    return StreamableHTTPSessionManager(app=server, **options)
