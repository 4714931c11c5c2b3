"""`server.GatewayProtocol` on a fake transport, with small ASGI apps: what goes out in
which write, when a request starts, pipelining, backpressure, failures and keep-alive, each
exactly (the socket-level tests with the real gateway are in tests/gateway/test_http_server.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inhouse.http1 import server as http_server
from inhouse.http1.chunk_writer import EXTENSION
from inhouse.http1.listener import GatewayServer
from inhouse.http1.server import GatewayProtocol

Scope = dict[str, Any]
App = Callable[[Scope, Any, Any], Awaitable[None]]


class FakeTransport:
    """Records writes; `close` tells the protocol the connection is gone, as asyncio does
    once the buffer is sent."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.reading = True
        self.protocol: GatewayProtocol | None = None

    def write(self, data: bytes) -> None:
        assert not self.closed, "write after close"
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed and self.protocol is not None:
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("10.0.0.9", 5555)}.get(name, default)

    @property
    def data(self) -> bytes:
        return b"".join(self.writes)


def connect(app: App, keep_alive_s: float = 75.0) -> tuple[GatewayProtocol, FakeTransport]:
    server = GatewayServer(app, keep_alive_s)
    server.loop = asyncio.get_running_loop()
    protocol = GatewayProtocol(server)
    transport = FakeTransport()
    transport.protocol = protocol
    protocol.connection_made(transport)  # type: ignore[arg-type]
    return protocol, transport


