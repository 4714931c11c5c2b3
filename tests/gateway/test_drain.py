"""SIGTERM with requests in flight: those still running when `proxy.drain_timeout_s` is up are
cut by the server's shutdown, and each client gets an answer it can act on (an error event at
the end of its stream; a 503 with Retry-After before any byte), not a cut connection; the
engine stops their work."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
from tests.gateway.conftest import LiveEngine, chat, engines, served_by, stack_data
from tests.gateway.test_failures import wait_for

from inhouse.gateway.service import Gateway
from inhouse.http1.listener import GatewayServer

GRACE_S = 0.2


@contextlib.asynccontextmanager
async def live_gateway() -> AsyncIterator[
    tuple[Gateway, GatewayServer, httpx.AsyncClient, LiveEngine]
]:
    async with engines(1, time_scale=1.0) as live:
        data, urls = stack_data(replicas=1), [live[0].url]
        async with served_by(data, urls, shutdown_s=0.0) as (gateway, server, client):
            yield gateway, server, client, live[0]


async def shut_down(gateway: Gateway, server: GatewayServer) -> None:
    """What `serve_gateway` does on SIGTERM, with short timeouts."""
    assert await gateway.drain(GRACE_S) == 1  # one request still runs at the deadline
    await server.shutdown(GRACE_S)


def long_body(stream: bool) -> dict[str, Any]:
    return chat(max_tokens=400, ignore_eos=True, stream=stream)


def test_a_stream_cut_by_the_shutdown_ends_with_an_error_event() -> None:
    async def main() -> None:
        async with live_gateway() as (gateway, server, client, engine):
            got: list[bytes] = []

            async def stream() -> None:
                async with client.stream("POST", "/v1/chat/completions", json=long_body(True)) as r:
                    assert r.status_code == 200
                    async for chunk in r.aiter_bytes():
                        got.append(chunk)

            task = asyncio.create_task(stream())
            await wait_for(lambda: b"content" in b"".join(got), 10.0)
            await shut_down(gateway, server)
            await asyncio.wait_for(task, 5.0)  # a whole body: no broken chunked read
            events = [e for e in b"".join(got).decode().split("\n\n") if e]
            assert events[-1] == "data: [DONE]"
            assert events[-2].startswith('data: {"error":'), events[-2]
            assert "shutting down" in events[-2]
            await wait_for(lambda: engine.state.runner.num_in_flight == 0, 2.0)

    asyncio.run(main())


def test_a_request_not_yet_answered_when_the_shutdown_cuts_it_gets_503() -> None:
    async def main() -> None:
        async with live_gateway() as (gateway, server, client, engine):
            task = asyncio.create_task(client.post("/v1/chat/completions", json=long_body(False)))
            await wait_for(lambda: engine.state.runner.num_in_flight == 1, 10.0)
            await shut_down(gateway, server)
            r = await asyncio.wait_for(task, 5.0)
            assert r.status_code == 503, r.text
            assert "shutting down" in r.json()["error"]["message"]
            assert int(r.headers["retry-after"]) >= 1
            await wait_for(lambda: engine.state.runner.num_in_flight == 0, 2.0)

    asyncio.run(main())
