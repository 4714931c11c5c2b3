"""The gateway's HTTP server (`http1.server`) on a real socket, as `inhouse gateway` runs it:
streams go out through the direct chunk path as the ASGI path streams them; a broken engine
still ends the stream with an error event; a client that leaves stops the engine's work; a full
client buffer pauses reading the engine until it drains; HTTP/1.1 itself (keep-alive,
pipelining, bodies, bad input, shutdown)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from tests.gateway.conftest import (
    KEY,
    chat,
    engines,
    gateway_for,
    one_tenant_stack,
    served,
    stack_data,
)
from tests.gateway.test_failures import wait_for
from tests.gateway.test_limits import REDIS_URL, needs_redis

from inhouse.gateway.send_writer import SendWriter
from inhouse.gateway.stream import _relay
from inhouse.http1 import server as http_server
from inhouse.http1.chunk_writer import ChunkWriter
from inhouse.http1.upstream import Response, UpstreamPool, _Connection


def events_of(text: str) -> list[str]:
    return [e for e in text.split("\n\n") if e]


def test_socket_stream_matches_the_asgi_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    body = chat(max_tokens=12, stream=True, ignore_eos=True)
    chunks: list[bytes] = []
    write = ChunkWriter.write_chunk

    def counted(self: ChunkWriter, data: bytes) -> bool:
        chunks.append(data)
        return write(self, data)

    monkeypatch.setattr(ChunkWriter, "write_chunk", counted)

    async def main() -> None:
        async with engines(1) as live:
            urls = [live[0].url]
            async with gateway_for(stack_data(replicas=1), {"chat": urls}) as (_, asgi):
                via_asgi = events_of((await asgi.post("/v1/chat/completions", json=body)).text)
            async with served(stack_data(replicas=1), urls) as (gateway, client):
                for _ in range(3):  # one keep-alive connection, several streams
                    r = await client.post("/v1/chat/completions", json=body)
                    assert r.status_code == 200
                    assert r.headers["content-type"].startswith("text/event-stream")
                    via_socket = events_of(r.text)
                    assert len(via_socket) == len(via_asgi)
                    assert via_socket[-1] == "data: [DONE]"
                    assert '"usage"' not in r.text
                    contents = [json.loads(e[6:])["choices"][0]["delta"] for e in via_socket[:-1]]
                    expected = [json.loads(e[6:])["choices"][0]["delta"] for e in via_asgi[:-1]]
                    assert contents == expected
                assert gateway.pools["chat"].replicas[0].num_inflight == 0
        assert len(chunks) >= 3  # the tokens went out through the direct path, whole events
        assert all(c.startswith(b"data: ") and c.endswith(b"\n\n") for c in chunks)

    asyncio.run(main())


def test_socket_stream_broken_mid_way_ends_with_an_error_event() -> None:
    async def main() -> None:
        async with (
            engines(1, time_scale=1.0) as live,
            served(stack_data(replicas=1), [live[0].url]) as (_, client),
        ):
            body = chat(max_tokens=300, stream=True, ignore_eos=True)
            request = asyncio.create_task(client.post("/v1/chat/completions", json=body))
            await wait_for(lambda: live[0].state.runner.num_in_flight > 0)
            await asyncio.sleep(0.3)
            await live[0].kill()
            r = await request
        assert r.status_code == 200
        events = events_of(r.text)
        assert events[-1] == "data: [DONE]"
        assert events[-2].startswith('data: {"error":')
        assert any('"content"' in e for e in events[:-2])

    asyncio.run(main())


def test_client_leaving_mid_stream_stops_the_engine_request() -> None:
    async def main() -> None:
        async with (
            engines(1, time_scale=1.0) as live,
            served(stack_data(replicas=1), [live[0].url]) as (gateway, client),
        ):
            body = chat(max_tokens=400, stream=True, ignore_eos=True)
            async with client.stream("POST", "/v1/chat/completions", json=body) as r:
                assert r.status_code == 200
                async for line in r.aiter_lines():
                    if '"content"' in line:
                        break  # leave after the first token
            replica = gateway.pools["chat"].replicas[0]
            await wait_for(lambda: replica.num_inflight == 0)
            await wait_for(lambda: live[0].state.runner.num_in_flight == 0)
            assert 'code="499"' in gateway.metrics.render().decode()

    asyncio.run(main())


class _FakeResponse:
    """An engine's response that sends `pieces`, lets the client's buffer drain (`drain`), and
    sends its end only once the gateway resumes reading it (as a paused connection would)."""

    def __init__(self, pieces: list[bytes], last: bytes, drain: Callable[[], None]) -> None:
        self.pieces = pieces
        self.last = last
        self.drain = drain
        self.calls: list[str] = []
        self.calls_before_drain: list[str] = []
        self.is_complete = False
        self.resumed = asyncio.Event()

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")
        self.resumed.set()

    async def relay(self, sink: Callable[[bytes], None]) -> bytes:
        for piece in self.pieces:
            sink(piece)
            await asyncio.sleep(0)
        self.calls_before_drain = list(self.calls)
        self.drain()
        # A bound for a relay that never resumes (the failure), not a race: resuming takes a
        # few turns of the loop, no timer.
        await asyncio.wait_for(self.resumed.wait(), 10)
        return self.last


class _FullWriter:
    """A client whose buffer is full after the first write, until `drained` is set."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.drained = asyncio.Event()

    def write_chunk(self, data: bytes) -> bool:
        self.written.append(data)
        return self.drained.is_set()

    async def wait_writable(self) -> None:
        await self.drained.wait()


