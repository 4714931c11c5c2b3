"""The gateway's HTTP/1.1 connection: httptools' parser under asyncio protocols, an ASGI app on
top (`listener.GatewayServer` listens; docs/gateway.md, "The HTTP server", says why not
uvicorn and what is measured). Reading requests and the limits on it are the connection's base,
`request_reader.RequestReader`. What it does, in the open:

* **One request at a time per connection, in order** (pipelined requests wait; reading pauses).
* **A request starts when its body is complete,** eagerly (`eager.start_eagerly`), up to its
  first wait; a body past `HIGH_WATER_BYTES` starts its handler at once and is read as the
  handler takes it; `Expect: 100-continue` starts at the head.
* **The response head waits for the first body bytes** (`ChunkWriter`, one write for both;
  `ChunkWriter.unstart` takes a held head back).
* **Keep-alive** for `keep_alive_s` without a byte read while no handler works, one timer per
  connection re-armed only when it fires early. A request answered before its body was read
  (a 401, a 413) has the rest of its body read and dropped up to `MAX_DROPPED_BYTES`.
* **Bad input** (malformed; a head or a chunked body's trailers over `MAX_HEAD_BYTES`; not
  exactly one `Host` on HTTP/1.1; `Transfer-Encoding` on HTTP/1.0) gets a 400 or 431 in
  OpenAI's error shape and a close, after the answers to the requests read before it; a
  handler failing before its response gets a 500, mid-response a cut connection.
* **Hostile clients** (`gateway.server`): a head not complete `header_timeout_s` after its
  first byte (or the connection's opening) gets 408; past `max_connections` a connection gets
  503; a client whose buffer stays full `send_timeout_s` is cut off. A line that never ends is
  refused once the bytes read without the parser completing anything pass `MAX_HEAD_BYTES`
  (no quadratic re-copying); body bytes never count as head.
* **Shutdown**: idle connections close, busy ones after their response (`shutdown`).

WebSocket and HTTP/2 upgrades are not offered (answered as HTTP/1.1, then closed).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import TYPE_CHECKING, Any

import httptools

from inhouse.http1.chunk_writer import ChunkWriter
from inhouse.http1.eager import start_eagerly
from inhouse.http1.exchange import HIGH_WATER_BYTES, STATUS_LINES, Exchange
from inhouse.http1.request_reader import MAX_DROPPED_BYTES, MAX_HEAD_BYTES, RequestReader
from inhouse.openai_errors import error_json

if TYPE_CHECKING:
    from inhouse.http1.listener import GatewayServer

__all__ = ["HIGH_WATER_BYTES", "MAX_DROPPED_BYTES", "MAX_HEAD_BYTES", "GatewayProtocol"]

log = logging.getLogger("inhouse.http1")


class GatewayProtocol(RequestReader, asyncio.Protocol):
    """One client connection (what it reads and the limits on it: `RequestReader`)."""

    def __init__(self, server: GatewayServer) -> None:
        self.server = server
        self.loop = server.loop
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.writer: ChunkWriter = None  # type: ignore[assignment]  # set on connection_made
        self.write_paused = False
        self._drains: list[asyncio.Future[None]] = []
        self._is_read_paused = False
        self._is_refused = False  # a request could not be read: nothing more will be
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._num_head_bytes = 0  # of the head being read, as parsed
        self._num_trailer_bytes = 0  # of a chunked body's trailers, as parsed
        self._num_stale = 0  # bytes read since the parser last completed anything
        self._num_dropped = 0  # body bytes read and dropped (answered before they came)
        self._is_progress = False  # a parser callback ran during this read
        self._num_hosts = 0
        self._has_transfer_encoding = False
        self._head_since: float | None = None  # a head is awaited or being read since then
        self._send_timer: asyncio.TimerHandle | None = None
        self._expects_continue = False
        self._is_in_head = False
        # From a request's first byte to its end (body and trailers too): bytes read in it
        # that complete nothing count towards MAX_HEAD_BYTES, and a header timeout in it is
        # a 408 (outside it, an idle connection that just closes).
        self._is_in_message = False
        self._parsing: Exchange | None = None  # the request whose bytes are being read
        self._active: Exchange | None = None  # the request being answered
        self._pipeline: collections.deque[Exchange] = collections.deque()
        self._is_shutting_down = False
        self._quiet_since = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._addresses: tuple[Any, Any, str] = (None, None, "http")

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.writer = ChunkWriter(self.transport, self)  # type: ignore[arg-type]
        self.writer.on_unstart = self._unstart
        if len(self.server.connections) >= self.server.max_connections:
            self._is_refused = True
            self._write_error(503, "The gateway has too many connections open; retry shortly.")
            self.close()
            return
        scheme = "https" if transport.get_extra_info("sslcontext") else "http"
        self._addresses = (
            _address(transport.get_extra_info("sockname")),
            _address(transport.get_extra_info("peername")),
            scheme,
        )
        self.server.connections.add(self)
        self._head_since = self.loop.time()
        self._go_quiet()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for exchange in (self._active, self._parsing, *self._pipeline):
            if exchange is not None:
                exchange.disconnect()
        self._pipeline.clear()
        self._parsing = None
        self.write_paused = False
        self._cancel_send_timer()
        self._wake_drains()
        self.writer.connection_lost()

    def pause_writing(self) -> None:
        self.write_paused = True
        if self._send_timer is None:
            self._send_timer = self.loop.call_later(
                self.server.send_timeout_s, self._on_send_timeout
            )

    def resume_writing(self) -> None:
        self.write_paused = False
        self._cancel_send_timer()
        self._wake_drains()

    def _cancel_send_timer(self) -> None:
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _on_send_timeout(self) -> None:
        """The client read nothing for `send_timeout_s` with its buffer full: cut it off (its
        handler sees the client gone, and its engine request is aborted)."""
        self._send_timer = None
        if self.write_paused and self.transport is not None:
            log.info("a client read nothing for %g s; connection cut", self.server.send_timeout_s)
            self.transport.abort()

    def _wake_drains(self) -> None:
        drains, self._drains = self._drains, []
        for waiter in drains:
            if not waiter.done():
                waiter.set_result(None)

    async def drain(self) -> None:
        """Wait until the client's buffer has room (or the client is gone)."""
        if self.write_paused and self.transport is not None and not self.transport.is_closing():
            waiter = self.loop.create_future()
            self._drains.append(waiter)
            await waiter

    # -- requests and responses ---------------------------------------------------------

    def _start(self, exchange: Exchange) -> None:
        """Run the app for `exchange` (the active one): eagerly, from this callback."""
        exchange.is_started = True
        task = start_eagerly(self.loop, exchange.run(self.server.app))
        tasks = self.server.tasks
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def response_done(self, exchange: Exchange) -> None:
        """`exchange`'s response is complete: close, or go on to the next request."""
        if self._active is exchange:
            self._active = None
        if exchange is self._parsing:
            # Answered before its body was read (a 401, a 413, a 503 while draining): what is
            # buffered goes, the rest is read and dropped, and the next request is read after.
            exchange.drop_body()
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if not exchange.keep_alive or (self._is_shutting_down and not self._pipeline):
            self.close()
            return
        if self._pipeline:
            following = self._active = self._pipeline.popleft()
            self.update_reading()
            if following.is_ready:
                self._start(following)  # else when its body is complete (or big)
            return
        self.update_reading()
        self._go_quiet()

    def _unstart(self) -> bool:
        exchange = self._active
        return exchange is not None and exchange.unstart()

    def write_continue(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def update_reading(self) -> None:
        """Pause reading while a request waits behind the active one or a body is buffered
        past the mark (or for good, once a request could not be read); resume when neither
        holds."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        parsing = self._parsing
        pause = (
            self._is_refused
            or bool(self._pipeline)
            or (parsing is not None and parsing.num_buffered > HIGH_WATER_BYTES)
        )
        if pause != self._is_read_paused:
            self._is_read_paused = pause
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()

    def _refuse(self, status: int, message: str | None = None) -> None:
        """A request could not be read: the requests read before it are answered, this one
        gets `status` (400, 408 or 431) if nothing of its own response went out, then the
        connection closes."""
        transport = self.transport
        if transport is None or transport.is_closing() or self._is_refused:
            return
        self._is_refused = True
        self.update_reading()
        broken, self._parsing = self._parsing, None
        if broken is not None:  # its body could not be read
            broken.disconnect()  # its handler, if it started, sees the client gone
            if broken is self._active:
                self._active = None
            elif broken in self._pipeline:
                self._pipeline.remove(broken)
            if broken.response_started:
                self.close()  # something of its own answer may be out: no other
                return
        before = self._pipeline[-1] if self._pipeline else self._active
        if before is not None:
            before.keep_alive = False  # answer the requests read before it, then close
            return
        if message is None:
            message = (
                "The request's line and headers exceed the gateway's limit."
                if status == 431
                else "Invalid HTTP request."
            )
        self._write_error(status, message)
        self.close()

    def _write_error(self, status: int, message: str) -> None:
        """An error response in OpenAI's shape, with `connection: close`."""
        assert self.transport is not None
        kind = {408: "RequestTimeout", 503: "Service Unavailable"}.get(status, "BadRequestError")
        body = error_json(message, kind, None, status)
        head = b"".join(
            (
                STATUS_LINES[status],
                self.server.date_line(),
                b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body),
                b"connection: close\r\n\r\n",
            )
        )
        self.transport.write(head + body)

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.writer.flush()
            self.transport.close()

    # -- quiet connections --------------------------------------------------------------

    def _is_busy(self) -> bool:
        """A handler is at work on the active request (its own timeouts apply)."""
        active = self._active
        return active is not None and active.is_started

    def _go_quiet(self) -> None:
        """Nothing in progress from here: the connection closes after `keep_alive_s` without
        a byte read (idle between requests, or a request that stopped half way), or when a
        head it started is not complete `header_timeout_s` after its first byte."""
        self._quiet_since = self.loop.time()
        if self._timer is None:
            self._timer = self.loop.call_later(self.server.timer_period_s, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self.transport is None or self.transport.is_closing():
            return
        server = self.server
        now = self.loop.time()
        left = float("inf")
        if self._head_since is not None:
            left = self._head_since + server.header_timeout_s - now
            if left <= 0:
                self._head_timed_out()
                return
        if self._is_busy():
            return  # busy: armed again when its response is done
        quiet = self._quiet_since + server.keep_alive_s - now
        if quiet <= 0:
            self.close()
        else:
            self._timer = self.loop.call_later(min(left, quiet), self._on_timer)

    def _head_timed_out(self) -> None:
        if not self._is_in_message:
            self.close()  # not a byte of a request: an idle connection, closed
            return
        timeout = self.server.header_timeout_s
        self._refuse(408, f"The request's line and headers did not arrive within {timeout:g} s.")

    def shutdown(self) -> None:
        """Close now unless a handler is at work; then after its response."""
        self._is_shutting_down = True
        if not self._is_busy():
            self.close()
        elif self._active is not None:
            self._active.keep_alive = False


def _address(value: Any) -> tuple[str, int] | None:
    if isinstance(value, tuple) and len(value) >= 2:
        return (str(value[0]), int(value[1]))
    return None
