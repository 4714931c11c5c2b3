"""The stated Redis failure mode (issue 15, defect 3), against a redis-server of the test's own
on an ephemeral port (never the suite's shared one): stopped, stalled (SIGSTOP) and restarted
with its data. Closed: 503 + Retry-After; open: counted here, reconciled; a reserve Redis ran
late holds nothing; leases come back within lease_s; a tenant's limits are whole again
shortly after Redis answers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from tests.gateway.conftest import chat, engines, gateway_for, one_tenant_stack
from tests.gateway.test_failures import wait_for

from inhouse.gateway import limit_failover
from inhouse.gateway.limit_failover import FailoverLimits
from inhouse.gateway.limits import Refusal, Reservation
from inhouse.gateway.redis_limits import RedisLimits
from inhouse.launch.tether import popen
from inhouse.spec.gateway import LimitsSpec, LimitStoreSpec

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="no redis-server")


class OwnRedis:
    """A redis-server on a free port, with its data in `dir` (append-only, so a restart keeps
    what it held, as a production Redis with persistence does)."""

    def __init__(self, directory: Path) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.dir = directory
        self.process: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "",
             "--appendonly", "yes", "--appendfsync", "always", "--dir", str(self.dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock,
            ):
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return
            time.sleep(0.05)
        raise AssertionError("redis-server did not start")

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stall(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
            self.process.wait()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[OwnRedis]:
    redis = OwnRedis(tmp_path)
    redis.start()
    try:
        yield redis
    finally:
        redis.stop()


@pytest.fixture(autouse=True)
def quick_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limit_failover, "PROBE_S", 0.1)


def failover(url: str, mode: str = "closed", lease_s: float = 30.0) -> FailoverLimits:
    spec = LimitStoreSpec(on_store_failure=mode, store_timeout_s=0.3, lease_s=max(3, lease_s))
    return FailoverLimits(RedisLimits(url, lease_s, 0.3), spec, 3600.0)  # type: ignore[arg-type]


def test_closed_a_stopped_redis_gives_503_with_retry_after_and_limits_return(
    own_redis: OwnRedis,
) -> None:
    key, _, data = one_tenant_stack({"rpm": 1000})

    async def main() -> None:
        store = failover(own_redis.url)
        async with (
            engines(1) as live,
            gateway_for(data, {"chat": [live[0].url]}, None, store) as (
                gateway,
                client,
            ),
        ):
            auth = {"authorization": f"Bearer {key}"}
            body = chat(max_tokens=2)
            assert (
                await client.post("/v1/chat/completions", json=body, headers=auth)
            ).status_code == 200
            own_redis.kill()
            started = time.monotonic()
            r = await client.post("/v1/chat/completions", json=body, headers=auth)
            assert r.status_code == 503, r.text
            assert int(r.headers["retry-after"]) >= 1
            assert r.json()["error"]["code"] == 503
            assert time.monotonic() - started < 2.0
            assert "inhouse_gateway_limit_store_up 0.0" in gateway.metrics.render().decode()
            # while it is down no request waits on it
            started = time.monotonic()
            r = await client.post("/v1/chat/completions", json=body, headers=auth)
            assert r.status_code == 503 and time.monotonic() - started < 0.2
            own_redis.start()
            await wait_for(lambda: store.is_up, 5.0)
            r = await client.post("/v1/chat/completions", json=body, headers=auth)
            assert r.status_code == 200, r.text
            assert "inhouse_gateway_limit_store_up 1.0" in gateway.metrics.render().decode()

    asyncio.run(main())


def test_open_counts_here_while_down_and_adds_it_to_redis_once_back(own_redis: OwnRedis) -> None:
    tenant = f"open-{uuid.uuid4().hex[:6]}"
    limits = LimitsSpec(daily_tokens=1000)

    async def main() -> None:
        store = failover(own_redis.url, "open")
        await store.start()
        try:
            first = await store.reserve(tenant, limits, "a", 300)
            assert isinstance(first, Reservation) and not first.is_local
            await store.settle(first, limits, 300)  # Redis counts 300 for today
            own_redis.kill()
            local = await store.reserve(tenant, limits, "b", 400)
            assert isinstance(local, Reservation) and local.is_local
            # today's count here started from what Redis last said (300): 300 + 400 + 400 > 1000
            assert isinstance(await store.reserve(tenant, limits, "c", 400), Refusal)
            await store.settle(local, limits, 250)
            own_redis.start()
            await wait_for(lambda: store.is_up and store.backlog == 0, 5.0)
            assert await store.shared.daily_used(tenant, local.day) == 300 + 250
        finally:
            await store.close()

    asyncio.run(main())


def test_a_reserve_a_stalled_redis_runs_late_holds_no_lease_and_no_tokens(
    own_redis: OwnRedis,
) -> None:
    tenant = f"stall-{uuid.uuid4().hex[:6]}"
    limits = LimitsSpec(max_concurrency=1, daily_tokens=10_000)

    async def main() -> None:
        store = failover(own_redis.url)
        await store.start()
        probe = RedisLimits(own_redis.url)
        try:
            assert isinstance(await store.reserve(tenant, limits, "warm", 1), Reservation)
            await store.settle(Reservation(tenant, "warm", 1, 0), limits, 1)
            own_redis.stall()
            started = time.monotonic()
            refused = await store.reserve(tenant, limits, "late", 500)
            assert isinstance(refused, Refusal) and refused.status == 503
            assert time.monotonic() - started < 3.0  # bounded, not a hang
            own_redis.resume()  # the queued reserve runs now, for nobody
            await wait_for(lambda: store.is_up and store.backlog == 0, 10.0)
            assert await probe.num_leases(tenant) == 0
            day = int(time.time() // 86400)
            assert await probe.daily_used(tenant, day) == 1  # the warm-up's token only
            assert isinstance(await store.reserve(tenant, limits, "next", 1), Reservation)
        finally:
            own_redis.resume()
            await store.close()
            await probe.close()

    asyncio.run(main())


def test_after_a_restart_settles_sent_late_make_the_tenant_whole(own_redis: OwnRedis) -> None:
    """Requests that ended while Redis was down settle once it is back (Redis kept their
    leases across its restart): the tenant is not refused for an hour with nothing running."""
    tenant = f"restart-{uuid.uuid4().hex[:6]}"
    limits = LimitsSpec(max_concurrency=3)

    async def main() -> None:
        store = failover(own_redis.url)
        await store.start()
        try:
            held = [await store.reserve(tenant, limits, f"r{i}", 10) for i in range(3)]
            assert all(isinstance(r, Reservation) for r in held)
            own_redis.kill()
            for reservation in held:  # the requests end; their settles cannot be sent
                await store.settle(reservation, limits, 5)  # type: ignore[arg-type]
            own_redis.start()  # with its data: the three leases are still there
            started = time.monotonic()
            await wait_for(lambda: store.is_up and store.backlog == 0, 10.0)
            again = await store.reserve(tenant, limits, "after", 10)
            assert isinstance(again, Reservation), again
            assert time.monotonic() - started < 10.0
        finally:
            await store.close()

    asyncio.run(main())


def test_a_lease_nobody_settles_expires_within_lease_s_and_running_ones_are_renewed(
    own_redis: OwnRedis,
) -> None:
    tenant = f"lease-{uuid.uuid4().hex[:6]}"
    limits = LimitsSpec(max_concurrency=2)

    async def main() -> None:
        dead = RedisLimits(own_redis.url, lease_s=3.0)  # a gateway that dies: never settles
        store = failover(own_redis.url, lease_s=3.0)
        await store.start()
        try:
            assert isinstance(await dead.reserve(tenant, limits, "orphan", 1), Reservation)
            running = await store.reserve(tenant, limits, "running", 1)
            assert isinstance(running, Reservation)
            assert isinstance(await store.reserve(tenant, limits, "third", 1), Refusal)
            await asyncio.sleep(4.5)  # past lease_s: the orphan expired, "running" was renewed
            assert await store.shared.num_leases(tenant) == 1
            assert isinstance(await store.reserve(tenant, limits, "fourth", 1), Reservation)
            assert isinstance(await store.reserve(tenant, limits, "fifth", 1), Refusal)
        finally:
            await store.close()
            await dead.close()

    asyncio.run(main())


def test_a_settle_sent_twice_settles_once(own_redis: OwnRedis) -> None:
    tenant = f"twice-{uuid.uuid4().hex[:6]}"
    limits = LimitsSpec(daily_tokens=1000)

    async def main() -> None:
        store = RedisLimits(own_redis.url)
        try:
            reservation = await store.reserve(tenant, limits, "x", 500)
            assert isinstance(reservation, Reservation)
            await store.settle(reservation, limits, 100)
            await store.settle(reservation, limits, 100)  # a retry whose first answer was lost
            assert await store.daily_used(tenant, reservation.day) == 100
        finally:
            await store.close()

    asyncio.run(main())


def test_open_a_second_outage_starts_from_what_the_first_one_counted(own_redis: OwnRedis) -> None:
    """Redis flaps: what a tenant used while it was down the first time is in Redis's count,
    and the second outage's count here must start from it, not from what Redis said before
    the first outage (which gave the tenant its first outage's tokens a second time)."""
    tenant = f"flap-{uuid.uuid4().hex[:6]}"
    limits = LimitsSpec(daily_tokens=1000)

    async def main() -> None:
        store = failover(own_redis.url, "open")
        await store.start()
        try:
            first = await store.reserve(tenant, limits, "a", 300)
            assert isinstance(first, Reservation) and not first.is_local
            await store.settle(first, limits, 300)
            own_redis.kill()
            local = await store.reserve(tenant, limits, "b", 600)  # 300 + 600 <= 1000
            assert isinstance(local, Reservation) and local.is_local
            await store.settle(local, limits, 600)
            own_redis.start()
            await wait_for(lambda: store.is_up and store.backlog == 0, 5.0)
            assert await store.shared.daily_used(tenant, local.day) == 900
            own_redis.kill()  # down again before this tenant asked Redis anything
            again = await store.reserve(tenant, limits, "c", 600)  # 900 + 600 > 1000
            assert isinstance(again, Refusal), again
            assert again.reason == "token_budget"
        finally:
            await store.close()

    asyncio.run(main())


def test_open_requests_running_when_redis_fails_hold_their_slots_here(
    own_redis: OwnRedis,
) -> None:
    """A tenant at its concurrency limit when Redis fails is still at it: the requests this
    gateway admitted through Redis, still running, count here too (they ran a second
    max_concurrency beside them), and each frees its slot here when it ends."""
    tenant = f"slots-{uuid.uuid4().hex[:6]}"
    limits = LimitsSpec(max_concurrency=2)

    async def main() -> None:
        store = failover(own_redis.url, "open")
        await store.start()
        try:
            held = [await store.reserve(tenant, limits, f"r{i}", 10) for i in range(2)]
            assert all(isinstance(r, Reservation) and not r.is_local for r in held)
            own_redis.kill()
            refused = await store.reserve(tenant, limits, "c", 10)
            assert isinstance(refused, Refusal) and refused.reason == "rate_limit", refused
            await store.settle(held[0], limits, 5)  # type: ignore[arg-type]
            local = await store.reserve(tenant, limits, "d", 10)
            assert isinstance(local, Reservation) and local.is_local
            assert isinstance(await store.reserve(tenant, limits, "e", 10), Refusal)
        finally:
            await store.close()

    asyncio.run(main())


def test_open_slots_held_here_when_redis_returns_are_held_in_redis_until_they_settle(
    own_redis: OwnRedis,
) -> None:
    """Requests admitted in this gateway's memory while Redis was down still run when it
    answers again: Redis must count their slots (another gateway, asking Redis only, is at the
    limit), and free each one when its request ends."""
    tenant = f"back-{uuid.uuid4().hex[:6]}"
    limits = LimitsSpec(max_concurrency=2)

    async def main() -> None:
        store = failover(own_redis.url, "open")
        await store.start()
        other = RedisLimits(own_redis.url)  # a second gateway, which never counted here
        try:
            own_redis.kill()
            local = [await store.reserve(tenant, limits, f"l{i}", 10) for i in range(2)]
            assert all(isinstance(r, Reservation) and r.is_local for r in local), local
            own_redis.start()
            await wait_for(lambda: store.is_up and store.backlog == 0, 5.0)
            assert await store.shared.num_leases(tenant) == 2
            refused = await other.reserve(tenant, limits, "o1", 10)
            assert isinstance(refused, Refusal) and refused.reason == "rate_limit", refused
            assert isinstance(await store.reserve(tenant, limits, "g1", 10), Refusal)
            await store.settle(local[0], limits, 5)  # type: ignore[arg-type]
            await wait_for(lambda: store.backlog == 0, 5.0)
            assert await store.shared.num_leases(tenant) == 1
            assert isinstance(await other.reserve(tenant, limits, "o2", 10), Reservation)
            assert isinstance(await store.reserve(tenant, limits, "g2", 10), Refusal)
        finally:
            await store.close()
            await other.close()

    asyncio.run(main())


@pytest.mark.parametrize("side", ["behind", "ahead"])
def test_open_counts_todays_tokens_on_redis_s_day_whatever_this_gateway_s_clock_says(
    own_redis: OwnRedis, monkeypatch: pytest.MonkeyPatch, side: str
) -> None:
    """This gateway's clock is a minute on the other side of a UTC midnight from Redis's (its
    host is behind, or ahead). A tenant who spent its budget of Redis's day before Redis failed
    has spent it here too: the count here runs on Redis's day, so neither a day begun early
    (ahead) nor yesterday's unspent budget (behind) gives it a second budget."""
    tenant = f"day-{uuid.uuid4().hex[:6]}"
    limits = LimitsSpec(daily_tokens=1000)
    with redis.Redis.from_url(own_redis.url) as client:
        seconds, micros = client.time()
    redis_now = seconds + micros / 1e6
    redis_day_start = redis_now - redis_now % 86400
    # this gateway's clock: a minute before Redis's day began, or a minute after it ended
    gateway_now = redis_day_start - 60 if side == "behind" else redis_day_start + 86400 + 60
    skew_s = gateway_now - time.time()
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + skew_s)

    async def main() -> None:
        store = failover(own_redis.url, "open")
        await store.start()
        try:
            first = await store.reserve(tenant, limits, "a", 900)
            assert isinstance(first, Reservation) and not first.is_local
            assert first.day == int(redis_now // 86400)
            await store.settle(first, limits, 900)
            own_redis.kill()
            again = await store.reserve(tenant, limits, "b", 900)  # 900 + 900 > 1000
            assert isinstance(again, Refusal), again
            assert again.reason == "token_budget"
            # it may retry when Redis's day ends, not when this gateway's does
            redis_day_left_s = redis_day_start + 86400 - redis_now
            assert abs(again.retry_after_s - redis_day_left_s) < 30, again
        finally:
            await store.close()

    asyncio.run(main())


def test_running_requests_whose_leases_lapsed_while_this_gateway_could_not_renew_hold_again(
    own_redis: OwnRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests admitted through Redis run through an outage longer than lease_s, so nobody
    renewed their leases, and another gateway's admission swept them out of Redis before this
    gateway answered again (a renewal only extends leases that are still there): once this
    gateway reaches Redis, their slots are leased again before it admits anyone."""
    monkeypatch.setattr(limit_failover, "PROBE_S", 3600.0)  # the test runs maintain_once
    tenant = f"lapsed-{uuid.uuid4().hex[:6]}"
    limits = LimitsSpec(max_concurrency=2)

    async def main() -> None:
        store = failover(own_redis.url, "open", lease_s=3.0)
        await store.start()
        other = RedisLimits(own_redis.url, lease_s=3.0)
        try:
            held = [await store.reserve(tenant, limits, f"r{i}", 10) for i in range(2)]
            assert all(isinstance(r, Reservation) and not r.is_local for r in held)
            own_redis.kill()
            assert isinstance(await store.reserve(tenant, limits, "x", 10), Refusal)  # full
            assert not store.is_up
            await asyncio.sleep(3.5)  # past lease_s: Redis's copy of the leases lapsed
            own_redis.start()
            assert isinstance(await other.reserve(tenant, limits, "o0", 10), Reservation)
            await store.maintain_once()  # this gateway reaches Redis again
            assert store.is_up and store.backlog == 0
            assert await store.shared.num_leases(tenant) == 3  # r0, r1 and o0
            assert isinstance(await other.reserve(tenant, limits, "o1", 10), Refusal)
            await store.settle(held[0], limits, 5)  # type: ignore[arg-type]
            await store.settle(held[1], limits, 5)  # type: ignore[arg-type]
            assert isinstance(await other.reserve(tenant, limits, "o2", 10), Reservation)
        finally:
            await store.close()
            await other.close()

    asyncio.run(main())
