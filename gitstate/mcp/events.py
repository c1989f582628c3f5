"""Resumable event streams for ``mcp --http``: the SDK's event store, kept in memory and
bounded (MCP's Streamable HTTP resumability: each SSE event carries an id, the stream opens
with a priming event and a ``retry`` field, and a client that lost its connection reconnects
with ``Last-Event-ID`` and receives what it missed on that stream).

At most ``MAX_EVENTS`` events are kept across every session, oldest dropped first: a
reconnection after more than that many events receives nothing to replay (the stream starts
afresh), never an unbounded memory. Nothing here is written to disk.

The SDK keeps one store for every session and names streams by request (the standalone GET
stream has one fixed name in every session), so an event id is all that tells one session's
events from another's: each id is a random 128-bit token, never a counter. A client can then
replay only a stream whose event ids it was sent; a guessed or another session's id is not
one it could know.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from typing import Any

MAX_EVENTS = 2048
RETRY_MS = 2000  # what clients are told to wait before they reconnect


def event_store() -> Any:
    """A bounded in-memory store of the SDK's ``EventStore`` interface."""
    from mcp.server.streamable_http import EventMessage, EventStore

    class BoundedEventStore(EventStore):
        def __init__(self) -> None:
            self.events: OrderedDict[str, tuple[str, Any]] = OrderedDict()

        async def store_event(self, stream_id: str, message: Any) -> str:
            event_id = secrets.token_urlsafe(16)
            self.events[event_id] = (stream_id, message)
            while len(self.events) > MAX_EVENTS:
                self.events.popitem(last=False)
            return event_id

        async def replay_events_after(self, last_event_id: str, send_callback: Any) -> str | None:
            if last_event_id not in self.events:
                return None
            stream_id, _ = self.events[last_event_id]
            after = False
            for event_id, (stream, message) in list(self.events.items()):
                if after and stream == stream_id and message is not None:
                    await send_callback(EventMessage(message, event_id))
                after = after or event_id == last_event_id
            return stream_id

    return BoundedEventStore()
