"""`Replica`'s view of an engine's queue (a fresh scrape, else the gateway's own estimate) and its
health: a `/health` answer other than 200 takes it out at once, no answer only `unhealthy_after`
times in a row, and it rejoins after `healthy_after` 200s."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from tests.gateway.conftest import (
    LiveEngine,
    chat,
    engine_options,
    engines,
    gateway_for,
    stack_data,
    start_engine,
    stop_engine,
)
from tests.support.logs import logged

from inhouse.gateway.replicas import HealthMonitor, Replica
from inhouse.spec.gateway import HealthSpec


def test_waiting_is_the_fresh_scrape_or_the_live_estimate_never_a_stale_scrape() -> None:
    replica = Replica("chat", 0, "http://127.0.0.1:9000", 4, 1.0)
    replica.is_healthy = True
    replica.scraped_waiting = 5
    replica.scraped_at = 100.0
    assert replica.num_waiting(101.0, 2.0) == 5  # fresh
    assert replica.num_waiting(103.0, 2.0) == 0  # stale: counts as nothing
    replica.num_inflight = 7  # 3 beyond its running batch of 4: queued in the engine
    assert replica.num_waiting(103.0, 2.0) == 3
    assert replica.num_waiting(101.0, 2.0) == 5  # the larger of scrape and estimate
    replica.scraped_waiting = 1
    assert replica.num_waiting(101.0, 2.0) == 3
    view = replica.view(101.0, 2.0)
    assert (view.num_inflight, view.num_waiting, view.is_healthy) == (7, 3, True)


def test_idle_engine_connections_are_kept_as_long_as_the_spec_says() -> None:
    from inhouse.gateway.service import Gateway
    from inhouse.spec.gateway import parse_gateway
    from inhouse.spec.stack import parse_stack

    for given, expected in (({}, 60.0), ({"proxy": {"upstream_idle_s": 12}}, 12.0)):
        stack = parse_stack(stack_data(replicas=2, gateway=given))
        gateway = Gateway(
            stack, parse_gateway(stack.gateway), {"chat": ["http://a:1", "http://b:2"]}
        )
        assert [r.upstream.idle_s for r in gateway.pools["chat"].replicas] == [expected] * 2


def test_a_non_200_answer_takes_a_replica_out_at_once_no_answer_only_in_a_row() -> None:
    health = HealthSpec(unhealthy_after=2, healthy_after=1)
    replica = Replica("chat", 0, "http://127.0.0.1:9000", 4, 1.0)
    replica.is_healthy = True
    assert not replica.record_failure(health)  # a timeout or a refusal: one is not enough
    assert replica.is_healthy
    assert not replica.record_success(health)  # already in; the count starts again
    assert not replica.record_failure(health)
    assert replica.record_failure(health)  # the second in a row
    assert not replica.is_healthy
    assert replica.record_success(health)
    assert replica.record_failure(health, is_explicit=True)  # "I am not healthy": believed
    assert not replica.is_healthy
    assert not replica.record_failure(health, is_explicit=True)  # out already: no second leave


@contextlib.asynccontextmanager
async def _probed(**health: Any) -> AsyncIterator[tuple[LiveEngine, HealthMonitor, Replica]]:
    """One engine behind a gateway whose probes run 30 s apart: only its first probe and the
    test's own ones run."""
    data = stack_data(replicas=1, gateway={"health": {"interval_s": 30, **health}})
    async with engines(1) as live, gateway_for(data, {"chat": [live[0].url]}) as (gw, _):
        yield live[0], gw.backends.monitor, gw.pools["chat"].replicas[0]


def test_a_replica_whose_health_turns_503_is_out_after_one_probe_and_rejoins_after_three() -> None:
    async def main() -> None:
        async with _probed(healthy_after=3) as (engine, monitor, replica):
            for _ in range(2):  # in after three 200s: the first probe and two more
                await monitor.probe(replica)
            assert replica.is_healthy
            engine.state.is_draining = True  # SIGTERM: /health answers 503 at once
            with logged(level=logging.WARNING) as messages:
                await monitor.probe(replica)
            assert not replica.is_healthy
            assert messages == ["replica chat/0 removed: answered 503"]
            engine.state.is_draining = False  # (a restarted replica, loaded)
            for _ in range(2):
                await monitor.probe(replica)
                assert not replica.is_healthy
            await monitor.probe(replica)
            assert replica.is_healthy

    asyncio.run(main())


