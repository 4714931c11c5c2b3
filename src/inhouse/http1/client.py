"""A client for responses timed by each read: connections that hand a response's head and body
to the request's `Receiver`, each piece with the arrival time of the read that carried it, and
a keep-alive pool of them (`StreamPool`), opened by a `Connect` function: plain TCP here
(`connect_tcp`, the read's time taken when the event loop gets to it), the kernel's receive
timestamp in `kernel_ts.py`.

The seam is httpx's transport interface: `StreamPool.handle` is `handle_async_request` for one
raw request, its response going to a receiver instead of coming back as an object (what a
request means, an OpenAI stream and its timings, is the caller's: `inhouse.bench.request_func`,
as vLLM's `endpoint_request_func.py` keeps its request functions apart from the session).
Heads are read by the one httptools reader (`reader.ResponseReader`) the gateway's engine
client uses too. Connections are opened ahead of a run (`prewarm`), so a burst of requests
never becomes a storm of TCP handshakes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, cast

import httptools

from inhouse.http1.reader import ResponseReader


class Receiver(Protocol):
    """What a request makes of its response; `now` is the arrival time of the bytes
    (`perf_counter` seconds)."""

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None: ...

    def on_body(self, data: bytes, now: float) -> None: ...

    def on_end(self, now: float) -> None: ...

    def on_lost(self, reason: str) -> None:
        """The response broke off (or could not be read): `reason` says how."""

    def on_timeout(self, timeout_s: float) -> None:
        """No whole response within `timeout_s`: the connection is cut next."""

    def restart(self) -> None:
        """Forget a try that got no byte back: the request is sent once more."""


class StreamConnection(ResponseReader, asyncio.Protocol):
    """One keep-alive connection; one request at a time (`send`). A transport that reads its
    own socket calls `feed` with each read's arrival time."""

    __slots__ = ("_done", "_is_close_delimited", "_now", "is_open", "is_timed_out", "receiver",
                 "transport")  # fmt: skip

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.receiver: Receiver | None = None
        self.is_open = False
        self.is_timed_out = False
        self._done: asyncio.Future[None] | None = None
        self._now = 0.0
        self._is_close_delimited = False
        self.reset_reader()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # NOTE: uvloop's transports are not asyncio.Transport subclasses; no isinstance check.
        self.transport = cast(asyncio.Transport, transport)
        self.is_open = True

    def send(self, data: bytes, receiver: Receiver) -> asyncio.Future[None]:
        """Write a request; the future is done when its response has ended or failed."""
        self.reset_reader()
        self._is_close_delimited = False
        self.is_timed_out = False
        self.receiver = receiver
        self._done = done = asyncio.get_running_loop().create_future()
        self.write(data)
        return done

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    @property
    def is_finished(self) -> bool:
        """The current response has ended or failed (or none was sent)."""
        done = self._done
        return done is None or done.done()

    def _complete(self) -> None:
        done = self._done
        if done is not None and not done.done():
            done.set_result(None)

    # -- reading ------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self.feed(data, time.perf_counter())

    def feed(self, data: bytes, now: float) -> None:
        """Bytes that arrived at `now` (`perf_counter` seconds)."""
        if self.receiver is None or self.is_finished:
            return  # nothing asked for them
        self._now = now
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self.receiver.on_lost(f"bad response: {exc}")
            self._complete()
            self.abort()

    def on_head(self) -> None:
        if self.is_finished:
            return  # bytes after the response: not read
        framed = False
        for name, value in self.headers:
            if name == b"content-length" or (
                name == b"transfer-encoding" and b"chunked" in value.lower()
            ):
                framed = True
        self._is_close_delimited = not framed  # the body ends when the server closes
        assert self.receiver is not None
        self.receiver.on_head(self.status, self.headers)

    def on_body(self, body: bytes) -> None:
        if not self.is_finished:
            assert self.receiver is not None
            self.receiver.on_body(body, self._now)

    def on_message_complete(self) -> None:
        if not self.is_finished:
            assert self.receiver is not None
            self.receiver.on_end(self._now)
            self._complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self.is_open = False
        receiver = self.receiver
        if receiver is None or self.is_finished:
            return
        try:
            if self.status and self._is_close_delimited:
                receiver.on_end(time.perf_counter())
            else:
                receiver.on_lost(f"connection lost: {exc or 'closed'}")
        finally:
            # NOTE: even when the receiver raises: nothing else would end the exchange (the
            # timeout's abort finds the connection already closed), so its request would hang.
            self._complete()