def request(method: str = "GET", path: str = "/x", body: bytes = b"", extra: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nhost: gw\r\n".encode() + extra
    if body or method == "POST":
        head += b"content-length: %d\r\n" % len(body)
    return head + b"\r\n" + body


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def responses(data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Split what was written into responses (content-length or chunked bodies)."""
    out = []
    while data:
        head, _, data = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        if "content-length" in headers:
            n = int(headers["content-length"])
            body, data = data[:n], data[n:]
        elif headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size_line, _, data = data.partition(b"\r\n")
                size = int(size_line, 16)
                body += data[:size]
                data = data[size + 2 :]
                if size == 0:
                    break
        else:
            body, data = data, b""
        out.append((status, headers, body))
    return out


async def hello(scope: Scope, receive: Any, send: Any) -> None:
    message = await receive()
    body = b"hello " + message["body"]
    headers = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def test_head_and_body_go_out_in_one_write_and_the_connection_stays_open() -> None:
    async def main() -> None:
        protocol, transport = connect(hello)
        protocol.data_received(request("POST", "/x", b"you"))
        await settle()
        assert len(transport.writes) == 1
        [(status, headers, body)] = responses(transport.data)
        assert (status, body) == (200, b"hello you")
        assert "date" in headers and "connection" not in headers
        assert not transport.closed

    asyncio.run(main())


def gated(release: asyncio.Event) -> App:
    """`hello`, once `release` is set."""

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        await release.wait()
        await hello(scope, receive, send)

    return app


def recording(seen: list[Scope]) -> App:
    """`hello`, noting each request's scope in `seen`."""

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        seen.append(scope)
        await hello(scope, receive, send)

    return app


def test_the_scope_is_what_an_asgi_app_expects() -> None:
    seen: list[Scope] = []

    async def main() -> None:
        protocol, _ = connect(recording(seen))
        protocol.data_received(request("GET", "/v1/a%20b?x=1&y=2", extra=b"X-Thing: v\r\n"))
        await settle()

    asyncio.run(main())
    [scope] = seen
    assert scope["path"] == "/v1/a b" and scope["raw_path"] == b"/v1/a%20b"
    assert scope["query_string"] == b"x=1&y=2"
    assert scope["method"] == "GET" and scope["http_version"] == "1.1"
    assert (b"x-thing", b"v") in scope["headers"]  # names lower-cased
    assert scope["client"] == ("10.0.0.9", 5555) and scope["server"] == ("127.0.0.1", 8000)
    assert scope["scheme"] == "http" and EXTENSION in scope["extensions"]


def test_a_request_starts_only_when_its_body_is_complete() -> None:
    started: list[bytes] = []

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        message = await receive()
        started.append(message["body"])
        await hello(scope, _replay(message), send)

    async def main() -> None:
        protocol, transport = connect(app)
        raw = request("POST", "/x", b"0123456789")
        protocol.data_received(raw[:-4])
        await settle()
        assert started == []  # the handler has not run: nothing to wait on in it
        seen: list[list[bytes]] = []

        def read_the_rest() -> None:  # as the loop calls a protocol, outside any task
            protocol.data_received(raw[-4:])
            seen.append(list(started))

        asyncio.get_running_loop().call_soon(read_the_rest)
        await settle()
        assert seen == [[b"0123456789"]]  # eagerly, inside the read that completed it
        assert responses(transport.data)[0][2] == b"hello 0123456789"

    asyncio.run(main())


def test_a_large_body_starts_its_handler_at_once_and_pauses_reading_until_read() -> None:
    parts: list[int] = []
    gate = asyncio.Event()

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        await gate.wait()
        while True:
            message = await receive()
            parts.append(len(message["body"]))
            if not message["more_body"]:
                break
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def main() -> None:
        protocol, transport = connect(app)
        size = 3 * http_server.HIGH_WATER_BYTES
        raw = request("POST", "/x", b"x" * size)
        head_len = len(raw) - size
        protocol.data_received(raw[: head_len + http_server.HIGH_WATER_BYTES + 1])
        assert not transport.reading  # past the mark, nothing read by the handler yet
        gate.set()
        await settle()
        assert transport.reading  # the handler took it
        protocol.data_received(raw[head_len + http_server.HIGH_WATER_BYTES + 1 :])
        await settle()
        assert sum(parts) == size
        assert responses(transport.data)[0][0] == 204

    asyncio.run(main())


def test_expect_100_continue_is_answered_at_the_first_read_of_the_body() -> None:
    async def main() -> None:
        protocol, transport = connect(hello)
        raw = request("POST", "/x", b"abc", extra=b"expect: 100-continue\r\n")
        head, _, body = raw.partition(b"\r\n\r\n")
        protocol.data_received(head + b"\r\n\r\n")
        await settle()
        assert transport.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
        protocol.data_received(body)
        await settle()
        assert responses(transport.data[25:])[0][2] == b"hello abc"

    asyncio.run(main())


def test_pipelined_requests_are_answered_in_order_one_at_a_time() -> None:
    order: list[str] = []
    release = asyncio.Event()

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        order.append(f"start {scope['path']}")
        if scope["path"] == "/slow":
            await release.wait()
        order.append(f"end {scope['path']}")
        await hello(scope, receive, send)

    async def main() -> None:
        protocol, transport = connect(app)
        protocol.data_received(request("GET", "/slow") + request("GET", "/fast"))
        await settle()
        assert order == ["start /slow"]  # the second waits for the first's response
        assert not transport.reading  # and nothing more is read meanwhile
        release.set()
        await settle()
        assert order == ["start /slow", "end /slow", "start /fast", "end /fast"]
        assert [s for s, _, _ in responses(transport.data)] == [200, 200]
        assert transport.reading and not transport.closed

    asyncio.run(main())


def test_chunked_streams_and_their_end_in_the_same_write_as_the_last_chunk() -> None:
    async def app(scope: Scope, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        await send({"type": "http.response.body", "body": b"bc", "more_body": False})

    async def main() -> None:
        protocol, transport = connect(app)
        protocol.data_received(request())
        await settle()
        assert len(transport.writes) == 2  # head with the first chunk, the last with the end
        assert transport.writes[1] == b"2\r\nbc\r\n0\r\n\r\n"
        [(status, headers, body)] = responses(transport.data)
        assert (status, headers["transfer-encoding"], body) == (200, "chunked", b"abc")

    asyncio.run(main())


def test_http_1_0_gets_a_close_delimited_body_and_a_close() -> None:
    async def app(scope: Scope, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"old", "more_body": False})

    async def main() -> None:
        protocol, transport = connect(app)
        protocol.data_received(b"GET / HTTP/1.0\r\n\r\n")
        await settle()
        head, _, body = transport.data.partition(b"\r\n\r\n")
        assert b"transfer-encoding" not in head and b"connection: close" in head
        assert body == b"old" and transport.closed

    asyncio.run(main())


def test_connection_close_from_the_client_closes_after_the_response() -> None:
    async def main() -> None:
        protocol, transport = connect(hello)
        protocol.data_received(request("GET", "/", extra=b"connection: close\r\n"))
        await settle()
        assert b"connection: close\r\n" in transport.data and transport.closed

    asyncio.run(main())


def test_head_requests_get_no_body() -> None:
    async def main() -> None:
        protocol, transport = connect(hello)
        protocol.data_received(request("HEAD", "/"))
        await settle()
        assert transport.data.endswith(b"\r\n\r\n") and b"hello" not in transport.data
        assert not transport.closed

    asyncio.run(main())


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"NOT HTTP AT ALL\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nx-big: " + b"a" * (http_server.MAX_HEAD_BYTES + 1) + b"\r\n\r\n", 431),
    ],
)
def test_unreadable_requests_get_an_error_in_openai_shape_and_a_close(
    raw: bytes, status: int
) -> None:
    called: list[bool] = []

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        called.append(True)

    async def main() -> None:
        protocol, transport = connect(app)
        protocol.data_received(raw)
        await settle()
        [(got, headers, body)] = responses(transport.data)
        assert got == status and headers["connection"] == "close"
        assert json.loads(body)["error"]["code"] == status
        assert transport.closed and not called

    asyncio.run(main())


