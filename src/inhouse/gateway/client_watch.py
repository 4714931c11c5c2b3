"""Notice a client that leaves while its request is at work, in every phase, and stop the work.

A request the client abandoned must not keep its engine generating, its replica slot, its
concurrency lease or its place in a tier's queue. From the moment its body is read until it
is being settled, the request's task is cancelled when the client goes away: waiting in a tier
queue, for the limit store, for the engine's response head, for a non-streamed answer, or
relaying a stream. Cancellation closes the engine connection (`upstream.Response.close`), and
an engine aborts a request whose connection closes (vLLM does; so does the simulated engine).

How the loss is seen: with the gateway's own server, the connection's `ChunkWriter` calls
back (no task per request); under any other ASGI server, a task waits on `receive()` for
`http.disconnect`.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.types import Receive

from inhouse.http1.chunk_writer import ChunkWriter


class ClientWatch:
    """Cancels the current task when the client leaves, while armed."""

    __slots__ = ("_future", "_task", "_writer", "is_armed", "is_gone")

    def __init__(self, receive: Receive, writer: ChunkWriter | None) -> None:
        self._task = asyncio.current_task()
        self._writer = writer
        self._future: asyncio.Future[Any] | None = None
        self.is_gone = False
        self.is_armed = True
        if writer is not None:
            writer.watch(self._on_lost)  # called at once if the client is gone already
        else:
            self._future = asyncio.ensure_future(receive())
            self._future.add_done_callback(self._on_message)

    def _on_message(self, future: asyncio.Future[Any]) -> None:
        if future.cancelled() or future.exception() is not None:
            return
        if future.result().get("type") == "http.disconnect":
            self._on_lost()

    def _on_lost(self) -> None:
        self.is_gone = True
        if self.is_armed and self._task is not None:
            self.is_armed = False
            self._task.cancel()

    def disarm(self) -> None:
        """From here the request winds down (settle, metrics, log): not to be interrupted."""
        self.is_armed = False
        if self._writer is not None:
            self._writer.watch(None)
        elif self._future is not None and not self._future.done():
            self._future.cancel()

    def absorb(self) -> bool:
        """Inside `except CancelledError`: True (and the cancellation taken back) when it was
        this watch's, for the client leaving; False when someone else cancelled the task."""
        task = self._task
        if not self.is_gone or task is None or task.cancelling() != 1:
            return False
        task.uncancel()
        return True