Connect = Callable[[str, int], Awaitable[StreamConnection]]


async def connect_tcp(host: str, port: int) -> StreamConnection:
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(StreamConnection, host, port)
    return conn


def _expire(conn: StreamConnection, receiver: Receiver, timeout_s: float) -> None:
    conn.is_timed_out = True
    receiver.on_timeout(timeout_s)
    conn.abort()  # connection_lost ends the response as failed


class StreamPool:
    """Keep-alive connections to one server (the most recently used first), opened by
    `connect`; `handle` sends one request on one of them."""

    def __init__(self, host: str, port: int, connect: Connect = connect_tcp) -> None:
        self.host = host
        self.port = port
        self._connect = connect
        self._idle: list[StreamConnection] = []
        self.num_opened = 0
        self.num_open_errors = 0
        self.num_retries = 0

    async def open(self) -> StreamConnection:
        conn = await self._connect(self.host, self.port)
        self.num_opened += 1
        return conn

    async def prewarm(self, num_connections: int) -> None:
        """Open connections ahead of the run (a burst then finds them ready)."""
        opened = await asyncio.gather(
            *(self.open() for _ in range(num_connections)), return_exceptions=True
        )
        for conn in opened:
            if isinstance(conn, StreamConnection):
                self._idle.append(conn)
            else:
                self.num_open_errors += 1

    async def handle(self, request: bytes, receiver: Receiver, timeout_s: float) -> None:
        """Send `request` (head and body) and hand its response to `receiver` until it ends,
        fails or runs past `timeout_s`, connecting included. Raises OSError when no connection
        can be opened, TimeoutError (an OSError) when none opens within `timeout_s`.

        A kept-alive connection the server closed while idle fails before any byte comes back;
        such a request is sent once more on a new connection, within the same `timeout_s`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        conn: StreamConnection | None = None
        try:
            conn = self._take()
            reused = conn is not None
            if conn is None:
                conn = await self._open_by(deadline, timeout_s)
            await self._exchange(conn, request, receiver, deadline, timeout_s)
            if reused and conn.status == 0 and not conn.is_timed_out:
                self.num_retries += 1
                receiver.restart()
                conn = await self._open_by(deadline, timeout_s)
                await self._exchange(conn, request, receiver, deadline, timeout_s)
        except OSError:
            self.num_open_errors += 1
            raise
        except asyncio.CancelledError:
            if conn is not None:
                conn.abort()
            raise

    async def _open_by(self, deadline: float, timeout_s: float) -> StreamConnection:
        """A new connection opened before `deadline` (loop time). NOTE: a server whose accept
        queue is full drops the SYN, and the kernel retries it for about two minutes: without
        this bound a request to an overloaded server outlived its own timeout."""
        remaining_s = deadline - asyncio.get_running_loop().time()
        try:
            return await asyncio.wait_for(self.open(), max(remaining_s, 0.0))
        except TimeoutError:
            raise TimeoutError(
                f"no connection to {self.host}:{self.port} within the request's "
                f"timeout of {timeout_s:g} s (the server's accept queue may be full)"
            ) from None

    async def _exchange(
        self,
        conn: StreamConnection,
        request: bytes,
        receiver: Receiver,
        deadline: float,
        timeout_s: float,
    ) -> None:
        loop = asyncio.get_running_loop()
        done = conn.send(request, receiver)
        timer = loop.call_at(deadline, _expire, conn, receiver, timeout_s)
        try:
            await done
        finally:
            timer.cancel()
        if conn.keep_alive and conn.is_open and conn.status:
            self._idle.append(conn)
        else:
            conn.abort()

    def _take(self) -> StreamConnection | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.is_open:
                return conn
        return None

    def close(self) -> None:
        for conn in self._idle:
            conn.abort()
        self._idle.clear()
