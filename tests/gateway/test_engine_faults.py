"""Engines that misbehave while serving, from raw sockets.

An engine that answers the head and then falls silent (a hung GPU worker, a wedged process that
keeps its socket open): the gateway gives up after `proxy.first_byte_timeout_s` without a byte,
as Envoy's stream idle timeout does, instead of holding the client, the replica slot and the
tenant's concurrency lease until the client gives up; a stream that sent tokens ends with an
error event, one that sent none goes to another replica. An engine (or whatever answers at its
address) that answers 200 with a body that is not JSON is a 502, not a success."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

import pytest
from tests.gateway.conftest import (
    chat,
    engines,
    first_generation_request,
    gateway_for,
    one_tenant_stack,
)

from inhouse.gateway.limits import MemoryLimits

SILENCE_S = 0.5
ROLE = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
TOKEN = {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}


def event(payload: dict[str, object]) -> bytes:
    data = b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"  # vLLM's
    return b"%x\r\n%s\r\n" % (len(data), data)


def whole_answer(status: bytes, content_type: bytes, body: bytes) -> bytes:
    """An engine's whole HTTP/1.1 answer: status line, content type, length and body."""
    head = b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n"
    return head % (status, content_type, len(body)) + body


@contextlib.asynccontextmanager
async def silent_engine(sends: bytes) -> AsyncIterator[str]:
    """An engine whose /health and /metrics answer, and whose generation routes send `sends`
    (a head, maybe some body) and then nothing, holding the connection open."""
    held: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await first_generation_request(reader, writer)
            writer.write(sends)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()
        for writer in held:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        await server.wait_closed()


def tenant_stack(replicas: int = 1) -> tuple[str, str, dict[str, object]]:
    key, name, data = one_tenant_stack({"max_concurrency": 4})
    pool = data["pools"][0]
    pool["replicas"] = replicas
    pool["routing"] = {"policy": "round_robin"}
    data["gateway"]["proxy"] = {"first_byte_timeout_s": SILENCE_S, "retries": 1}
    data["gateway"]["health"] = {"interval_s": 30}
    return key, name, data


def test_a_body_that_never_comes_is_an_error_and_frees_the_slot_and_the_lease() -> None:
    key, name, data = tenant_stack()
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n"

    async def main() -> None:
        store = MemoryLimits()
        async with (
            silent_engine(head) as url,
            gateway_for(data, {"chat": [url]}, None, store) as (gw, client),
        ):
            started = time.monotonic()
            r = await asyncio.wait_for(
                client.post("/v1/chat/completions", json=chat(max_tokens=5),
                            headers={"authorization": f"Bearer {key}"}),
                10 * SILENCE_S,
            )  # fmt: skip
            assert r.status_code in (502, 503), r.text
            assert "error" in r.json()
            assert time.monotonic() - started < 6 * SILENCE_S
            assert gw.pools["chat"].replicas[0].num_inflight == 0
            assert store._tenants[name].leases == {}

    asyncio.run(main())


def test_a_stream_that_falls_silent_after_tokens_ends_with_an_error_event() -> None:
    key, name, data = tenant_stack()
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n" + event(ROLE) + event(TOKEN)
    )

    async def main() -> None:
        store = MemoryLimits()
        async with (
            silent_engine(head) as url,
            gateway_for(data, {"chat": [url]}, None, store) as (gw, client),
        ):
            started = time.monotonic()
            r = await asyncio.wait_for(
                client.post("/v1/chat/completions", json=chat(max_tokens=5, stream=True),
                            headers={"authorization": f"Bearer {key}"}),
                10 * SILENCE_S,
            )  # fmt: skip
            assert r.status_code == 200
            events = [e for e in r.text.split("\n\n") if e]
            assert '"Hi"' in events[0] + events[1]
            assert events[-2].startswith('data: {"error":'), events
            assert events[-1] == "data: [DONE]"
            assert time.monotonic() - started < 6 * SILENCE_S
            assert gw.pools["chat"].replicas[0].num_inflight == 0
            assert store._tenants[name].leases == {}

    asyncio.run(main())


