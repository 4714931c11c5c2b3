"""Pools and replicas: prefix-cache-aware choice, the length rule, fallback, priority queue."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
from tests.gateway.conftest import MODEL, chat, engines, free_port, gateway_for, stack_data

from inhouse.gateway.service import Gateway


def two_pools(gateway: dict[str, Any] | None = None, **chat_pool: Any) -> dict[str, Any]:
    data = stack_data(replicas=1, gateway=gateway, **chat_pool)
    data["pools"].append(
        {
            "name": "small",
            "model": MODEL,
            "served_model_name": "small",
            "replicas": 1,
            "knobs": {"max_model_len": 4096, "max_num_seqs": 16},
        }
    )
    return data


@contextlib.asynccontextmanager
async def long_pool_gateway() -> AsyncIterator[tuple[Gateway, httpx.AsyncClient]]:
    """`chat` (512 tokens of context) with `small` (4096) as its long pool above 50 prompt
    tokens, one live replica each, and the gateway in front."""
    data = two_pools(long_prompt_tokens=50, long_pool="small")
    async with (
        engines(1) as live,
        engines(1, max_model_len=4096, served_model_names=("small",)) as small,
    ):
        urls = {"chat": [live[0].url], "small": [small[0].url]}
        async with gateway_for(data, urls) as (gateway, client):
            yield gateway, client


def test_shared_prefix_sticks_to_one_replica() -> None:
    async def main() -> None:
        async with engines(3) as live:
            urls = {"chat": [e.url for e in live]}
            async with gateway_for(stack_data(replicas=3), urls) as (gateway, client):
                system = "You are a careful assistant. " * 40
                pools = []
                for turn in range(6):
                    body = {
                        "model": "tiny",
                        "max_tokens": 2,
                        "messages": [
                            {"role": "system", "content": system},
                            {"role": "user", "content": f"question {turn}"},
                        ],
                    }
                    r = await client.post("/v1/chat/completions", json=body)
                    assert r.status_code == 200
                    pools.append(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])
                text = gateway.metrics.render().decode()
        assert 'reason="prefix_match"' in text
        assert all(cached > 0 for cached in pools[1:]), pools  # every turn hit the cache

    asyncio.run(main())


def test_long_prompts_go_to_the_long_pool() -> None:
    async def main() -> None:
        async with long_pool_gateway() as (gateway, client):
            short = await client.post("/v1/chat/completions", json=chat(max_tokens=1))
            assert short.headers["x-inhouse-pool"] == "chat"
            long = await client.post("/v1/chat/completions", json=chat("z" * 3000, max_tokens=1))
            assert long.status_code == 200, long.text
            assert long.headers["x-inhouse-pool"] == "small"
            text = gateway.metrics.render().decode()
            assert 'reason="long_prompt"' in text

    asyncio.run(main())


def test_fallback_when_primary_is_down_is_marked() -> None:
    data = two_pools(fallback="small")

    async def main() -> None:
        async with engines(1, max_model_len=4096, served_model_names=("small",)) as small:
            dead = f"http://127.0.0.1:{free_port()}"
            urls = {"chat": [dead], "small": [small[0].url]}
            async with gateway_for(data, urls) as (gateway, client):
                r = await client.post("/v1/chat/completions", json=chat(max_tokens=1))
                assert r.status_code == 200, r.text
                assert r.headers["x-inhouse-pool"] == "small"
                assert r.headers["x-inhouse-fallback"] == "chat"
                text = gateway.metrics.render().decode()
                assert (
                    'inhouse_gateway_routing_decisions_total{pool="small",reason="fallback"' in text
                )
                assert 'inhouse_gateway_replica_healthy{pool="chat",replica="0"} 0.0' in text

    asyncio.run(main())


def test_pool_down_without_fallback_is_503() -> None:
    async def main() -> None:
        dead = f"http://127.0.0.1:{free_port()}"
        async with gateway_for(stack_data(replicas=1), {"chat": [dead]}) as (_, client):
            r = await client.post("/v1/chat/completions", json=chat(max_tokens=1))
            assert r.status_code == 503
            assert r.json()["error"]["code"] == 503
            assert "retry-after" in r.headers
            assert (await client.get("/health")).status_code == 503

    asyncio.run(main())


def tiered(queue_timeout_s: float = 10.0, max_queue: int = 8) -> tuple[dict[str, Any], str]:
    from inhouse.gateway.keys import create_key

    key, entry = create_key()
    gateway = {
        "proxy": {"max_inflight_per_replica": 1},
        "tiers": {
            "batch": {"priority": 10, "queue_timeout_s": queue_timeout_s, "max_queue": max_queue}
        },
        "tenants": [{"name": "bulk", "tier": "batch", "keys": [entry]}],
    }
    return stack_data(replicas=1, gateway=gateway), key


def test_saturated_pool_serves_interactive_before_batch() -> None:
    data, batch_key = tiered()

    async def main() -> None:
        async with engines(1, time_scale=0.5) as live:
            order: list[int] = []
            admit = live[0].state.admit

            def spy(*args: Any, **kwargs: Any) -> Any:
                order.append(args[6])
                return admit(*args, **kwargs)

            live[0].state.admit = spy  # type: ignore[method-assign]
            async with gateway_for(data, {"chat": [live[0].url]}) as (gateway, client):
                batch = {"authorization": f"Bearer {batch_key}"}

                async def send(headers: dict[str, str] | None, n: int) -> httpx.Response:
                    return await client.post(
                        "/v1/chat/completions", json=chat(max_tokens=n), headers=headers
                    )

                tasks = [asyncio.create_task(send(batch, 40))]
                await asyncio.sleep(0.05)
                tasks += [asyncio.create_task(send(batch, 2)) for _ in range(3)]
                await asyncio.sleep(0.05)
                assert gateway.pools["chat"].num_queued == 3
                tasks.append(asyncio.create_task(send(None, 2)))
                results = await asyncio.gather(*tasks)
        assert [r.status_code for r in results] == [200] * 5
        assert order == [10, 0, 10, 10, 10]

    asyncio.run(main())


def test_queue_timeout_and_full_queue_are_503_with_retry_after() -> None:
    data, batch_key = tiered(queue_timeout_s=0.2, max_queue=1)

    async def main() -> None:
        async with (
            engines(1, time_scale=1.0) as live,
            gateway_for(data, {"chat": [live[0].url]}) as (gateway, client),
        ):
            batch = {"authorization": f"Bearer {batch_key}"}
            long = asyncio.create_task(
                client.post("/v1/chat/completions", json=chat(max_tokens=200), headers=batch)
            )
            await asyncio.sleep(0.05)
            waits = asyncio.create_task(
                client.post("/v1/chat/completions", json=chat(max_tokens=1), headers=batch)
            )
            await asyncio.sleep(0.02)
            full = await client.post("/v1/chat/completions", json=chat(max_tokens=1), headers=batch)
            assert full.status_code == 503 and "queue" in full.json()["error"]["message"]
            timed_out = await waits
            assert timed_out.status_code == 503
            assert int(timed_out.headers["retry-after"]) >= 1
            long.cancel()
            text = gateway.metrics.render().decode()
            assert 'inhouse_gateway_rejections_total{reason="queue_full",tenant="bulk"} 2.0' in text

    asyncio.run(main())


def test_the_quick_pool_choice_is_the_simulators_choice_on_random_states() -> None:
    """`Dispatcher.choose_pool` answers the common case from the replicas' counts without
    building views; on random health, load, scrapes, prompt lengths, fallbacks and a LoRA
    guest (which takes no length rule) it chooses
    as `routing.pools.choose_pool` over the live views does."""
    import random
    import time

    from inhouse.gateway.service import Gateway
    from inhouse.routing.pools import choose_pool
    from inhouse.spec.gateway import parse_gateway
    from inhouse.spec.stack import parse_stack

    rng = random.Random(5)
    for trial in range(40):
        fallback = rng.choice([None, "small"])
        long_rule = rng.choice([{}, {"long_prompt_tokens": 50, "long_pool": "small"}])
        data = two_pools(saturation_waiting=rng.randint(1, 4), fallback=fallback,
                         lora_adapters=["support"], **long_rule)  # fmt: skip
        data["pools"][0]["replicas"] = rng.randint(1, 3)
        stack = parse_stack(data)
        urls = {p.name: [f"http://127.0.0.1:{9000 + i}" for i in range(p.replicas)]
                for p in stack.pools}  # fmt: skip
        gateway = Gateway(stack, parse_gateway(stack.gateway), urls, "k")
        dispatcher = gateway.dispatcher
        for _ in range(25):
            now = time.monotonic()
            for pool in gateway.pools.values():
                for replica in pool.replicas:
                    replica.is_healthy = rng.random() < 0.7
                    replica.num_inflight = rng.randint(0, 20)
                    replica.running_capacity = rng.randint(1, 20)
                    replica.scraped_waiting = rng.randint(0, 6)
                    replica.scraped_at = now - rng.choice([0.0, 1e6])
            model = rng.choice([None, "tiny", "small", "support"])
            tokens = rng.choice([10, 60, 500])
            quick = dispatcher.choose_pool(model, tokens)
            full = choose_pool(stack, model, tokens, dispatcher.views)  # type: ignore[arg-type]
            assert quick == full, (trial, model, tokens)


def test_requests_sharing_a_request_id_are_routed_and_released_apart() -> None:
    """The policy's own books (cache_aware's pending prefill tokens per replica) are kept per
    request, not per the client's `x-request-id`: after concurrent requests that share one,
    nothing is left pending."""

    async def main() -> None:
        async with engines(2, time_scale=1.0) as live:
            urls = {"chat": [e.url for e in live]}
            async with gateway_for(stack_data(), urls) as (gateway, client):
                headers = {"x-request-id": "reused"}
                bodies = [chat(f"question {i} " * 20, max_tokens=8) for i in range(6)]
                results = await asyncio.gather(
                    *(client.post("/v1/chat/completions", json=b, headers=headers) for b in bodies)
                )
                assert [r.status_code for r in results] == [200] * 6
                policy = gateway.pools["chat"].policy
                assert list(policy.pending_tokens) == [0, 0]  # type: ignore[attr-defined]
                assert not policy._inflight  # type: ignore[attr-defined]

    asyncio.run(main())


def test_a_replica_that_restarts_rejoins_with_an_empty_prefix_index() -> None:
    # Its engine restarted with an empty cache: the prompts the router remembers there are gone,
    # and an index that still claims them sends their sessions back as cache hits (priced as
    # cheap prefills), piling recomputed prompts onto the cold replica.
    from tests.gateway.conftest import start_engine, stop_engine
    from tests.gateway.test_failures import wait_for

    from inhouse.routing.policies.cache_aware import CacheAware

    system = "You are a careful assistant. " * 40

    def turn(n: int) -> dict[str, Any]:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": f"q {n}"}]
        return {"model": "tiny", "max_tokens": 2, "messages": messages}

    async def main() -> None:
        async with engines(2) as live:
            urls = {"chat": [e.url for e in live]}
            async with gateway_for(stack_data(replicas=2), urls) as (gateway, client):
                pool = gateway.pools["chat"]
                policy = pool.policy
                assert isinstance(policy, CacheAware)
                r = await client.post("/v1/chat/completions", json=turn(0))
                assert r.status_code == 200
                [hot] = [i for i in range(2) if policy.indexes[i].num_blocks]
                port = int(live[hot].url.rsplit(":", 1)[1])
                await live[hot].kill()
                await wait_for(lambda: not pool.replicas[hot].is_healthy)
                restarted = await start_engine(live[hot].state.options, port)
                try:
                    await wait_for(lambda: pool.replicas[hot].is_healthy)
                    assert policy.indexes[hot].num_blocks == 0
                    r = await client.post("/v1/chat/completions", json=turn(1))
                    assert r.status_code == 200
                    text = gateway.metrics.render().decode()
                    assert 'reason="prefix_match"' not in text, text
                finally:
                    await stop_engine(restarted)

    asyncio.run(main())


def test_a_non_streamed_interactive_request_holds_batch_back_only_for_its_prefill() -> None:
    # The holdback keeps batch prefills off a replica while an interactive prompt is in
    # prefill. A non-streamed answer's first token is never seen, so its request counted as in
    # prefill until its end: batch waited behind every interactive decode and, with such
    # requests always running, never got a slot however idle the replica (starved to 503s).
    from inhouse.gateway.keys import create_key

    key, entry = create_key()
    gateway = {
        "tiers": {"batch": {"priority": 10, "queue_timeout_s": 1.0}},
        "tenants": [{"name": "bulk", "tier": "batch", "keys": [entry]}],
    }
    data = stack_data(replicas=1, gateway=gateway)

    async def main() -> None:
        async with (
            engines(1, time_scale=1.0) as live,
            gateway_for(data, {"chat": [live[0].url]}) as (_, client),
        ):
            long = chat(max_tokens=400, ignore_eos=True)  # decodes for seconds
            interactive = asyncio.create_task(client.post("/v1/chat/completions", json=long))
            runner = live[0].state.runner
            while not any(s.num_tokens for s in runner.streams.values()):
                await asyncio.sleep(0.01)  # its prefill is over: it decodes
            r = await client.post(
                "/v1/chat/completions",
                json=chat(max_tokens=2),
                headers={"authorization": f"Bearer {key}"},
            )
            assert r.status_code == 200, r.text
            assert not interactive.done()  # served beside it, not after it
            assert (await interactive).status_code == 200

    asyncio.run(main())


def test_a_short_prompt_whose_max_tokens_overflow_its_pool_goes_to_the_long_pool() -> None:
    # The length rule looks at the prompt alone: a prompt under long_prompt_tokens with a
    # max_tokens past its pool's context was refused (400) though the long pool holds it.
    async def main() -> None:
        async with long_pool_gateway() as (gateway, client):
            fits = await client.post("/v1/chat/completions", json=chat(max_tokens=400))
            assert fits.headers["x-inhouse-pool"] == "chat"  # 512 tokens of context
            r = await client.post("/v1/chat/completions", json=chat(max_tokens=1000))
            assert r.status_code == 200, r.text
            assert r.headers["x-inhouse-pool"] == "small"
            assert 'reason="long_prompt"' in gateway.metrics.render().decode()
            # Past every pool's context: the first pool's refusal, as before.
            r = await client.post("/v1/chat/completions", json=chat(max_tokens=5000))
            assert r.status_code == 400
            assert "max_model_len=512" in r.json()["error"]["message"]

    asyncio.run(main())


def test_a_lora_guests_long_prompt_stays_on_the_pool_that_carries_its_adapter() -> None:
    # The plan puts a LoRA guest on a split workload's standard pool with all its prompts
    # (`plan.layout._with_lora`); the long pool has no adapter for it. The length rule sent the
    # guest's long prompts there anyway, renamed to the long pool's base model: answered 200
    # without the adapter. And a prompt too long for its pool's context was sent on there too.
    data = two_pools(long_prompt_tokens=50, long_pool="small", lora_adapters=["support"])

    async def main() -> None:
        async with (
            engines(1, lora_modules=("support",)) as live,
            engines(1, max_model_len=4096, served_model_names=("small",)) as small,
        ):
            urls = {"chat": [live[0].url], "small": [small[0].url]}
            async with gateway_for(data, urls) as (_, client):
                prompt = "word " * 120  # above the rule's 50 tokens, inside chat's 512
                r = await client.post(
                    "/v1/chat/completions", json=chat(prompt, model="support", max_tokens=1)
                )
                assert r.status_code == 200, r.text
                assert r.headers["x-inhouse-pool"] == "chat"
                assert r.json()["model"] == "support"
                # The base model's long prompts still take the rule.
                r = await client.post("/v1/chat/completions", json=chat(prompt, max_tokens=1))
                assert r.headers["x-inhouse-pool"] == "small"
                # Past the guest's pool's context: that pool's refusal, not the long pool.
                r = await client.post(
                    "/v1/chat/completions", json=chat(prompt, model="support", max_tokens=1000)
                )
                assert r.status_code == 400, r.text
                assert "max_model_len=512" in r.json()["error"]["message"]

    asyncio.run(main())