def test_full_client_buffer_pauses_the_engine_until_it_drains() -> None:
    async def main() -> None:
        writer = _FullWriter()
        pieces = [b"data: 2\n\n", b"data: 3\n\n"]
        response = _FakeResponse(pieces, b"data: [DONE]\n\n", writer.drained.set)
        last = await _relay(lambda b: b, response, b"data: 1\n\n", writer)  # type: ignore[arg-type]
        assert writer.written == [b"data: 1\n\n", b"data: 2\n\n", b"data: 3\n\n"]
        assert response.calls_before_drain == ["pause"]  # once, and held while the buffer is full
        assert response.calls == ["pause", "resume"]  # resumed once it drained
        assert last == b"data: [DONE]\n\n"

    asyncio.run(main())


class _Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def close(self) -> None: ...


class _OpenWriter:
    """A client transport with room: records what the direct path writes."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write_chunk(self, data: bytes) -> bool:
        self.written.append(data)
        return True

    async def wait_writable(self) -> None: ...


@pytest.mark.parametrize("path", ["direct", "send"])
def test_body_that_ends_while_the_head_is_sent_is_relayed_whole(path: str) -> None:
    # The engine's first piece is read; while the gateway waits to send the response head
    # (a slow client), the engine sends the rest and ends. Nothing may be left behind.
    async def main() -> list[bytes]:
        conn = _Connection(UpstreamPool("127.0.0.1", 1))
        conn.connection_made(_Transport())  # type: ignore[arg-type]
        response = Response(conn._pool, conn)
        head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        conn.data_received(head + b"8\r\ndata: 1\n\r\n")
        first = await response.read()
        conn.data_received(b"8\r\ndata: 2\n\r\n8\r\ndata: 3\n\r\n0\r\n\r\n")  # during the head
        out: list[bytes] = []
        if path == "direct":
            writer = _OpenWriter()
            last = await _relay(lambda b: b, response, first, writer)  # type: ignore[arg-type]
            out = [*writer.written, last]
        else:

            async def send(message: dict) -> None:
                out.append(message["body"])

            adapter = SendWriter(send)  # type: ignore[arg-type]
            last = await _relay(lambda b: b, response, first, adapter)
            await adapter.send({"type": "http.response.body", "body": last, "more_body": False})
        return out

    assert b"".join(asyncio.run(main())) == b"data: 1\ndata: 2\ndata: 3\n"


def test_a_relay_failure_of_the_gateway_is_raised_in_the_task_not_blamed_on_the_engine() -> None:
    async def main() -> None:
        conn = _Connection(UpstreamPool("127.0.0.1", 1))
        conn.connection_made(_Transport())  # type: ignore[arg-type]
        response = Response(conn._pool, conn)
        conn.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")

        def sink(piece: bytes) -> None:
            raise RuntimeError("a bug in the gateway")

        relay = asyncio.ensure_future(response.relay(sink))
        await asyncio.sleep(0)
        conn.data_received(b"8\r\ndata: 1\n\r\n")  # would reach asyncio's protocol handler
        with pytest.raises(RuntimeError, match="a bug in the gateway"):
            await relay
        assert not conn.is_closed  # the engine connection was not failed for it

    asyncio.run(main())


# -- failures before the first token, on the direct path ----------------------------------

_ROLE_EVENT = (
    b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,'
    b'"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
)


@contextlib.asynccontextmanager
async def fake_engine(mode: str) -> AsyncIterator[str]:
    """An engine that is healthy but, asked to generate, answers 200 and closes before any
    token (`"head"`), after the chat role chunk (`"role"`), or answers 400 (`"bad_request"`)."""
    from tests.support.mock_server import take_request

    class Conn(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: asyncio.Transport = transport  # type: ignore[assignment]
            self.buffer = b""

        def reply(self, status: str, payload: bytes) -> None:
            self.transport.write(
                f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(payload)}\r\n\r\n".encode()
                + payload
            )

        def data_received(self, data: bytes) -> None:
            self.buffer += data
            while (request := take_request(self.buffer)) is not None:
                head, _, self.buffer = request
                method, path = head.lstrip("\r\n").split(" ", 2)[:2]
                if method == "GET" and path.startswith("/v1/models"):
                    card = {"id": "tiny", "object": "model", "max_model_len": 512}
                    self.reply("200 OK", json.dumps({"data": [card]}).encode())
                elif method == "GET":
                    self.reply("200 OK", b"{}")
                elif mode == "bad_request":
                    error = {"error": {"message": "no", "type": "BadRequestError", "code": 400}}
                    self.reply("400 Bad Request", json.dumps(error).encode())
                else:
                    self.transport.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                        b"transfer-encoding: chunked\r\n\r\n"
                    )
                    if mode == "role":
                        self.transport.write(b"%x\r\n%b\r\n" % (len(_ROLE_EVENT), _ROLE_EVENT))
                    self.transport.close()
                    return

    server = await asyncio.get_running_loop().create_server(Conn, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


@pytest.mark.parametrize("mode", ["head", "role"])
def test_a_stream_that_fails_before_its_first_token_is_retried_unseen(mode: str) -> None:
    data = stack_data(replicas=2, routing={"policy": "round_robin"},
                      gateway={"health": {"interval_s": 30}})  # fmt: skip
    body = chat(max_tokens=6, stream=True, ignore_eos=True)

    async def main() -> None:
        async with (
            fake_engine(mode) as broken,
            engines(1) as live,
            served(data, [broken, live[0].url]) as (gateway, client),
        ):
            for _ in range(2):  # round robin: one of the two starts on the broken engine
                r = await client.post("/v1/chat/completions", json=body)
                assert r.status_code == 200
                events = events_of(r.text)
                assert events[-1] == "data: [DONE]"
                assert not any('"error"' in e for e in events)
                roles = [e for e in events if '"role":"assistant"' in e]
                assert len(roles) == 1  # the broken engine's role chunk never reached the client
                assert sum('"content"' in e for e in events) >= 6
            text = gateway.metrics.render().decode()
            # Both requests went to the broken engine first (the retry moves the round robin
            # on); its two consecutive failures removed it, as failures before a byte do.
            assert 'inhouse_gateway_retries_total{pool="chat",replica="0"} 2.0' in text
            assert not gateway.pools["chat"].replicas[0].is_healthy
            assert gateway.pools["chat"].replicas[1].num_failures == 0
            assert all(r.num_inflight == 0 for r in gateway.pools["chat"].replicas)

    asyncio.run(main())


@pytest.mark.parametrize("mode", ["head", "role"])
def test_under_another_asgi_server_a_stream_that_fails_before_its_first_token_is_retried(
    mode: str,
) -> None:
    # The same relay as on the gateway's own server, through `SendWriter`: the held head is
    # taken back and the next replica streams the answer.
    data = stack_data(replicas=2, routing={"policy": "round_robin"},
                      gateway={"health": {"interval_s": 30}})  # fmt: skip
    body = chat(max_tokens=6, stream=True, ignore_eos=True)

    async def main() -> None:
        async with (
            fake_engine(mode) as broken,
            engines(1) as live,
            gateway_for(data, {"chat": [broken, live[0].url]}) as (gateway, client),
        ):
            for _ in range(2):
                r = await client.post("/v1/chat/completions", json=body)
                assert r.status_code == 200
                events = events_of(r.text)
                assert events[-1] == "data: [DONE]"
                assert not any('"error"' in e for e in events)
                assert len([e for e in events if '"role":"assistant"' in e]) == 1
                assert sum('"content"' in e for e in events) >= 6
            text = gateway.metrics.render().decode()
            assert 'inhouse_gateway_retries_total{pool="chat",replica="0"} 2.0' in text
            assert all(r.num_inflight == 0 for r in gateway.pools["chat"].replicas)

    asyncio.run(main())


@pytest.mark.parametrize("retries", [1, 2])
def test_a_stream_no_replica_can_start_gets_an_error_status_not_a_broken_200(retries: int) -> None:
    gateway_spec = {"health": {"interval_s": 30}, "proxy": {"retries": retries}}
    data = stack_data(replicas=2, gateway=gateway_spec)
    body = chat(max_tokens=6, stream=True)

    async def main() -> None:
        async with (
            fake_engine("head") as one,
            fake_engine("role") as two,
            served(data, [one, two]) as (_, client),
        ):
            r = await client.post("/v1/chat/completions", json=body)
            # Both replicas tried; with one more retry allowed, none is left to try: still the
            # replicas' failure (502), not a 503 as if none had been tried.
            assert r.status_code == 502
            error = r.json()["error"]
            assert error["code"] == 502 and "chat" in error["message"]
            assert "replica " in error["message"], error["message"]
            assert "retry-after" in r.headers
            # The connection (kept alive) serves the next request normally.
            models = await client.get("/v1/models")
            assert models.status_code == 200

    asyncio.run(main())


def test_a_retry_that_gets_a_client_error_answers_with_it() -> None:
    data = stack_data(replicas=2, routing={"policy": "round_robin"},
                      gateway={"health": {"interval_s": 30}})  # fmt: skip
    body = chat(max_tokens=6, stream=True)

    async def main() -> None:
        async with (
            fake_engine("head") as broken,
            fake_engine("bad_request") as refusing,
            served(data, [broken, refusing]) as (_, client),
        ):
            statuses = set()
            for _ in range(2):
                r = await client.post("/v1/chat/completions", json=body)
                statuses.add(r.status_code)
                assert r.json()["error"]["type"] == "BadRequestError"
            assert statuses == {400}

    asyncio.run(main())


def test_without_a_way_to_take_the_head_back_the_stream_ends_with_an_error_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(http_server.GatewayProtocol, "_unstart", lambda self: False)
    data = stack_data(replicas=1, gateway={"health": {"interval_s": 30}})

    async def main() -> None:
        async with fake_engine("head") as broken, served(data, [broken]) as (_, client):
            r = await client.post("/v1/chat/completions", json=chat(max_tokens=6, stream=True))
        assert r.status_code == 200
        events = events_of(r.text)
        assert events[-1] == "data: [DONE]"
        assert events[-2].startswith('data: {"error":')

    asyncio.run(main())


# -- requests on a raw connection: eager start, bodies, pipelining, keep-alive ---------------


def _raw_post(path: str, body: bytes, extra: bytes = b"") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {KEY}\r\ncontent-length: {len(body)}\r\n".encode()
        + extra
        + b"\r\n"
        + body
    )


async def _raw_connection(
    client: httpx.AsyncClient,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A plain socket to the server `client` talks to (for what httpx will not send)."""
    port = int(str(client.base_url).rsplit(":", 1)[1].rstrip("/"))
    return await asyncio.open_connection("127.0.0.1", port)


