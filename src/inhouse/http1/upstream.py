"""The data path to the engines: a lean HTTP/1.1 client on asyncio protocols and httptools
(the response head read by `reader.ResponseReader`, which the bench's client shares).

Why not httpx here (it stays for health checks, scrapes and `/tokenize`): measured on this
machine, an httpx `AsyncClient` spent ~5 ms of CPU per streamed 16-chunk request with a
32-connection pool (connection-pool bookkeeping per request, anyio socket attributes per read),
five times the whole budget; this client spends one `data_received` and one parser callback
per chunk. Bytes are relayed as they come, never re-serialized.

One `UpstreamPool` per replica keeps idle keep-alive connections, the most recently used first,
for up to `idle_s` (the gateway's `proxy.upstream_idle_s`). An engine that closes an idle one
sooner is seen closing it (never reused); a request that fails on a reused connection before
any byte came back (the engine closed it as it was written) is retried once on a fresh
connection; any other failure is the caller's to retry elsewhere.

Why keep them long: a connect on a request's path costs it a round trip, and under bursty
traffic the connections beyond the usual concurrency idle between bursts. With a 4 s idle limit
the overhead benchmark's p99 read +4.0 and +4.4 ms; with 60 s, +2.4 ms (docs/gateway.md). So
the engines `inhouse up` launches and `inhouse render` deploys keep idle connections 75 s
(`ENGINE_KEEP_ALIVE_S`), vLLM's default being 5 s.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Coroutine
from typing import Any

import httptools

from inhouse.http1.reader import ResponseReader

PAUSE_BUFFER_BYTES = 1 << 20


class UpstreamError(Exception):
    """The engine could not be reached or the connection broke, or it answered with an error
    status to be retried elsewhere (`status`). `is_before_response`: no byte of the response
    came back (safe to retry on another replica)."""

    def __init__(
        self,
        message: str,
        is_before_response: bool,
        is_timeout: bool = False,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.is_before_response = is_before_response
        # No answer in time: the engine may be working on the request, never send it again.
        self.is_timeout = is_timeout
        self.status = status


class _Connection(ResponseReader, asyncio.Protocol):
    __slots__ = (
        "_body_bytes",
        "_chunks",
        "_done",
        "_error",
        "_head",
        "_is_reading_paused",
        "_loop",
        "_paused",
        "_pool",
        "_silence_s",
        "_silence_timer",
        "_sink",
        "_sink_error",
        "_waiter",
        "idle_since",
        "is_closed",
        "num_received",
        "transport",
    )

    def __init__(self, pool: UpstreamPool) -> None:
        self._pool = pool
        # NOTE: the loop, kept: `asyncio.get_running_loop()` costs a getpid() system call per
        # call on Python 3.11, and reads wait on a new future for every chunk.
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.is_closed = False
        self.idle_since = 0.0
        self._silence_s = 0.0
        self._silence_timer: asyncio.TimerHandle | None = None
        self._is_reading_paused = False
        self._reset()

    def _reset(self) -> None:
        self.reset_reader()
        self._head: asyncio.Future[None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._chunks: collections.deque[bytes] = collections.deque()
        self._body_bytes = 0
        self._done = False
        self._error: UpstreamError | None = None
        self._paused = False
        self._sink: Callable[[bytes], None] | None = None
        self._sink_error: Exception | None = None
        self.num_received = 0

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.num_received += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(f"bad response from engine: {exc}", self.status == 0))
            self.close()
            return
        sink = self._sink
        if sink is not None and self._chunks and not self._done:
            try:
                sink(self._take_chunks())
            except Exception as exc:
                # NOTE: raised here it would reach asyncio, which closes this connection and
                # the relay would blame the engine; `relay` raises it in the request's task.
                self._sink = None
                self._sink_error = exc
                self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.is_closed = True
        if not self._done:
            reason = f"engine connection lost: {exc}" if exc else "engine closed the connection"
            self._fail(UpstreamError(reason, self.status == 0))

    # -- httptools callbacks (the head: ResponseReader) -------------------------------------

    def on_head(self) -> None:
        head = self._head
        if head is not None and not head.done():
            head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._body_bytes += len(body)
        if self._body_bytes > PAUSE_BUFFER_BYTES and not self._paused and self.transport:
            self._paused = True
            self.transport.pause_reading()
        if self._sink is None:
            self._wake()

    def on_message_complete(self) -> None:
        self._done = True
        self._wake()

    # -- helpers ------------------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: UpstreamError) -> None:
        if self._error is None:
            self._error = error
        for future in (self._head, self._waiter):
            if future is not None and not future.done():
                future.set_exception(error)

    def _time_out(self, timeout_s: float) -> None:
        message = f"no response from engine within {timeout_s:g} s"
        self._fail(UpstreamError(message, True, is_timeout=True))

    def close(self) -> None:
        self.is_closed = True
        if self.transport is not None:
            self.transport.close()

    async def send(self, data: bytes, timeout_s: float) -> None:
        """Write a request and wait for the response head (or fail)."""
        assert self.transport is not None, "connected before use"
        if self.is_closed:
            raise UpstreamError("engine closed the connection", True)
        loop = self._loop
        self._silence_s = timeout_s
        self._head = head = loop.create_future()
        self.transport.write(data)
        timer = loop.call_later(timeout_s, self._time_out, timeout_s)
        try:
            await head
        finally:
            timer.cancel()

    @property
    def is_complete(self) -> bool:
        """The body has ended and every byte of it has been read: nothing is left."""
        return self._done and not self._chunks

    def _take_chunks(self) -> bytes:
        chunks = self._chunks
        data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._body_bytes = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    def _raise_error(self) -> None:
        error = self._error
        if error is not None:
            if error.is_before_response:
                raise UpstreamError(str(error), False)
            raise error

    async def _wait(self) -> None:
        self._waiter = waiter = self._loop.create_future()
        if self._silence_s > 0:
            self._arm_silence()
        try:
            await waiter
        finally:
            self._waiter = None
            timer, self._silence_timer = self._silence_timer, None
            if timer is not None:
                timer.cancel()

    def _arm_silence(self) -> None:
        self._silence_timer = self._loop.call_later(
            self._silence_s, self._check_silence, self.num_received
        )

    def _check_silence(self, num_received: int) -> None:
        """A body read's timer: fail if the engine sent no byte in `_silence_s` (a hung
        engine that keeps its socket open would otherwise hold the request, its replica slot
        and its tenant's lease for as long as the client waits); else look again later. Not
        while the gateway itself stopped reading (backpressure from a slow client)."""
        self._silence_timer = None
        waiter = self._waiter
        if waiter is None or waiter.done() or self._done:
            return
        if self.num_received == num_received and not self._is_reading_paused:
            message = f"the engine sent nothing for {self._silence_s:g} s"
            self._fail(UpstreamError(message, False, is_timeout=True))
            return
        self._arm_silence()

    async def read(self) -> bytes | None:
        """The body bytes received so far (waiting for some), None at the end. A failure
        here comes after the response head: never `is_before_response`."""
        while True:
            if self._chunks:
                return self._take_chunks()
            if self._done:
                return None
            self._raise_error()
            await self._wait()

    async def relay(self, sink: Callable[[bytes], None]) -> bytes:
        """Hand body bytes to `sink` from `data_received` as they arrive (no future, no task
        switch per chunk) until the body is complete; returns its last bytes (maybe b"")."""
        if self._chunks and not self._done:
            sink(self._take_chunks())
        self._sink = sink
        try:
            while not self._done:
                self._raise_error()
                await self._wait()  # woken at the end of the body or by a failure
                if self._sink_error is not None:
                    raise self._sink_error
        finally:
            self._sink = None
        return self._take_chunks() if self._chunks else b""

    def pause_reading(self) -> None:
        if self.transport is not None and not self.is_closed:
            self._is_reading_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.is_closed:
            self._is_reading_paused = False
            self.transport.resume_reading()


class Response:
    """An engine's response: `status`, `headers`, then `read()` until None. `release()` hands
    a fully read keep-alive connection back to the pool; `abort()` closes it; `close()` closes
    it unless it was released or closed already (the end of every request, however it ended:
    an engine request is never left running on a connection nobody reads)."""

    __slots__ = ("_conn", "_pool", "headers", "is_finished", "status")

    def __init__(self, pool: UpstreamPool, conn: _Connection) -> None:
        self._pool = pool
        self._conn = conn
        self.status = conn.status
        self.headers = conn.headers
        self.is_finished = False

    def read(self) -> Coroutine[Any, Any, bytes | None]:
        """The body bytes received so far (waiting for some), None at the end."""
        return self._conn.read()

    def relay(self, sink: Callable[[bytes], None]) -> Coroutine[Any, Any, bytes]:
        """Body bytes to `sink` as they arrive; returns the last ones (see `_Connection`)."""
        return self._conn.relay(sink)

    def pause_reading(self) -> None:
        """Backpressure: stop reading the engine (the client's buffer is full)."""
        self._conn.pause_reading()

    def resume_reading(self) -> None:
        self._conn.resume_reading()

    @property
    def is_complete(self) -> bool:
        """The engine sent the whole body (what `read` returns next is the rest)."""
        return self._conn.is_complete

    async def read_all(self) -> bytes:
        parts = []
        while (data := await self.read()) is not None:
            parts.append(data)
        self.release()
        return b"".join(parts)

    def release(self) -> None:
        if self.is_finished:
            return
        self.is_finished = True
        conn = self._conn
        if conn._done and conn.keep_alive and not conn.is_closed:
            self._pool.put_idle(conn)
        else:
            conn.close()

    def abort(self) -> None:
        if not self.is_finished:
            self.is_finished = True
            self._conn.close()

    def close(self) -> None:
        """Close the connection unless the response was released (or closed) already."""
        self.abort()


def authority(host: str, port: int) -> str:
    """`host:port` as a URL or a Host header writes it: an IPv6 address (a scaled pool's pod)
    in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class UpstreamPool:
    """Keep-alive connections to one engine replica."""

    def __init__(self, host: str, port: int, connect_timeout_s: float = 2.0, idle_s: float = 60.0):
        self.host = host
        self.port = port
        self.connect_timeout_s = connect_timeout_s
        self.idle_s = idle_s
        self._idle: collections.deque[_Connection] = collections.deque()
        self._host_header = authority(host, port).encode()
        self.is_closed = False

    def put_idle(self, conn: _Connection) -> None:
        if self.is_closed:  # a response that outlived its pool (its engine left): no reuse
            conn.close()
            return
        conn._reset()
        conn.idle_since = time.monotonic()
        self._idle.append(conn)

    def _take_idle(self) -> _Connection | None:
        now = time.monotonic()
        idle = self._idle
        while idle:
            conn = idle.pop()  # most recently used: the warmest
            # Bytes that came while idle (a 408 before a close, say) were no answer to anything
            # and would be read as the next one's: such a connection is not reused.
            if not conn.is_closed and not conn.num_received and now - conn.idle_since < self.idle_s:
                return conn
            conn.close()
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(self), self.host, self.port),
                self.connect_timeout_s,
            )
        except (TimeoutError, OSError) as exc:
            raise UpstreamError(f"cannot connect to {self.host}:{self.port}: {exc}", True) from None
        return conn

    def head(self, method: str, path: str, length: int, request_id: str) -> bytes:
        return b"".join(
            (
                f"{method} {path} HTTP/1.1\r\nhost: ".encode(),
                self._host_header,
                b"\r\ncontent-type: application/json\r\naccept: */*\r\nx-request-id: ",
                request_id.encode(),
                f"\r\ncontent-length: {length}\r\n\r\n".encode(),
            )
        )

    async def request(
        self, method: str, path: str, body: bytes, request_id: str, timeout_s: float
    ) -> Response:
        data = self.head(method, path, len(body), request_id) + body
        conn = self._take_idle()
        if conn is not None:
            try:
                await conn.send(data, timeout_s)
                return Response(self, conn)
            except UpstreamError as exc:
                conn.close()
                if conn.num_received or exc.is_timeout:
                    raise
                # The engine closed the idle connection as we reused it: one fresh try.
            except BaseException:
                conn.close()  # cancelled (the client left): the engine sees the close, aborts
                raise
        conn = await self._connect()
        try:
            await conn.send(data, timeout_s)
        except BaseException:
            conn.close()
            raise
        return Response(self, conn)

    def close(self) -> None:
        """Close the idle connections; those of responses still being read close when they
        are released (a replica's engine left: nothing is reused, nothing in flight is cut)."""
        self.is_closed = True
        while self._idle:
            self._idle.pop().close()