def test_a_stream_silent_before_its_first_token_goes_to_another_replica() -> None:
    key, name, data = tenant_stack(replicas=2)
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n" + event(ROLE)
    )

    async def main() -> None:
        store = MemoryLimits()
        async with (
            silent_engine(head) as url,
            engines(1) as live,
            gateway_for(data, {"chat": [url, live[0].url]}, None, store) as (gw, client),
        ):
            r = await asyncio.wait_for(
                client.post("/v1/chat/completions", json=chat(max_tokens=3, stream=True),
                            headers={"authorization": f"Bearer {key}"}),
                10 * SILENCE_S,
            )  # fmt: skip
            assert r.status_code == 200
            assert '"content"' in r.text and "error" not in r.text
            assert r.headers["x-inhouse-pool"] == "chat"
            assert [x.num_inflight for x in gw.pools["chat"].replicas] == [0, 0]
            assert store._tenants[name].leases == {}

    asyncio.run(main())


@pytest.mark.parametrize(
    ("stream", "words"),
    [(False, ("not JSON",)), (True, ("not an event stream", "text/html"))],
    ids=["json", "stream"],
)
def test_a_200_that_is_a_web_page_is_a_502_not_a_success(
    stream: bool, words: tuple[str, ...]
) -> None:
    # Whatever answers at an engine's address (an ingress's default backend, a login portal)
    # answered 200 with HTML: the client got it as a completion, the metrics a success. A
    # stream request got it as the body of an SSE stream (200, `text/event-stream`, no event,
    # no [DONE]), which an OpenAI client reads as an empty answer, no error at all.
    key, name, data = tenant_stack()
    page = b"<html>\n\n<body>Welcome</body>\n\n</html>\n\n"
    answer = whole_answer(b"200 OK", b"text/html", page)

    async def main() -> None:
        store = MemoryLimits()
        async with (
            silent_engine(answer) as url,
            gateway_for(data, {"chat": [url]}, None, store) as (gw, client),
        ):
            r = await client.post("/v1/chat/completions", json=chat(max_tokens=5, stream=stream),
                                  headers={"authorization": f"Bearer {key}"})  # fmt: skip
            assert r.status_code == 502, r.text
            message = r.json()["error"]["message"]
            assert all(word in message for word in words), message
            text = gw.metrics.render().decode()
            assert 'code="502"' in text and 'code="200"' not in text
            assert store._tenants[name].leases == {}

    asyncio.run(main())


def test_a_stream_silent_before_its_first_token_on_the_only_replica_is_a_502_naming_it() -> None:
    # The retry found no other replica and the client got 503 "No replica ... is available":
    # the replica's failure, the one thing that happened to the request, was lost.
    key, name, data = tenant_stack()
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\n\r\n" + event(ROLE)
    )

    async def main() -> None:
        store = MemoryLimits()
        async with (
            silent_engine(head) as url,
            gateway_for(data, {"chat": [url]}, None, store) as (gw, client),
        ):
            r = await asyncio.wait_for(
                client.post("/v1/chat/completions", json=chat(max_tokens=3, stream=True),
                            headers={"authorization": f"Bearer {key}"}),
                10 * SILENCE_S,
            )  # fmt: skip
            assert r.status_code == 502, r.text
            message = r.json()["error"]["message"]
            assert f"sent nothing for {SILENCE_S:g} s" in message, message
            assert "replica 0" in message and "No replica" not in message, message
            assert gw.pools["chat"].replicas[0].num_inflight == 0
            assert store._tenants[name].leases == {}

    asyncio.run(main())


def test_an_engine_error_on_the_only_replica_is_a_502_naming_its_status() -> None:
    key, name, data = tenant_stack()
    body = b'{"error":{"message":"CUDA error: an illegal memory access"}}'
    answer = whole_answer(b"500 Internal Server Error", b"application/json", body)

    async def main() -> None:
        store = MemoryLimits()
        async with (
            silent_engine(answer) as url,
            gateway_for(data, {"chat": [url]}, None, store) as (gw, client),
        ):
            r = await client.post("/v1/chat/completions", json=chat(max_tokens=3, stream=True),
                                  headers={"authorization": f"Bearer {key}"})  # fmt: skip
            assert r.status_code == 502, r.text
            message = r.json()["error"]["message"]
            assert "replica 0: engine answered 500" in message, message
            assert "illegal memory access" in message, message
            assert 'code="502"' in gw.metrics.render().decode()
            assert store._tenants[name].leases == {}

    asyncio.run(main())
