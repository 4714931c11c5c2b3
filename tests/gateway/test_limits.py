"""Reserve-then-settle limits, in process and in Redis: the same rules, exact under bursts."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Awaitable, Callable

import pytest
from tests.gateway.conftest import KEY, chat, engines, gateway_for, one_tenant_stack, stack_data
from tests.gateway.test_failures import wait_for

from inhouse.gateway.limits import LimitStore, MemoryLimits, Refusal, Reservation
from inhouse.spec.gateway import LimitsSpec

REDIS_URL = "redis://127.0.0.1:6379/15"


def redis_up() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=0.5):
            return True
    except OSError:
        return False


needs_redis = pytest.mark.skipif(not redis_up(), reason="no redis-server on 127.0.0.1:6379")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.wall = 1_800_000_000.0

    def __call__(self) -> tuple[float, float]:
        return self.now, self.wall

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.wall += seconds


def test_rpm_bucket_refills_continuously() -> None:
    clock = FakeClock()
    store = MemoryLimits(clock)
    limits = LimitsSpec(rpm=2)

    async def main() -> None:
        assert isinstance(await store.reserve("t", limits, "a", 1), Reservation)
        assert isinstance(await store.reserve("t", limits, "b", 1), Reservation)
        refused = await store.reserve("t", limits, "c", 1)
        assert isinstance(refused, Refusal) and refused.reason == "rate_limit"
        assert refused.retry_after_s == pytest.approx(30.0)
        clock.advance(30.0)
        assert isinstance(await store.reserve("t", limits, "c", 1), Reservation)

    asyncio.run(main())


def test_tpm_reserve_then_settle_refunds_unused() -> None:
    clock = FakeClock()
    store = MemoryLimits(clock)
    limits = LimitsSpec(tpm=1000)

    async def main() -> None:
        first = await store.reserve("t", limits, "a", 600)
        assert isinstance(first, Reservation)
        refused = await store.reserve("t", limits, "b", 600)
        assert isinstance(refused, Refusal)
        assert refused.retry_after_s == pytest.approx(12.0)  # 200 tokens at 1000/60 per s
        await store.settle(first, limits, used=100)  # 500 refunded
        assert isinstance(await store.reserve("t", limits, "b", 600), Reservation)
        too_big = await store.reserve("t", limits, "c", 5000)
        assert isinstance(too_big, Refusal) and "lower max_tokens" in too_big.message

    asyncio.run(main())


def test_concurrency_and_daily_budget() -> None:
    clock = FakeClock()
    store = MemoryLimits(clock)
    limits = LimitsSpec(max_concurrency=1, daily_tokens=100)

    async def main() -> None:
        first = await store.reserve("t", limits, "a", 60)
        assert isinstance(first, Reservation)
        busy = await store.reserve("t", limits, "b", 10)
        assert isinstance(busy, Refusal) and "concurrent" in busy.message
        await store.settle(first, limits, used=50)
        over = await store.reserve("t", limits, "b", 60)
        assert isinstance(over, Refusal) and over.reason == "token_budget"
        assert 0 < over.retry_after_s <= 86400
        assert isinstance(await store.reserve("t", limits, "b", 50), Reservation)

    asyncio.run(main())


async def burst(
    stores: list[LimitStore], limits: LimitsSpec, tenant: str, n: int, tokens: int
) -> list[Reservation]:
    async def one(i: int) -> Reservation | Refusal:
        return await stores[i % len(stores)].reserve(tenant, limits, f"r{i}", tokens)

    results = await asyncio.gather(*(one(i) for i in range(n)))
    return [r for r in results if isinstance(r, Reservation)]


def test_memory_burst_is_exact() -> None:
    limits = LimitsSpec(tpm=10_000, rpm=1000, max_concurrency=50)
    admitted = asyncio.run(burst([MemoryLimits()], limits, "t", 200, 300))
    assert len(admitted) == 10_000 // 300  # 33: reservations never exceed the limit


async def with_redis(body: Callable[[list], Awaitable[None]], n: int = 2) -> None:
    from inhouse.gateway.redis_limits import RedisLimits

    stores = [RedisLimits(REDIS_URL) for _ in range(n)]
    try:
        await body(stores)
    finally:
        for store in stores:
            await store.close()


@needs_redis
def test_redis_burst_from_two_gateways_is_exact() -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    limits = LimitsSpec(tpm=10_000, rpm=1000, max_concurrency=50, daily_tokens=8000)

    async def body(stores: list) -> None:
        admitted = await burst(stores, limits, tenant, 200, 300)
        assert len(admitted) == 8000 // 300  # the daily budget binds first: 26
        used = await stores[0].daily_used(tenant, admitted[0].day)
        assert used == len(admitted) * 300
        for reservation in admitted:
            await stores[1].settle(reservation, limits, used=100)
        assert await stores[0].daily_used(tenant, admitted[0].day) == len(admitted) * 100
        await stores[0].reset(tenant)

    asyncio.run(with_redis(body))


@needs_redis
def test_redis_rules_match_memory_rules() -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"

    async def body(stores: list) -> None:
        redis = stores[0]
        memory = MemoryLimits()
        for limits, tokens in (
            (LimitsSpec(rpm=3), 1),
            (LimitsSpec(tpm=1000), 400),
            (LimitsSpec(max_concurrency=2), 1),
        ):
            await redis.reset(tenant)
            got_r = [type(await redis.reserve(tenant, limits, f"x{i}", tokens)) for i in range(4)]
            got_m = [
                type(await memory.reserve(tenant + str(limits), limits, f"x{i}", tokens))
                for i in range(4)
            ]
            assert got_r == got_m, limits
        await redis.reset(tenant)
        limits = LimitsSpec(max_concurrency=1)
        first = await redis.reserve(tenant, limits, "a", 1)
        assert isinstance(first, Reservation)
        assert isinstance(await redis.reserve(tenant, limits, "b", 1), Refusal)
        await redis.settle(first, limits, 1)
        assert isinstance(await redis.reserve(tenant, limits, "b", 1), Reservation)
        await redis.reset(tenant)

    asyncio.run(with_redis(body, 1))


def gateway_burst(use_redis: bool) -> None:
    """Concurrent requests through two gateways on one limit: tokens billed stay within the
    TPM limit plus one request's max_tokens."""
    from inhouse.gateway.keys import create_key

    key, entry = create_key()
    tenant = f"burst-{uuid.uuid4().hex[:6]}"
    tpm = 2000
    max_tokens = 20
    tenants = [{"name": tenant, "keys": [entry], "limits": {"tpm": tpm}}]
    data = stack_data(replicas=2, gateway={"tenants": tenants})

    async def main() -> None:
        from inhouse.gateway.limits import MemoryLimits as Mem

        shared: LimitStore
        if use_redis:
            from inhouse.gateway.redis_limits import RedisLimits

            stores: list[LimitStore] = [RedisLimits(REDIS_URL), RedisLimits(REDIS_URL)]
        else:
            shared = Mem()
            stores = [shared, shared]
        async with engines(2) as live:
            urls = {"chat": [e.url for e in live]}
            async with (
                gateway_for(data, urls, None, stores[0]) as (_, first),
                gateway_for(data, urls, None, stores[1]) as (_, second),
            ):
                auth = {"authorization": f"Bearer {key}"}
                body = chat("count me " * 10, max_tokens=max_tokens, ignore_eos=True)

                async def one(i: int) -> tuple[int, int]:
                    client = first if i % 2 else second
                    r = await client.post("/v1/chat/completions", json=body, headers=auth)
                    if r.status_code == 200:
                        return 200, r.json()["usage"]["total_tokens"]
                    assert r.status_code == 429, r.text
                    assert int(r.headers["retry-after"]) >= 1
                    return 429, 0

                results = await asyncio.gather(*(one(i) for i in range(60)))
        billed = sum(tokens for _, tokens in results)
        num_ok = sum(1 for code, _ in results if code == 200)
        assert 0 < num_ok < 60
        assert billed <= tpm + max_tokens
        if use_redis:
            await stores[0].reset(tenant)  # type: ignore[attr-defined]
            await stores[0].close()

    asyncio.run(main())


