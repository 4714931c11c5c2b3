"""ASGI `send` behind the writer interface the stream relay writes to (`ChunkWriter`'s), for a
server that offers no writer: any ASGI server but the gateway's own (`http_server.py`), and
the tests' ASGI transport. So every stream goes through one relay (`stream.relay_stream`).

As `ChunkWriter` does, the response head is held until the first body bytes, so a stream that
fails before its first token can be taken back (`unstart`) and answered by another replica.
Chunks go out one `send` at a time; while one is out the relay stops reading the engine
(`write_chunk` answers False until `wait_writable`), the backpressure an awaited `send` gives.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import Message, Send


class SendWriter:
    __slots__ = ("_chunks", "_error", "_pump", "_send", "_start", "is_lost")

    def __init__(self, send: Send) -> None:
        self._send = send
        self._start: Message | None = None
        self._chunks: list[bytes] = []
        self._pump: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self.is_lost = False  # a client that leaves is seen by `ClientWatch` here

    async def send(self, message: Message) -> None:
        """The relay's ASGI messages: a start is held; a body goes after the chunks before it."""
        if message["type"] == "http.response.start":
            self._start = message
            return
        await self.wait_writable()
        if self._error is not None:
            raise self._error
        await self._send_start()
        await self._send(message)

    def write_chunk(self, data: bytes) -> bool:
        if self._error is not None:
            raise self._error
        self._chunks.append(data)
        if self._pump is None:
            self._pump = asyncio.ensure_future(self._run())
        return False

    async def wait_writable(self) -> None:
        pump = self._pump
        if pump is not None:
            await asyncio.shield(pump)

    def unstart(self) -> bool:
        """Take back the held head (nothing of the response was sent)."""
        if self._start is None:
            return False
        self._start = None
        return True

    def flush(self) -> None:
        """Nothing to do: the end of the body, sent through `send`, takes a held head along."""

    async def _send_start(self) -> None:
        start, self._start = self._start, None
        if start is not None:
            await self._send(start)

    async def _run(self) -> None:
        chunks = self._chunks
        try:
            while chunks:
                data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                chunks.clear()
                await self._send_start()
                body: dict[str, Any] = {"type": "http.response.body", "body": data,
                                        "more_body": True}  # fmt: skip
                await self._send(body)
        except Exception as exc:  # raised to the relay by its next write
            self._error = exc
        finally:
            self._pump = None