async def _read_responses(
    reader: asyncio.StreamReader, count: int
) -> list[tuple[int, dict[str, str], bytes]]:
    """`count` whole HTTP/1.1 responses with a content-length (no chunked bodies here)."""
    out = []
    while len(out) < count:
        line = await asyncio.wait_for(reader.readline(), 30)
        if line.startswith(b"HTTP/1.1 100"):
            await reader.readline()
            continue
        status = int(line.split()[1])
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers["content-length"]))
        out.append((status, headers, body))
    return out


def test_a_generation_request_reaches_the_engine_from_the_callback_that_read_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No turn of the loop between reading a request and writing it to the engine: the write
    happens inside the client connection's `data_received`."""
    inside: list[bool] = []
    reading = [False]
    received = http_server.GatewayProtocol.data_received

    def data_received(self: http_server.GatewayProtocol, data: bytes) -> None:
        reading[0] = True
        try:
            received(self, data)
        finally:
            reading[0] = False

    request = UpstreamPool.request

    def traced(self: UpstreamPool, *args: object, **kwargs: object) -> object:
        inside.append(reading[0])
        return request(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(http_server.GatewayProtocol, "data_received", data_received)
    monkeypatch.setattr(UpstreamPool, "request", traced)
    data = stack_data(replicas=1)

    async def main() -> None:
        async with engines(1) as live, served(data, [live[0].url]) as (_, client):
            for stream in (False, True):
                r = await client.post("/v1/chat/completions", json=chat(stream=stream))
                assert r.status_code == 200
            r = await client.post("/v1/completions", json={"model": "tiny", "prompt": "hi"})
            assert r.status_code == 200

    asyncio.run(main())
    assert inside == [True, True, True]


def test_requests_the_eager_start_does_not_wait_for_are_answered() -> None:
    """A body past the server's high-water mark (started as it arrives), `Expect:
    100-continue` (the client waits for the 100 before its body), and two requests pipelined
    in one write."""
    data = stack_data(replicas=1)
    small = json.dumps(chat("hello", max_tokens=4)).encode()

    async def main() -> None:
        async with engines(1) as live, served(data, [live[0].url]) as (_, client):
            reader, writer = await _raw_connection(client)
            try:
                # 1. 200 KB of body: counted, refused by the long-prompt gate, never hung.
                big = json.dumps(chat("word " * 40_000, max_tokens=4)).encode()
                writer.write(_raw_post("/v1/chat/completions", big))
                [(status, _, body)] = await _read_responses(reader, 1)
                assert status == 400 and json.loads(body)["error"]["param"] == "input_tokens"
                # 2. Expect: 100-continue: the head alone first, the body after the 100.
                raw = _raw_post("/v1/chat/completions", small, b"expect: 100-continue\r\n")
                head, _, body_part = raw.partition(b"\r\n\r\n")
                writer.write(head + b"\r\n\r\n")
                assert (await asyncio.wait_for(reader.readline(), 30)).startswith(b"HTTP/1.1 100")
                await reader.readline()
                writer.write(body_part)
                [(status, _, body)] = await _read_responses(reader, 1)
                assert status == 200 and json.loads(body)["choices"]
                # 3. Two requests in one write, answered in order.
                writer.write(_raw_post("/v1/chat/completions", small) * 2)
                answers = await _read_responses(reader, 2)
                assert [status for status, _, _ in answers] == [200, 200]
                ids = [h["x-request-id"] for _, h, _ in answers]
                assert len(set(ids)) == 2
            finally:
                writer.close()

    asyncio.run(main())


@needs_redis
def test_limits_shared_in_redis_work_from_the_eager_start() -> None:
    """redis-py's client needs a current task (`asyncio.timeout`): the eager part runs as the
    request's task, so reserving in Redis from it works, and the limit holds."""
    from inhouse.gateway.redis_limits import RedisLimits

    key, tenant, data = one_tenant_stack({"rpm": 2})
    auth = {"authorization": f"Bearer {key}"}

    async def main() -> None:
        limits = RedisLimits(REDIS_URL)
        await limits.reset(tenant)
        try:
            async with engines(1) as live, served(data, [live[0].url], limits) as (_, client):
                codes = []
                for _ in range(3):
                    body = chat(max_tokens=4, stream=True)
                    r = await client.post("/v1/chat/completions", json=body, headers=auth)
                    codes.append(r.status_code)
                assert codes == [200, 200, 429]
        finally:
            await limits.reset(tenant)
            await limits.close()

    asyncio.run(main())


def test_a_request_pipelined_behind_an_answer_given_at_once_is_not_cut_by_keep_alive() -> None:
    """A 401 is answered inside the read that brought it, and the connection goes idle for a
    moment; the stream pipelined behind it in the same read must outlive the keep-alive
    timer that moment armed."""
    data = stack_data(replicas=1)
    body = json.dumps(chat("tell me", max_tokens=60, ignore_eos=True, stream=True)).encode()
    refused = _raw_post("/v1/chat/completions", body).replace(KEY.encode(), b"wrong-key")

    async def main() -> bytes:
        async with (
            engines(1, time_scale=1.0) as live,
            served(data, [live[0].url], keep_alive_s=0.3) as (_, client),
        ):
            reader, writer = await _raw_connection(client)
            started = time.perf_counter()
            writer.write(refused + _raw_post("/v1/chat/completions", body))
            received = b""
            while b"data: [DONE]" not in received:
                chunk = await asyncio.wait_for(reader.read(65536), 30)
                if not chunk:
                    break  # closed: cut off
                received += chunk
            assert time.perf_counter() - started > 0.3, "too fast to test the timer"
            writer.close()
            return received

    received = asyncio.run(main())
    assert received.startswith(b"HTTP/1.1 401")
    assert b"HTTP/1.1 200" in received and b"data: [DONE]" in received


def test_nothing_pipelined_behind_a_closing_answer_reaches_an_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The 500 for a handler that failed closes the connection; when it went out inside the
    read, a request pipelined behind it is dropped, not served."""
    from inhouse.gateway.proxy import GenerationRoute

    handle = GenerationRoute.__call__
    calls = [0]

    async def failing_once(
        self: GenerationRoute, scope: dict, receive: object, send: object
    ) -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("a bug in the handler")
        await handle(self, scope, receive, send)  # type: ignore[arg-type]

    sent: list[int] = []
    request = UpstreamPool.request

    def counted(self: UpstreamPool, *args: object, **kwargs: object) -> object:
        sent.append(1)
        return request(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(GenerationRoute, "__call__", failing_once)
    monkeypatch.setattr(UpstreamPool, "request", counted)
    data = stack_data(replicas=1)
    body = json.dumps(chat("hello", max_tokens=4)).encode()

    async def main() -> bytes:
        async with engines(1) as live, served(data, [live[0].url]) as (_, client):
            reader, writer = await _raw_connection(client)
            writer.write(_raw_post("/v1/chat/completions", body) * 2)
            received = await asyncio.wait_for(reader.read(), 30)  # until the server closes
            writer.close()
            await asyncio.sleep(0.2)
            return received

    received = asyncio.run(main())
    assert received.startswith(b"HTTP/1.1 500")
    assert received.count(b"HTTP/1.1") == 1
    assert sent == [] and calls[0] == 1
