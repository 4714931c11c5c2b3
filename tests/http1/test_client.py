"""`client.StreamPool` and its connections on a real socket, against raw answers: framing
(chunked, content-length, to the close), reuse, a malformed head and a timeout, as a request
function's `Receiver` sees them."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Awaitable, Callable

from inhouse.http1.client import StreamPool, connect_tcp
from inhouse.http1.kernel_ts import open_timestamped

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Recorder:
    """A `Receiver` that keeps what it was told."""

    def __init__(self) -> None:
        self.status = 0
        self.body = b""
        self.times: list[float] = []
        self.events: list[str] = []

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status = status
        self.events.append("head")

    def on_body(self, data: bytes, now: float) -> None:
        self.body += data
        self.times.append(now)

    def on_end(self, now: float) -> None:
        self.events.append("end")

    def on_lost(self, reason: str) -> None:
        self.events.append(f"lost: {reason}")

    def on_timeout(self, timeout_s: float) -> None:
        self.events.append("timeout")

    def restart(self) -> None:
        self.events.append("restart")


def answering(answer: bytes, pieces: int = 1, close: bool = False) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            step = max(1, len(answer) // pieces)
            for start in range(0, len(answer), step):
                writer.write(answer[start : start + step])
                await writer.drain()
                await asyncio.sleep(0.001)
            if close:
                break
        writer.close()

    return handle


async def exchange(
    handler: Handler, times: int = 1, timeout_s: float = 5.0, kernel: bool = False
) -> tuple[list[Recorder], StreamPool]:
    writers: list[asyncio.StreamWriter] = []

    async def tracked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await handler(reader, writer)

    server = await asyncio.start_server(tracked, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = StreamPool("127.0.0.1", port, open_timestamped if kernel else connect_tcp)
    recorders = []
    for _ in range(times):
        recorder = Recorder()
        await pool.handle(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n", recorder, timeout_s)
        recorders.append(recorder)
    pool.close()
    server.close()
    await server.wait_closed()
    for writer in writers:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    return recorders, pool


CHUNKED = (
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
)


def test_a_chunked_answer_read_in_pieces_is_whole_and_the_connection_reused() -> None:
    for kernel in (False, True):
        recorders, pool = asyncio.run(exchange(answering(CHUNKED, pieces=9), 2, kernel=kernel))
        for r in recorders:
            assert (r.status, r.body, r.events) == (200, b"hello world", ["head", "end"])
            assert r.times == sorted(r.times)
        assert pool.num_opened == 1 and pool.num_retries == 0


def test_a_body_without_length_ends_with_the_close_and_is_not_reused() -> None:
    answer = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nto the end"
    recorders, pool = asyncio.run(exchange(answering(answer, close=True), 2))
    for r in recorders:
        assert (r.body, r.events) == (b"to the end", ["head", "end"])
    assert pool.num_opened == 2


def test_a_malformed_head_is_a_bad_response() -> None:
    recorders, _ = asyncio.run(exchange(answering(b"HTTP/1.1 abc\r\n\r\n")))
    [r] = recorders
    assert r.status == 0 and len(r.events) == 1 and r.events[0].startswith("lost: bad response")


def test_no_answer_in_time_is_a_timeout_and_is_not_sent_again() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(1.0)
        writer.close()

    recorders, pool = asyncio.run(exchange(silent, timeout_s=0.1))
    [r] = recorders
    assert r.events == ["timeout", "lost: connection lost: closed"]
    assert pool.num_retries == 0


def test_a_server_whose_accept_queue_is_full_times_out_within_the_requests_timeout() -> None:
    # A listener that never accepts, its queue filled: Linux drops further SYNs, and connect
    # would retry them for about two minutes. The request's timeout covers connecting.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        held = [socket.socket() for _ in range(4)]
        for held_socket in held:
            held_socket.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                held_socket.connect(("127.0.0.1", port))

        async def one() -> tuple[Recorder, StreamPool, str, float]:
            pool = StreamPool("127.0.0.1", port, connect_tcp)
            recorder = Recorder()
            start = time.monotonic()
            try:
                await pool.handle(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n", recorder, 0.3)
                error = ""
            except OSError as exc:
                error = str(exc)
            return recorder, pool, error, time.monotonic() - start

        try:
            recorder, pool, error, took_s = asyncio.run(one())
        finally:
            for held_socket in held:
                held_socket.close()
    assert took_s < 2.0, f"the request outlived its 0.3 s timeout: {took_s:.1f} s"
    assert error.startswith(f"no connection to 127.0.0.1:{port} within the request's timeout")
    assert pool.num_open_errors == 1 and recorder.events == []
