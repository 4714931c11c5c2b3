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
from tests.gateway.conftest import KEY, LiveEngine, chat, engines, stack_data
from tests.gateway.test_failures import wait_for

from inhouse.gateway.serve import gateway_server
from inhouse.gateway.service import Gateway
from inhouse.http1.listener import GatewayServer
from inhouse.spec.gateway import parse_gateway
from inhouse.spec.stack import parse_stack

GRACE_S = 0.2


@contextlib.asynccontextmanager
async def live_gateway() -> AsyncIterator[
    tuple[Gateway, GatewayServer, httpx.AsyncClient, LiveEngine]
]:
    async with engines(1, time_scale=1.0) as live:
        stack = parse_stack(stack_data(replicas=1))
        gateway = Gateway(stack, parse_gateway(stack.gateway), {"chat": [live[0].url]}, KEY)
        await gateway.start()
        server = gateway_server(gateway)
        await server.start("127.0.0.1", 0)
        try:
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{server.port}",
                headers={"authorization": f"Bearer {KEY}"},
                timeout=30,
            ) as client:
                yield gateway, server, client, live[0]
        finally:
            await server.shutdown(0.0)
            await gateway.stop()


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