def test_gateway_burst_memory() -> None:
    gateway_burst(use_redis=False)


@needs_redis
def test_gateway_burst_two_gateways_sharing_redis() -> None:
    gateway_burst(use_redis=True)


def test_a_tenant_without_limits_costs_no_round_trip_to_the_store() -> None:
    """Nothing to hold, nothing reserved or settled: with Redis that is two round trips per
    request saved. A tenant with a limit still reserves and settles every request."""
    from inhouse.gateway.limits import MemoryLimits as Mem

    class Counted(Mem):
        def __init__(self) -> None:
            super().__init__()
            self.calls: list[str] = []

        async def reserve(self, tenant: str, *args: object) -> Reservation | Refusal:
            self.calls.append(f"reserve {tenant}")
            return await super().reserve(tenant, *args)  # type: ignore[arg-type]

        async def settle(self, reservation: Reservation, *args: object) -> None:
            self.calls.append(f"settle {reservation.tenant}")
            await super().settle(reservation, *args)  # type: ignore[arg-type]

    key, _, data = one_tenant_stack({"rpm": 100}, name="limited")
    store = Counted()

    async def main() -> None:
        async with engines(1) as live:
            urls = {"chat": [live[0].url]}
            async with gateway_for(data, urls, KEY, store) as (_, client):
                r = await client.post("/v1/chat/completions", json=chat(max_tokens=2))
                assert r.status_code == 200  # the demo tenant: no limits
                assert store.calls == []
                auth = {"authorization": f"Bearer {key}"}
                r = await client.post("/v1/chat/completions", json=chat(max_tokens=2),
                                      headers=auth)  # fmt: skip
                assert r.status_code == 200
                assert store.calls == ["reserve limited", "settle limited"]

    asyncio.run(main())


@pytest.mark.parametrize("use_redis", [False, pytest.param(True, marks=needs_redis)])
def test_a_reused_request_id_does_not_lift_the_concurrency_limit(use_redis: bool) -> None:
    """The client's `x-request-id` is the client's: requests that share one are still one
    lease each, so a tenant at `max_concurrency: 2` gets a 429 for the third."""
    key, tenant, data = one_tenant_stack({"max_concurrency": 2})

    async def main() -> None:
        store: LimitStore
        if use_redis:
            from inhouse.gateway.redis_limits import RedisLimits

            store = RedisLimits(REDIS_URL)
        else:
            store = MemoryLimits()
        headers = {"authorization": f"Bearer {key}", "x-request-id": "the-same-id"}
        async with (
            engines(1, time_scale=1.0) as live,
            gateway_for(data, {"chat": [live[0].url]}, None, store) as (_, client),
        ):
            body = chat("take your time", max_tokens=40, ignore_eos=True)
            running = [
                asyncio.create_task(client.post("/v1/chat/completions", json=body, headers=headers))
                for _ in range(2)
            ]
            await wait_for(lambda: live[0].state.runner.num_in_flight == 2)
            third = await client.post("/v1/chat/completions", json=body, headers=headers)
            assert third.status_code == 429, third.text
            assert third.headers["x-request-id"] == "the-same-id"
            assert [(await r).status_code for r in running] == [200, 200]
        if use_redis:
            await store.reset(tenant)  # type: ignore[attr-defined]
            await store.close()

    asyncio.run(main())
