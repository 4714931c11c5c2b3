"""The engine connection pool (`upstream.UpstreamPool`): what it sends again and what it reuses."""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator

import pytest
from tests.support.mock_server import take_request

from inhouse.http1.upstream import UpstreamError, UpstreamPool

OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


@contextlib.asynccontextmanager
async def engine(answer: list[str]) -> AsyncIterator[tuple[int, list[int]]]:
    """An engine answering its n-th request by `answer[n]`: `ok`, `never` (no answer),
    `ok+408` (answer, then an unsolicited 408 on the idle connection, which stays open) or
    `ok+close` (answer, then close the idle connection).
    Yields its port and the connection number of every request it got."""
    got: list[int] = []
    connections = [0]

    class Conn(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: asyncio.Transport = transport  # type: ignore[assignment]
            self.buffer = b""
            connections[0] += 1
            self.number = connections[0]

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            while (request := take_request(self.buffer)) is not None:
                self.buffer = request[2]
                mode = answer[len(got)] if len(got) < len(answer) else "ok"
                got.append(self.number)
                if mode.startswith("ok"):
                    self.transport.write(OK)
                if mode == "ok+408":
                    late = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\n\r\n"
                    asyncio.get_running_loop().call_later(0.05, self.transport.write, late)
                if mode == "ok+close":  # its keep-alive timer fires
                    asyncio.get_running_loop().call_later(0.05, self.transport.close)

    server = await asyncio.get_running_loop().create_server(Conn, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], got
    finally:
        server.close()


async def post(pool: UpstreamPool, timeout_s: float = 5.0) -> bytes:
    response = await pool.request("POST", "/v1/completions", b"{}", "r", timeout_s)
    return await response.read_all()


def test_a_request_that_timed_out_on_a_reused_connection_is_not_sent_again() -> None:
    """The engine may be working on it: a timeout is the caller's to handle, never a silent
    second copy of the request on the same replica."""

    async def main() -> None:
        async with engine(["ok", "never"]) as (port, got):
            pool = UpstreamPool("127.0.0.1", port)
            assert await post(pool) == b"{}"  # its connection now idles in the pool
            with pytest.raises(UpstreamError) as failed:
                await post(pool, timeout_s=0.3)
            assert failed.value.is_timeout
            await asyncio.sleep(0.1)
            assert got == [1, 1]  # sent once, on the reused connection
            pool.close()

    asyncio.run(main())


def test_an_idle_connection_that_received_bytes_is_not_reused() -> None:
    """Bytes that came while idle answer nothing; read as the next request's they would hang
    it. The next request goes on a fresh connection and gets its own answer."""

    async def main() -> None:
        async with engine(["ok+408", "ok"]) as (port, got):
            pool = UpstreamPool("127.0.0.1", port)
            assert await post(pool) == b"{}"
            await asyncio.sleep(0.2)  # the unsolicited 408 arrives on the idle connection
            assert await asyncio.wait_for(post(pool), 5) == b"{}"
            assert got == [1, 2]
            pool.close()

    asyncio.run(main())


def test_an_idle_connection_the_engine_closed_is_replaced_unseen() -> None:
    async def main() -> None:
        async with engine(["ok+close", "ok"]) as (port, got):
            pool = UpstreamPool("127.0.0.1", port, idle_s=60.0)
            assert await post(pool) == b"{}"
            await asyncio.sleep(0.2)
            assert await post(pool) == b"{}"
            assert got == [1, 2]
            pool.close()

    asyncio.run(main())


def test_a_response_that_outlives_its_closed_pool_is_read_to_its_end_then_closed() -> None:
    """A scaled pool's replica left DNS while a request ran there: the gateway closed its
    pool; the response still reads to its end, and its connection closes instead of idling in
    a pool nobody uses (an open socket per request that ran there)."""

    async def main() -> None:
        async with engine(["ok"]) as (port, _):
            pool = UpstreamPool("127.0.0.1", port)
            response = await pool.request("POST", "/v1/completions", b"{}", "r", 5.0)
            pool.close()
            assert await response.read_all() == b"{}"
            assert pool._idle == collections.deque()  # closed, not kept
            assert response._conn.is_closed

    asyncio.run(main())


def test_the_host_header_brackets_an_ipv6_address() -> None:
    assert b"\r\nhost: [fd00::1]:8000\r\n" in UpstreamPool("fd00::1", 8000).head("GET", "/", 0, "r")
    assert b"\r\nhost: 10.0.0.1:8000\r\n" in UpstreamPool("10.0.0.1", 8000).head("GET", "/", 0, "r")
