"""The MCP server: its tools, their schemas, refusals as results, the HTTP transport
and its event store, and the shim over the SDK's 1.x and 2.x lines. Needs the ``mcp`` extra.

May import: every package below it (core ... langgraph).
"""
