"""The writer the generation routes stream through when the server offers one.

`inhouse.gateway.direct.GatewayProtocol` puts a `ChunkWriter` in every request's
`scope["extensions"][EXTENSION]`; this module has no uvicorn import, so the routes (and any
other ASGI server, which offers no writer) do not depend on uvicorn's internals.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

EXTENSION = "inhouse.chunk_writer"


class Flow(Protocol):
    """uvicorn's per-connection flow control, as far as the writer uses it."""

    write_paused: bool

    async def drain(self) -> None: ...


class ChunkWriter:
    """Writes body chunks of the connection's current (chunked, HTTP/1.1) response. It is
    also the transport uvicorn's request cycles write through (`write`, `close`,
    `is_closing`), so the response head can wait for the first chunk: one write, one segment,
    one wake-up of the client for both."""

    __slots__ = (
        "_flow",
        "_held",
        "_is_holding",
        "_on_lost",
        "_transport",
        "is_lost",
        "on_unstart",
    )

    def __init__(self, transport: asyncio.Transport, flow: Flow) -> None:
        self._transport = transport
        self._flow = flow
        self._is_holding = False
        self._held = b""
        self._on_lost: Callable[[], None] | None = None
        self.is_lost = False
        # Set by the server: forget that the current response started (True if it could).
        self.on_unstart: Callable[[], bool] | None = None

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

    def unstart(self) -> bool:
        """Take back a response head that is still held (nothing of the response reached the
        client), so that another status can be sent instead. False if the server cannot."""
        on_unstart = self.on_unstart
        if not self._held or on_unstart is None or not on_unstart():
            return False
        self._is_holding = False
        self._held = b""
        return True

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
