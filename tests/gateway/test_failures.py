"""Health and failure: join after /health 200, removal and recovery, retries before the first
byte, an error event mid-stream, and a replica killed while requests flow."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator

import httpx
from tests.gateway.conftest import LiveEngine, chat, engines, gateway_for, stack_data

from inhouse.gateway.service import Gateway


async def wait_for(predicate, timeout_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def two_replicas_in_turn() -> AsyncIterator[
    tuple[list[LiveEngine], Gateway, httpx.AsyncClient]
]:
    """Two engines behind a round-robin gateway whose probes stay out of the way (every 30 s):
    what the requests meet decides a replica's health."""
    data = stack_data(
        replicas=2, gateway={"health": {"interval_s": 30}}, routing={"policy": "round_robin"}
    )
    async with (
        engines(2) as live,
        gateway_for(data, {"chat": [e.url for e in live]}) as (gw, client),
    ):
        yield live, gw, client


def test_replica_joins_after_health_200_and_leaves_and_recovers() -> None:
    async def main() -> None:
        async with engines(1) as live:
            live[0].state.is_loaded = False  # a loading model answers /health 503
            async with gateway_for(stack_data(replicas=1), {"chat": [live[0].url]}) as (gw, client):
                replica = gw.pools["chat"].replicas[0]
                assert not replica.is_healthy
                r = await client.post("/v1/chat/completions", json=chat(max_tokens=1))
                assert r.status_code == 503
                live[0].state.is_loaded = True
                await wait_for(lambda: replica.is_healthy)
                r = await client.post("/v1/chat/completions", json=chat(max_tokens=1))
                assert r.status_code == 200
                live[0].state.is_draining = True  # /health 503 again
                await wait_for(lambda: not replica.is_healthy)
                live[0].state.is_draining = False
                await wait_for(lambda: replica.is_healthy)

    asyncio.run(main())


def test_failure_before_first_byte_is_retried_elsewhere() -> None:
    async def main() -> None:
        async with two_replicas_in_turn() as (live, gw, client):
            live[0].state.faults.fail_next = 3  # the engine answers 500 three times
            results = [
                await client.post("/v1/chat/completions", json=chat(max_tokens=1)) for _ in range(6)
            ]
            assert [r.status_code for r in results] == [200] * 6
            text = gw.metrics.render().decode()
            # Two consecutive failures remove the replica (unhealthy_after = 2).
            assert 'inhouse_gateway_retries_total{pool="chat",replica="0"} 2.0' in text
            assert not gw.pools["chat"].replicas[0].is_healthy

    asyncio.run(main())


def test_a_request_a_draining_replica_refuses_before_the_gateway_noticed_goes_elsewhere() -> None:
    # SIGTERM between two probes: the replica answers new requests 503 ("shutting down")
    # while the gateway still routes to it; nothing was streamed, so each is retried.
    async def main() -> None:
        async with two_replicas_in_turn() as (live, gw, client):
            live[0].state.is_draining = True
            results = [
                await client.post("/v1/chat/completions", json=chat(max_tokens=2, stream=s))
                for s in (False, True, False, True)
            ]
            assert [r.status_code for r in results] == [200] * 4
            assert all('"content"' in r.text and "error" not in r.text for r in results)
            assert results[1].text.endswith("data: [DONE]\n\n")
            text = gw.metrics.render().decode()
            assert 'inhouse_gateway_retries_total{pool="chat",replica="0"}' in text
            assert 'inhouse_gateway_retries_total{pool="chat",replica="1"}' not in text

    asyncio.run(main())


def test_a_busy_replica_is_retried_elsewhere_and_stays_in_routing() -> None:
    # Its waiting queue full, an engine answers 503 "busy"; counted as health failures, two of
    # them took a full but healthy replica out of routing, its load onto the others (which fill
    # and go out in turn). The request goes elsewhere; the replica stays routable.
    async def main() -> None:
        async with two_replicas_in_turn() as (live, gw, client):
            live[0].state.options = dataclasses.replace(
                live[0].state.options, max_num_queued_reqs=0
            )  # every request finds the queue full
            results = [
                await client.post("/v1/chat/completions", json=chat(max_tokens=1, stream=s))
                for s in (False, True, False, True, False, True)
            ]
            assert [r.status_code for r in results] == [200] * 6
            text = gw.metrics.render().decode()
            # Round robin offers replica 0 first each time: each request is retried once.
            assert 'inhouse_gateway_retries_total{pool="chat",replica="0"} 6.0' in text
            assert gw.pools["chat"].replicas[0].is_healthy
            assert gw.pools["chat"].replicas[0].num_failures == 0

    asyncio.run(main())


def test_stream_broken_mid_way_ends_with_an_error_event() -> None:
    async def main() -> None:
        async with (
            engines(1, time_scale=1.0) as live,
            gateway_for(stack_data(replicas=1), {"chat": [live[0].url]}) as (_, client),
        ):
            request = asyncio.create_task(
                client.post(
                    "/v1/chat/completions",
                    json=chat(max_tokens=300, stream=True, ignore_eos=True),
                )
            )
            await wait_for(lambda: live[0].state.runner.num_in_flight > 0)
            await asyncio.sleep(0.3)
            await live[0].kill()
            r = await request
        assert r.status_code == 200
        events = [e for e in r.text.split("\n\n") if e]
        assert events[-1] == "data: [DONE]"
        assert events[-2].startswith('data: {"error":')
        assert any('"content"' in e for e in events[:-2])

    asyncio.run(main())


def test_killing_a_replica_fails_no_request_that_had_not_started() -> None:
    data = stack_data(replicas=2, gateway={"health": {"interval_s": 0.5}})

    async def main() -> None:
        async with (
            engines(2, time_scale=0.3) as live,
            gateway_for(data, {"chat": [e.url for e in live]}) as (_, client),
        ):

            async def one(i: int) -> tuple[int, str]:
                await asyncio.sleep(0.01 * i)
                body = chat(f"request {i} " * 20, max_tokens=20, stream=True, ignore_eos=True)
                r = await client.post("/v1/chat/completions", json=body)
                return r.status_code, r.text

            tasks = [asyncio.create_task(one(i)) for i in range(80)]
            await asyncio.sleep(0.3)
            await live[0].kill()
            results = await asyncio.gather(*tasks)
        broken = 0
        for status, text in results:
            assert status == 200, text
            events = [e for e in text.split("\n\n") if e]
            assert events[-1] == "data: [DONE]"
            if any(e.startswith('data: {"error"') for e in events):
                broken += 1
                assert any('"content":"' in e and '"content":""' not in e for e in events), text
        assert broken < len(results)

    asyncio.run(main())