def test_an_upgrade_request_is_answered_as_http_1_1_then_closed() -> None:
    async def main() -> None:
        protocol, transport = connect(hello)
        protocol.data_received(
            request("GET", "/", extra=b"connection: upgrade\r\nupgrade: h2c\r\n") + request()
        )
        await settle()
        assert [s for s, _, _ in responses(transport.data)] == [200]
        assert transport.closed

    asyncio.run(main())


def test_a_handler_failing_before_its_response_gets_a_500_and_a_close() -> None:
    async def app(scope: Scope, receive: Any, send: Any) -> None:
        raise RuntimeError("a bug")

    async def main() -> None:
        protocol, transport = connect(app)
        protocol.data_received(request())
        await settle()
        [(status, headers, body)] = responses(transport.data)
        assert status == 500 and headers["connection"] == "close"
        assert json.loads(body)["error"]["type"] == "InternalServerError"
        assert transport.closed

    asyncio.run(main())


def test_a_handler_failing_with_its_head_still_held_gets_a_500_instead() -> None:
    async def app(scope: Scope, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise RuntimeError("a bug before the first byte")

    async def main() -> None:
        protocol, transport = connect(app)
        protocol.data_received(request())
        await settle()
        assert [s for s, _, _ in responses(transport.data)] == [500]  # the 200 never went out

    asyncio.run(main())


def test_a_handler_failing_mid_response_has_its_connection_cut() -> None:
    async def app(scope: Scope, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        raise RuntimeError("a bug mid-stream")

    async def main() -> None:
        protocol, transport = connect(app)
        protocol.data_received(request())
        await settle()
        assert transport.data.endswith(b"4\r\npart\r\n")  # no end chunk: the client sees it cut
        assert transport.closed

    asyncio.run(main())


def test_a_handler_returning_without_a_response_closes_the_connection() -> None:
    async def app(scope: Scope, receive: Any, send: Any) -> None:
        await receive()

    async def main() -> None:
        protocol, transport = connect(app)
        protocol.data_received(request())
        await settle()
        assert transport.closed and transport.writes == []

    asyncio.run(main())


@pytest.mark.parametrize(
    ("headers", "body"),
    [
        ([(b"x-evil", b"a\r\nset-cookie: b")], b""),  # a header that would split the response
        ([(b"content-length", b"10")], b"short"),
        ([(b"content-length", b"2")], b"too long"),
    ],
)
def test_a_malformed_response_is_refused(headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    async def app(scope: Scope, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def main() -> None:
        protocol, transport = connect(app)
        protocol.data_received(request())
        await settle()
        assert b"set-cookie" not in transport.data
        assert transport.closed

    asyncio.run(main())


def test_a_client_that_leaves_is_told_through_receive_and_the_writer() -> None:
    events: list[str] = []

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        scope["extensions"][EXTENSION].watch(lambda: events.append("writer"))
        await receive()  # the body
        events.append((await receive())["type"])

    async def main() -> None:
        protocol, _ = connect(app)
        protocol.data_received(request())
        await settle()
        protocol.connection_lost(None)
        await settle()

    asyncio.run(main())
    assert events == ["writer", "http.disconnect"]


def test_an_idle_connection_closes_after_keep_alive_and_a_busy_one_does_not() -> None:
    release = asyncio.Event()

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        if scope["path"] == "/slow":
            await release.wait()
        await hello(scope, receive, send)

    async def main() -> None:
        protocol, transport = connect(app, keep_alive_s=0.05)
        protocol.data_received(request("GET", "/fast") + request("GET", "/slow"))
        await asyncio.sleep(0.15)  # the idle moment between the two armed the timer
        assert not transport.closed  # busy with /slow
        release.set()
        await settle()
        assert not transport.closed
        await asyncio.sleep(0.15)
        assert transport.closed  # idle past keep-alive

    asyncio.run(main())


def test_shutdown_closes_idle_connections_now_and_busy_ones_after_their_response() -> None:
    release = asyncio.Event()
    app = gated(release)

    async def main() -> None:
        idle, idle_transport = connect(app)
        busy, busy_transport = connect(app)
        idle.server.connections.discard(idle)
        busy.server = idle.server  # one server, two connections
        idle.server.connections.update((idle, busy))
        busy.data_received(request())
        await settle()
        shutdown = asyncio.ensure_future(idle.server.shutdown(5.0))
        await settle()
        assert idle_transport.closed and not busy_transport.closed
        release.set()
        await shutdown
        assert busy_transport.closed
        assert [s for s, _, _ in responses(busy_transport.data)] == [200]
        assert b"connection: close" in busy_transport.data

    asyncio.run(main())


def test_a_request_answered_before_its_body_is_read_does_not_stall_the_connection() -> None:
    async def refuse(scope: Scope, receive: Any, send: Any) -> None:  # a 401 before the body
        if scope["path"] == "/next":
            await hello(scope, receive, send)
            return
        headers = [(b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": b"no"})

    async def main() -> None:
        protocol, transport = connect(refuse)
        size = 4 * http_server.HIGH_WATER_BYTES
        raw = request("POST", "/big", b"x" * size)
        protocol.data_received(raw[: len(raw) - size + http_server.HIGH_WATER_BYTES + 1])
        await settle()
        assert [s for s, _, _ in responses(transport.data)] == [401]
        assert transport.reading  # the rest of the body is read (and dropped)
        protocol.data_received(raw[len(raw) - size + http_server.HIGH_WATER_BYTES + 1 :])
        protocol.data_received(request("GET", "/next"))
        await settle()
        assert [s for s, _, _ in responses(transport.data)] == [401, 200]
        assert not transport.closed

    asyncio.run(main())


def test_a_head_that_never_ends_is_refused_once_its_reads_pass_the_limit() -> None:
    async def main() -> None:
        protocol, transport = connect(hello)
        protocol.data_received(b"GET / HTTP/1.1\r\nx-endless: ")
        piece = b"a" * 4096
        for _ in range(http_server.MAX_HEAD_BYTES // len(piece) + 1):
            protocol.data_received(piece)
        [(status, _, _)] = responses(transport.data)
        assert status == 431 and transport.closed

    asyncio.run(main())


def test_a_handler_failing_after_its_response_leaves_the_next_request_alone() -> None:
    finished = asyncio.Event()

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        if scope["path"] == "/first":
            await hello(scope, receive, send)
            await finished.wait()  # settling after the response, say
            raise RuntimeError("the store failed after the response")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await finished.wait()
        await send({"type": "http.response.body", "body": b"second", "more_body": False})

    async def main() -> None:
        protocol, transport = connect(app)
        protocol.data_received(request("GET", "/first") + request("GET", "/second"))
        await settle()  # /second's head is held now
        finished.set()
        await settle()
        assert [(s, b) for s, _, b in responses(transport.data)] == [
            (200, b"hello "),
            (200, b"second"),
        ]
        assert not transport.closed

    asyncio.run(main())


def test_a_request_that_stops_half_way_is_closed_after_keep_alive() -> None:
    async def main() -> None:
        protocol, transport = connect(hello, keep_alive_s=0.05)
        protocol.data_received(b"GET / HTTP/1.1\r\nhost: gw\r\n")  # and nothing more
        await asyncio.sleep(0.2)
        assert transport.closed and transport.writes == []

    asyncio.run(main())


def test_garbage_after_a_good_request_closes_after_its_answer_not_before() -> None:
    release = asyncio.Event()
    app = gated(release)

    async def main() -> None:
        protocol, transport = connect(app)
        protocol.data_received(request("GET", "/good") + b"NOT HTTP\r\n\r\n")
        await settle()
        assert transport.writes == [] and not transport.closed
        release.set()
        await settle()
        [(status, headers, _)] = responses(transport.data)
        assert status == 200 and headers["connection"] == "close" and transport.closed

    asyncio.run(main())


def test_trailers_of_a_chunked_body_are_not_request_headers() -> None:
    seen: list[Scope] = []

    async def main() -> None:
        protocol, transport = connect(recording(seen))
        protocol.data_received(
            b"POST / HTTP/1.1\r\nhost: gw\r\ntransfer-encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n0\r\nauthorization: Bearer smuggled\r\n\r\n"
        )
        await settle()
        assert responses(transport.data)[0][2] == b"hello hello"

    asyncio.run(main())
    assert all(name != b"authorization" for name, _ in seen[0]["headers"])


def test_the_server_alone_writes_the_connection_header() -> None:
    async def app(scope: Scope, receive: Any, send: Any) -> None:
        headers = [(b"connection", b"keep-alive"), (b"content-length", b"0")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

    async def main() -> tuple[bytes, bytes]:
        protocol, transport = connect(app)
        protocol.data_received(request("GET", "/", extra=b"connection: close\r\n"))
        old, old_transport = connect(app)
        old.data_received(b"GET / HTTP/1.0\r\nconnection: keep-alive\r\n\r\n")
        await settle()
        return transport.data, old_transport.data

    closing, kept = asyncio.run(main())
    assert closing.count(b"connection:") == 1 and b"connection: close" in closing
    assert kept.count(b"connection:") == 1 and b"connection: keep-alive" in kept


def test_shutdown_waits_for_closed_connections_to_send_what_they_hold() -> None:
    lost: list[str] = []

    class SlowToClose(FakeTransport):
        """close() hands the buffer to a slow client: the connection is lost 0.2 s later."""

        def close(self) -> None:
            if not self.closed:
                self.closed = True
                asyncio.get_running_loop().call_later(0.2, self._lost)

        def _lost(self) -> None:
            lost.append("flushed")
            assert self.protocol is not None
            self.protocol.connection_lost(None)

        def abort(self) -> None:
            lost.append("aborted")
            self.closed = True

    async def main() -> None:
        server = GatewayServer(hello)
        server.loop = asyncio.get_running_loop()
        protocol = GatewayProtocol(server)
        transport = SlowToClose()
        transport.protocol = protocol
        protocol.connection_made(transport)  # type: ignore[arg-type]
        protocol.data_received(request("GET", "/", extra=b"connection: close\r\n"))
        await settle()
        await server.shutdown(5.0)
        assert not server.connections

    asyncio.run(main())
    assert lost == ["flushed"]


_REQUEST_PARTS = st.sampled_from(
    [
        b"GET / HTTP/1.1\r\n",
        b"POST /v1/completions HTTP/1.1\r\n",
        b"GET http://h HTTP/1.1\r\n",
        b"HEAD /x HTTP/1.0\r\n",
        b"host: gw\r\n",
        b"content-length: 3\r\n",
        b"content-length: 99999999999999999999\r\n",
        b"transfer-encoding: chunked\r\n",
        b"expect: 100-continue\r\n",
        b"connection: close\r\n",
        b"upgrade: h2c\r\nconnection: upgrade\r\n",
        b"\r\n",
        b"abc",
        b"3\r\nabc\r\n0\r\n\r\n",
        b"\n",
        b" ",
        b"\x00\xff",
    ]
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parts=st.lists(_REQUEST_PARTS | st.binary(max_size=24), max_size=14),
    cuts=st.lists(st.integers(1, 40), max_size=6),
)
def test_fuzzed_bytes_never_crash_the_connection_or_get_a_5xx(
    parts: list[bytes], cuts: list[int]
) -> None:
    """Whatever bytes come, in whatever reads: nothing escapes `data_received`, every answer
    is a whole HTTP/1.1 response with a 1xx, 2xx or 4xx status (the app answers 200 to what
    it gets), and nothing is written after the connection closed (FakeTransport asserts it)."""
    data = b"".join(parts)

    async def main() -> None:
        protocol, transport = connect(hello, keep_alive_s=0.01)
        rest = data
        for cut in cuts:
            protocol.data_received(rest[:cut])
            rest = rest[cut:]
        protocol.data_received(rest)
        await settle()
        await asyncio.sleep(0.015)  # past keep-alive: a half request is closed
        for line in transport.data.split(b"\r\n"):
            if line.startswith(b"HTTP/1.1 "):
                assert line[9:10] in (b"1", b"2", b"4"), line
        protocol.connection_lost(None)
        await settle()

    asyncio.run(main())


def _replay(message: dict[str, Any]) -> Callable[[], Awaitable[dict[str, Any]]]:
    async def receive() -> dict[str, Any]:
        return message

    return receive
