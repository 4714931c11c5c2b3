"""A direct write path for streamed bodies, offered by the gateway's own uvicorn protocol.

Through ASGI, every SSE chunk the engine sends costs the gateway a future, a task switch, a
message dict and uvicorn's `send` coroutine. `GatewayProtocol` (uvicorn's httptools protocol,
nothing else changed) puts a `ChunkWriter` for the connection in the request's
`scope["extensions"]`; the generation routes then write the engine's chunks to the client's
transport straight from the upstream connection's `data_received`, in HTTP/1.1 chunked framing.
The response head and the stream's end still go through ASGI `send`, so uvicorn keeps its
keep-alive, disconnect and drain bookkeeping. Any other ASGI server (and `httpx.ASGITransport`
in the tests) offers no writer, and the routes relay through `send` as before.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

EXTENSION = "inhouse.chunk_writer"


class ChunkWriter:
    """Writes body chunks of the connection's current (chunked, HTTP/1.1) response."""

    __slots__ = ("_flow", "_transport")

    def __init__(self, transport: asyncio.Transport, flow: FlowControl) -> None:
        self._transport = transport
        self._flow = flow

    def write(self, data: bytes) -> bool:
        """One chunk; False when the client's buffer is full (stop the source until
        `wait_writable`). A client already gone costs nothing (its disconnect ends the
        stream)."""
        if self._transport.is_closing():
            return True
        self._transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        return not self._flow.write_paused

    async def wait_writable(self) -> None:
        await self._flow.drain()


class GatewayProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a `ChunkWriter` in every request's scope."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._extensions: dict[str, Any] = {EXTENSION: ChunkWriter(transport, self.flow)}

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope["extensions"] = self._extensions
