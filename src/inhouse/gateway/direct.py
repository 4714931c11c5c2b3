"""A direct write path for streamed bodies, offered by the gateway's own uvicorn protocol.

Through ASGI, every SSE chunk the engine sends costs the gateway a future, a task switch, a
message dict and uvicorn's `send` coroutine. `GatewayProtocol` is uvicorn's httptools protocol
with one `ChunkWriter` per connection, put in every request's `scope["extensions"]`; the
generation routes write the engine's chunks with it straight from the upstream connection's
`data_received`, in HTTP/1.1 chunked framing. The response head and the stream's end still go
through ASGI `send`, so uvicorn keeps its keep-alive, disconnect and drain bookkeeping. Any other
ASGI server (and `httpx.ASGITransport` in the tests) offers no writer, and the routes relay
through `send` as before.

NOTE: this leans on three uvicorn internals (`self.scope`, `self.cycle`, and the cycle's
`transport` attribute, which uvicorn only writes, closes and asks `is_closing`);
tests/gateway/test_direct.py runs the real server, so an uvicorn that changes them fails there,
and `is_supported` checks their shape at start-up: where it does not match, the gateway serves
with uvicorn's own protocol and relays through `send` (slower, same behaviour).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

EXTENSION = "inhouse.chunk_writer"


def is_supported() -> bool:
    """Whether this uvicorn has the internals `GatewayProtocol` leans on (see NOTE)."""
    try:
        cycle_params = inspect.signature(RequestResponseCycle.__init__).parameters
        flow_has_state = hasattr(FlowControl(None), "write_paused")  # type: ignore[arg-type]
    except Exception:
        return False
    hooks = ("connection_made", "connection_lost", "on_message_begin", "on_headers_complete")
    return (
        "transport" in cycle_params
        and "flow" in cycle_params
        and all(callable(getattr(HttpToolsProtocol, name, None)) for name in hooks)
        and callable(getattr(FlowControl, "drain", None))
        and flow_has_state
    )


class ChunkWriter:
    """Writes body chunks of the connection's current (chunked, HTTP/1.1) response. It is
    also the transport uvicorn's request cycles write through (`write`, `close`,
    `is_closing`), so the response head can wait for the first chunk: one write, one segment,
    one wake-up of the client for both."""

    __slots__ = ("_flow", "_held", "_is_holding", "_on_lost", "_transport", "is_lost")

    def __init__(self, transport: asyncio.Transport, flow: FlowControl) -> None:
        self._transport = transport
        self._flow = flow
        self._is_holding = False
        self._held = b""
        self._on_lost: Callable[[], None] | None = None
        self.is_lost = False

    def watch(self, on_lost: Callable[[], None] | None) -> None:
        """Call `on_lost` if the client goes away (None: stop watching). Cheaper than a task
        waiting on ASGI `receive` for `http.disconnect` in every stream."""
        self._on_lost = on_lost

    def connection_lost(self) -> None:
        self.is_lost = True
        on_lost, self._on_lost = self._on_lost, None
        if on_lost is not None:
            on_lost()

    def hold(self) -> None:
        """Keep the next write back until the one after it (the head until the first chunk
        or the stream's end, written in the same turn of the loop)."""
        self._is_holding = True

    def write_chunk(self, data: bytes) -> bool:
        """One chunk; False when the client's buffer is full (stop the source until
        `wait_writable`). A client already gone costs nothing (its disconnect ends the
        stream)."""
        framed = b"%x\r\n%b\r\n" % (len(data), data)
        if self._held:
            framed, self._held = self._held + framed, b""
        if self._transport.is_closing():
            return True
        self._transport.write(framed)
        return not self._flow.write_paused

    async def wait_writable(self) -> None:
        await self._flow.drain()

    # -- the transport of uvicorn's RequestResponseCycle ---------------------------------

    def write(self, data: bytes) -> None:
        if self._is_holding:
            self._is_holding = False
            self._held = data
            return
        if self._held:
            data, self._held = self._held + data, b""
        self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def flush(self) -> None:
        """Write anything held back (a stream that ends without another write)."""
        self._is_holding = False
        if self._held:
            data, self._held = self._held, b""
            if not self._transport.is_closing():
                self._transport.write(data)


class GatewayProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a `ChunkWriter` in every request's scope."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._writer = ChunkWriter(transport, self.flow)
        self._extensions: dict[str, Any] = {EXTENSION: self._writer}

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._writer.connection_lost()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope["extensions"] = self._extensions

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:
            cycle.transport = self._writer  # type: ignore[assignment]  # duck-typed: see NOTE