def test_a_probe_that_times_out_once_keeps_the_replica_twice_takes_it_out() -> None:
    async def main() -> None:
        async with _probed(timeout_s=0.2) as (engine, monitor, replica):
            assert replica.is_healthy
            engine.state.faults.hang_all.clear()  # every request, /health too, hangs
            try:
                with logged(level=logging.WARNING) as messages:
                    await monitor.probe(replica)
                    assert replica.is_healthy and messages == []
                    await monitor.probe(replica)
                    assert not replica.is_healthy
            finally:
                engine.state.faults.hang_all.set()
            assert messages == ["replica chat/0 removed: health checks fail"]

    asyncio.run(main())


def test_a_probe_refused_once_keeps_the_replica_a_timeout_after_a_200_too() -> None:
    async def main() -> None:
        async with _probed(timeout_s=0.2) as (engine, monitor, replica):
            engine.state.faults.hang_all.clear()
            await monitor.probe(replica)  # timed out: one failure
            engine.state.faults.hang_all.set()
            await monitor.probe(replica)  # 200: the count starts again
            await engine.kill()  # nothing listens any more: refused
            await monitor.probe(replica)
            assert replica.is_healthy
            await monitor.probe(replica)
            assert not replica.is_healthy

    asyncio.run(main())


def test_a_replica_restarted_with_another_context_is_held_to_its_new_max_model_len() -> None:
    """The stack states no context, so the gateway holds requests to what the engine's
    `/v1/models` reports. The engine restarts on the same address with twice the context: once
    it is back, the gateway checks requests against the new length, not the one it read first."""
    first_len = engine_options().knobs.max_model_len
    assert first_len is not None
    second_len = 2 * first_len
    data = stack_data(replicas=1, gateway={"health": {"interval_s": 30, "healthy_after": 1}})
    del data["pools"][0]["knobs"]["max_model_len"]
    over_first = chat(max_tokens=first_len + 16)  # fits only the restarted engine's context

    async def main() -> None:
        engine = await start_engine(engine_options())
        port = int(engine.url.rsplit(":", 1)[1])
        try:
            async with gateway_for(data, {"chat": [engine.url]}) as (gateway, client):
                monitor, pool = gateway.backends.monitor, gateway.pools["chat"]
                replica = pool.replicas[0]
                assert replica.is_healthy and pool.max_model_len() == first_len
                r = await client.post("/v1/chat/completions", json=over_first)
                assert r.status_code == 400 and f"max_model_len={first_len}" in r.text, r.text
                await engine.kill()
                await monitor.probe(replica)  # refused: the engine is restarting
                engine = await start_engine(engine_options(max_model_len=second_len), port)
                await monitor.probe(replica)
                assert replica.is_healthy
                assert pool.max_model_len() == second_len
                r = await client.post("/v1/chat/completions", json=over_first)
                assert r.status_code == 200, r.text
        finally:
            await stop_engine(engine)

    asyncio.run(main())


def test_a_replica_restarted_between_two_probes_is_held_to_its_new_max_model_len() -> None:
    """The engine restarts on the same address with twice the context between two probes (a
    fast restart: no probe or request failed meanwhile). The next probe, a 200 like the last,
    brings the new length: requests the old one refused are served, and the other way round
    (restarted with half the context) the gateway refuses what the engine would."""
    first_len = engine_options().knobs.max_model_len
    assert first_len is not None
    data = stack_data(replicas=1, gateway={"health": {"interval_s": 30, "healthy_after": 1}})
    del data["pools"][0]["knobs"]["max_model_len"]

    async def main() -> None:
        engine = await start_engine(engine_options())
        port = int(engine.url.rsplit(":", 1)[1])
        try:
            async with gateway_for(data, {"chat": [engine.url]}) as (gateway, client):
                monitor, pool = gateway.backends.monitor, gateway.pools["chat"]
                replica = pool.replicas[0]
                assert replica.is_healthy and pool.max_model_len() == first_len
                for new_len in (2 * first_len, first_len // 2):
                    old_len = pool.max_model_len()
                    assert old_len is not None
                    await engine.kill()
                    engine = await start_engine(engine_options(max_model_len=new_len), port)
                    await monitor.probe(replica)
                    assert replica.is_healthy and replica.num_failures == 0
                    assert pool.max_model_len() == new_len
                    fits_longer = chat(max_tokens=max(old_len, new_len) - 64)
                    r = await client.post("/v1/chat/completions", json=fits_longer)
                    if new_len > old_len:
                        assert r.status_code == 200, r.text
                    else:  # the gateway's refusal, before the engine: vLLM's words
                        assert r.status_code == 400, r.text
                        assert f"max_model_len={new_len}" in r.text, r.text
        finally:
            await stop_engine(engine)

    asyncio.run(main())
