"""What the gateway's HTTP server refuses on its own (issue 15, defect 5 and the smaller
ones): trailers and never-ending lines counted, body bytes never counted as head, the header
timeout, the connection cap, the send timeout, the Host rule, Transfer-Encoding on HTTP/1.0,
bad targets without a traceback, and bodies answered early dropped only up to a cap."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import pytest
from tests.http1.test_server import (
    FakeTransport,
    Scope,
    hello,
    request,
    responses,
    settle,
)

from inhouse.http1 import server as http_server
from inhouse.http1.listener import GatewayServer
from inhouse.http1.server import GatewayProtocol


def connect(
    app: Any, server: GatewayServer | None = None, **limits: Any
) -> tuple[GatewayProtocol, FakeTransport]:
    server = server or GatewayServer(app, **limits)
    server.loop = asyncio.get_running_loop()
    protocol = GatewayProtocol(server)
    transport = FakeTransport()
    transport.protocol = protocol
    protocol.connection_made(transport)  # type: ignore[arg-type]
    return protocol, transport


def test_an_endless_trailer_is_refused_once_its_bytes_pass_the_limit() -> None:
    async def main() -> None:
        protocol, transport = connect(hello)
        protocol.data_received(
            b"POST / HTTP/1.1\r\nhost: gw\r\ntransfer-encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n0\r\nx-trailer: "
        )
        piece = b"a" * 4096
        started = time.process_time()
        for _ in range(4 * http_server.MAX_HEAD_BYTES // len(piece)):
            if transport.closed:
                break
            protocol.data_received(piece)
        assert transport.closed
        assert time.process_time() - started < 0.5  # no quadratic re-copying
        assert responses(transport.data)[-1][0] == 431

    asyncio.run(main())


def test_many_trailers_count_against_the_limit_too() -> None:
    async def main() -> None:
        protocol, transport = connect(hello)
        protocol.data_received(
            b"POST / HTTP/1.1\r\nhost: gw\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n"
        )
        line = b"x-t: " + b"b" * 1000 + b"\r\n"
        for _ in range(2 * http_server.MAX_HEAD_BYTES // len(line)):
            if transport.closed:
                break
            protocol.data_received(line * 4)
        assert transport.closed
        assert responses(transport.data)[-1][0] == 431

    asyncio.run(main())


def test_a_head_split_over_two_reads_with_a_large_body_is_not_taken_for_a_large_head() -> None:
    """2 KB of head, the rest of it arriving with 100 KB of body in the next read: 200."""
    sizes: list[int] = []

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message["body"]
            if not message["more_body"]:
                break
        sizes.append(len(body))
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", b"2")]})  # fmt: skip
        await send({"type": "http.response.body", "body": b"ok"})

    async def main() -> None:
        protocol, transport = connect(app)
        raw = request("POST", "/", b"p" * 100_000, extra=b"x-pad: " + b"h" * 2000 + b"\r\n")
        protocol.data_received(raw[:1500])
        protocol.data_received(raw[1500:])
        await settle()
        assert [s for s, _, _ in responses(transport.data)] == [200]
        assert sizes == [100_000]

    asyncio.run(main())


def test_a_head_not_complete_in_time_gets_408_and_a_close() -> None:
    async def main() -> None:
        protocol, transport = connect(hello, header_timeout_s=0.2)
        protocol.data_received(b"GET / HTTP/1.1\r\nhost: gw\r\n")
        for _ in range(6):  # a byte now and then: keep-alive alone would never close it
            await asyncio.sleep(0.05)
            protocol.data_received(b"x")
        await asyncio.sleep(0.1)
        [(status, headers, body)] = responses(transport.data)
        assert status == 408 and headers["connection"] == "close"
        assert json.loads(body)["error"]["code"] == 408
        assert transport.closed

    asyncio.run(main())


def test_a_connection_that_sends_nothing_closes_after_the_header_timeout() -> None:
    async def main() -> None:
        _, transport = connect(hello, header_timeout_s=0.1)
        await asyncio.sleep(0.3)
        assert transport.closed and transport.data == b""

    asyncio.run(main())


def test_keep_alive_between_requests_is_not_cut_by_the_header_timeout() -> None:
    async def main() -> None:
        protocol, transport = connect(hello, header_timeout_s=0.1, keep_alive_s=5.0)
        protocol.data_received(request())
        await asyncio.sleep(0.3)  # idle between requests: keep-alive's, not the head's
        assert not transport.closed
        protocol.data_received(request())
        await settle()
        assert [s for s, _, _ in responses(transport.data)] == [200, 200]

    asyncio.run(main())


def test_connections_past_the_cap_get_503_and_a_close() -> None:
    async def main() -> None:
        server = GatewayServer(hello, max_connections=2)
        first, _ = connect(hello, server)
        _second, _ = connect(hello, server)
        _, third = connect(hello, server)
        [(status, headers, _)] = responses(third.data)
        assert status == 503 and headers["connection"] == "close" and third.closed
        assert len(server.connections) == 2
        first.connection_lost(None)
        _, fourth = connect(hello, server)
        assert not fourth.closed and fourth.data == b""

    asyncio.run(main())


def test_a_client_that_stops_reading_is_cut_off_after_the_send_timeout() -> None:
    events: list[str] = []

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x", "more_body": True})
        protocol.pause_writing()  # the client's buffer is full
        await send({"type": "http.response.body", "body": b"y", "more_body": True})
        events.append("send returned")  # once the client was cut off (a no-op send)

    async def main() -> None:
        nonlocal protocol
        protocol, transport = connect(app, send_timeout_s=0.1)
        aborted: list[bool] = []

        def abort() -> None:
            aborted.append(True)
            transport.closed = True
            protocol.connection_lost(None)

        transport.abort = abort  # type: ignore[method-assign]
        protocol.data_received(request())
        await asyncio.sleep(0.05)
        assert aborted == [] and events == []  # waiting for the client to read
        await asyncio.sleep(0.25)
        assert aborted == [True]
        assert events == ["send returned"]

    protocol: GatewayProtocol
    asyncio.run(main())


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", "exactly one Host"),
        (b"GET / HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n", "exactly one Host"),
        (b"GET / HTTP/1.0\r\nhost: a\r\nhost: b\r\n\r\n", "exactly one Host"),
        (
            b"POST / HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            "Transfer-Encoding",
        ),
        (b"CONNECT example.com:443 HTTP/1.1\r\nhost: example.com\r\n\r\n", "request target"),
        (b"GET http://[::1 HTTP/1.1\r\nhost: a\r\n\r\n", "request target"),
    ],
)
def test_requests_refused_with_a_400_and_no_traceback(
    raw: bytes, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    called: list[bool] = []

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        called.append(True)

    async def main() -> None:
        protocol, transport = connect(app)
        protocol.data_received(raw)
        await settle()
        [(status, headers, body)] = responses(transport.data)
        assert status == 400 and headers["connection"] == "close"
        assert message in json.loads(body)["error"]["message"]
        assert transport.closed and not called

    with caplog.at_level(logging.WARNING, logger="inhouse.http1"):
        asyncio.run(main())
    assert not [r for r in caplog.records if r.exc_info]


def test_http_1_0_without_host_is_served() -> None:
    async def main() -> None:
        protocol, transport = connect(hello)
        protocol.data_received(b"GET / HTTP/1.0\r\n\r\n")
        await settle()
        assert responses(transport.data)[0][0] == 200

    asyncio.run(main())


def test_a_body_answered_before_it_was_read_is_dropped_only_up_to_a_cap() -> None:
    async def refuse(scope: Scope, receive: Any, send: Any) -> None:  # a 401 before the body
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-length", b"2")]})  # fmt: skip
        await send({"type": "http.response.body", "body": b"no"})

    async def main() -> None:
        protocol, transport = connect(refuse)
        size = 16 * http_server.MAX_DROPPED_BYTES
        protocol.data_received(
            request("POST", "/", b"")[:-2].replace(b"length: 0", b"length: %d" % size) + b"\r\n"
        )
        piece = b"x" * 65536
        sent = 0
        while not transport.closed and sent < size:
            protocol.data_received(piece)
            sent += len(piece)
            await asyncio.sleep(0)
        assert transport.closed
        limit = http_server.MAX_DROPPED_BYTES + http_server.HIGH_WATER_BYTES + 2 * len(piece)
        assert sent <= limit
        assert [s for s, _, _ in responses(transport.data)] == [401]

    asyncio.run(main())
