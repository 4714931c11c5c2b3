"""The writer the generation routes stream through when the server offers one.

The gateway's HTTP server (`server.GatewayProtocol`) puts its connection's `ChunkWriter` in
every request's `scope["extensions"][EXTENSION]`; the server itself writes each response's
head and body through it too. This module imports nothing of the server, so the routes (and any
other ASGI server, which offers no writer) do not depend on it.

The response head is held back until the first body bytes, so head and first chunk go out in
one write: one segment and one wake-up of the client. Until then the head can be taken back
(`unstart`), which lets a stream that failed before its first token answer with another
status.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

EXTENSION = "inhouse.chunk_writer"


class Transport(Protocol):
    """The part of `asyncio.Transport` the writer uses."""

    def write(self, data: bytes) -> None: ...

    def is_closing(self) -> bool: ...


class Flow(Protocol):
    """The connection's write flow control, as far as the writer uses it."""

    write_paused: bool

    async def drain(self) -> None: ...


class ChunkWriter:
    """Writes the connection's current response: its held head (`hold_head`), chunks of a
    chunked body (`write_chunk`, for the routes), raw bytes (`write`, for the server)."""

    __slots__ = ("_flow", "_held", "_on_lost", "_transport", "is_lost", "on_unstart")

    def __init__(self, transport: Transport, flow: Flow) -> None:
        self._transport = transport
        self._flow = flow
        self._held = b""
        self._on_lost: Callable[[], None] | None = None
        self.is_lost = False
        # Set by the server: forget that the current response started (True if it could).
        self.on_unstart: Callable[[], bool] | None = None

    def watch(self, on_lost: Callable[[], None] | None) -> None:
        """Call `on_lost` if the client goes away (None: stop watching); at once if it is gone
        already. Cheaper than a task waiting on ASGI `receive` for `http.disconnect`."""
        self._on_lost = on_lost
        if on_lost is not None and (self.is_lost or self._transport.is_closing()):
            self.connection_lost()

    def connection_lost(self) -> None:
        """The client is gone (or its connection is closing: nothing more reaches it)."""
        self.is_lost = True
        on_lost, self._on_lost = self._on_lost, None
        if on_lost is not None:
            on_lost()

    def hold_head(self, head: bytes) -> None:
        """The response head, written with the next bytes (or by `flush`)."""
        self._held = head

    def unstart(self) -> bool:
        """Take back a response head that is still held (nothing of the response reached the
        client), so that another status can be sent instead. False if it cannot."""
        on_unstart = self.on_unstart
        if not self._held or on_unstart is None or not on_unstart():
            return False
        self._held = b""
        return True

    def write_chunk(self, data: bytes) -> bool:
        """One chunk; False when the client's buffer is full (stop the source until
        `wait_writable`). A connection that is closing takes nothing more: its watcher is told
        the client is gone (a close waits for a buffer a client may never read)."""
        framed = b"%x\r\n%b\r\n" % (len(data), data)
        if self._held:
            framed, self._held = self._held + framed, b""
        if self._transport.is_closing():
            self.connection_lost()
            return True
        self._transport.write(framed)
        return not self._flow.write_paused

    async def wait_writable(self) -> None:
        await self._flow.drain()

    def write(self, data: bytes) -> None:
        """Bytes as they are, after the held head."""
        if self._held:
            data, self._held = self._held + data, b""
        if data and not self._transport.is_closing():
            self._transport.write(data)

    def flush(self) -> None:
        """Write the head if it is still held (a response that ends without body bytes)."""
        self.write(b"")
