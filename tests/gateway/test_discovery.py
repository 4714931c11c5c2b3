"""A scaled pool's replicas from DNS: fixed slots whose addresses follow what the name resolves
to (appearing, staying, vanishing, reordered), a new address routable only after its 200s, a
failed lookup keeping the last known set; and a gateway in front of engines on several
loopback addresses behind one name (an injected resolver), as a headless Service has them."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from tests.gateway.conftest import (
    LiveEngine,
    chat,
    engine_options,
    free_port,
    gateway_for,
    stack_data,
    start_engine,
    stop_engine,
)
from tests.support.logs import logged

from inhouse.gateway.discovery import PoolDiscovery, assign_slots, engine_url, resolve_dns
from inhouse.gateway.service import Gateway
from inhouse.routing.policies.cache_aware import CacheAware
from inhouse.spec.endpoints import DiscoveryTarget

NAME = "chat-engine.test.svc.cluster.local"


# -- the slots --------------------------------------------------------------------------


def test_addresses_fill_the_lowest_empty_slots_in_the_order_given() -> None:
    assert assign_slots([None, None, None], ["10.0.0.2", "10.0.0.1"]) == (
        ["10.0.0.2", "10.0.0.1", None],
        [],
    )


def test_an_address_that_stays_keeps_its_slot_whatever_order_dns_answers_in() -> None:
    slots = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    assert assign_slots(slots, ["10.0.0.3", "10.0.0.1", "10.0.0.2"]) == (slots, [])


def test_a_vanished_address_empties_its_slot_and_a_new_one_takes_the_lowest_empty() -> None:
    slots = ["10.0.0.1", "10.0.0.2", None, "10.0.0.4"]
    # .2 left (a pod scaled away), .5 and .6 came (a pod replaced, one more scaled up)
    assert assign_slots(slots, ["10.0.0.6", "10.0.0.4", "10.0.0.1", "10.0.0.5"]) == (
        ["10.0.0.1", "10.0.0.6", "10.0.0.5", "10.0.0.4"],
        [],
    )
    assert assign_slots(slots, ["10.0.0.4"]) == ([None, None, None, "10.0.0.4"], [])


def test_addresses_beyond_the_slots_are_left_out_and_repeats_count_once() -> None:
    assert assign_slots(["10.0.0.1", None], ["10.0.0.3", "10.0.0.1", "10.0.0.2", "10.0.0.3"]) == (
        ["10.0.0.1", "10.0.0.3"],
        ["10.0.0.2"],
    )


def test_engine_urls_bracket_ipv6_addresses() -> None:
    assert engine_url("10.1.2.3", 8000) == "http://10.1.2.3:8000"
    assert engine_url("fd00::1", 8000) == "http://[fd00::1]:8000"


def test_the_system_resolver_answers_a_name_once_per_address_ipv4_first() -> None:
    addresses = asyncio.run(resolve_dns("localhost", 8000))
    assert addresses == ["127.0.0.1"]  # not ::1 as well: one replica is one slot


# -- one pool's discovery ---------------------------------------------------------------


class Answers:
    """A resolver whose answer the test sets: a list of addresses, or an exception."""

    def __init__(self, answer: list[str] | Exception) -> None:
        self.answer = answer
        self.num_lookups = 0

    async def __call__(self, host: str, port: int) -> list[str]:
        assert (host, port) == (NAME, 8000)
        self.num_lookups += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return list(self.answer)


def discovery(answers: Answers, changes: list[tuple[int, str | None]]) -> PoolDiscovery:
    target = DiscoveryTarget(dns=NAME, port=8000, max_replicas=3)
    return PoolDiscovery("chat", target, 3, lambda i, a: changes.append((i, a)), answers)


def test_each_lookup_hands_on_only_the_slots_that_changed() -> None:
    async def main() -> None:
        changes: list[tuple[int, str | None]] = []
        answers = Answers(["10.0.0.2", "10.0.0.1"])
        pool = discovery(answers, changes)
        assert await pool.refresh()
        assert changes == [(0, "10.0.0.2"), (1, "10.0.0.1")]
        changes.clear()
        answers.answer = ["10.0.0.1", "10.0.0.2"]  # reordered: nothing changed
        assert await pool.refresh()
        assert changes == []
        answers.answer = ["10.0.0.1", "10.0.0.3"]  # .2 replaced by .3
        assert await pool.refresh()
        assert changes == [(0, "10.0.0.3")]
        changes.clear()
        answers.answer = ["10.0.0.3"]
        assert await pool.refresh()
        assert changes == [(1, None)]
        assert pool.slots == ["10.0.0.3", None, None]

    asyncio.run(main())


@pytest.mark.parametrize(
    "failure",
    [socket.gaierror(socket.EAI_NONAME, "Name or service not known"), TimeoutError(), []],
    ids=["nxdomain", "timeout", "no-address"],
)
def test_a_failed_lookup_keeps_the_known_addresses_and_is_logged_once_per_outage(
    failure: Exception | list[str],
) -> None:
    async def main() -> None:
        changes: list[tuple[int, str | None]] = []
        answers = Answers(["10.0.0.1", "10.0.0.2"])
        pool = discovery(answers, changes)
        await pool.refresh()
        changes.clear()
        answers.answer = failure
        with logged() as messages:
            assert not await pool.refresh()
            assert not await pool.refresh()
            answers.answer = ["10.0.0.2"]
            assert await pool.refresh()
        assert changes == [(0, None)]  # only the answer after the outage changed anything
        assert len(messages) == 2, messages
        assert messages[0].startswith(f"pool chat: cannot resolve {NAME} (")
        assert messages[0].endswith(
            "keeping its 2 known replica address(es) until it resolves again"
        )
        assert messages[1] == f"pool chat: DNS name {NAME} resolves again"

    asyncio.run(main())


def test_a_lookup_still_running_is_waited_on_not_started_again() -> None:
    """A DNS server that does not answer holds each getaddrinfo thread for the resolver's own
    timeouts, well past ours; a new lookup every interval filled the loop's default executor,
    where the long-prompt gate counts big prompts. One lookup runs at a time."""

    async def main() -> None:
        started: list[float] = []
        release = asyncio.Event()

        async def slow(host: str, port: int) -> list[str]:
            started.append(asyncio.get_running_loop().time())
            await release.wait()
            return ["10.0.0.1"]

        target = DiscoveryTarget(dns=NAME, port=8000)
        changes: list[tuple[int, str | None]] = []
        pool = PoolDiscovery(
            "chat", target, 2, lambda i, a: changes.append((i, a)), slow, timeout_s=0.05
        )
        for _ in range(3):
            assert not await pool.refresh()
        assert len(started) == 1, "a lookup was started while the last still ran"
        assert pool.num_failed_lookups == 3
        release.set()
        assert await pool.refresh()  # the same lookup, answered now
        assert len(started) == 1
        assert changes == [(0, "10.0.0.1")] and pool.num_failed_lookups == 0
        assert await pool.refresh()  # done: the next refresh asks again
        assert len(started) == 2
        pool.close()

    asyncio.run(main())


def test_a_lookup_that_hangs_is_a_failure_after_its_timeout() -> None:
    async def main() -> None:
        async def hang(host: str, port: int) -> list[str]:
            await asyncio.sleep(30)
            return []

        target = DiscoveryTarget(dns=NAME, port=8000)
        pool = PoolDiscovery("chat", target, 2, lambda i, a: None, hang, timeout_s=0.05)
        assert not await asyncio.wait_for(pool.refresh(), 5)
        pool.close()

    asyncio.run(main())


# -- a gateway in front of engines behind one name --------------------------------------

HOSTS = ("127.0.0.1", "127.0.0.2", "127.0.0.3")


class Behind:
    """Simulated engines on the same port of three loopback addresses, as a headless Service's
    pods are, and a resolver answering those the test says are in DNS."""

    def __init__(self, port: int, engines: dict[str, LiveEngine]) -> None:
        self.port = port
        self.engines = engines
        self.in_dns: list[str] = []
        self.failure: Exception | None = None  # raised by lookups while set
        self.served: dict[str, int] = dict.fromkeys(engines, 0)
        for host, engine in engines.items():
            self._count(host, engine)

    def _count(self, host: str, engine: LiveEngine) -> None:
        admit = engine.state.admit

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.served[host] += 1
            return admit(*args, **kwargs)

        engine.state.admit = counted  # type: ignore[method-assign]

    async def resolve(self, host: str, port: int) -> list[str]:
        assert (host, port) == (NAME, self.port)
        if self.failure is not None:
            raise self.failure
        return list(self.in_dns)


@contextlib.asynccontextmanager
async def behind_one_name() -> AsyncIterator[Behind]:
    port = free_port()
    live = {host: await start_engine(engine_options(), port, host) for host in HOSTS}
    try:
        yield Behind(port, live)
    finally:
        for engine in live.values():
            await stop_engine(engine)


def scaled(healthy_after: int, policy: str) -> dict[str, Any]:
    # NOTE: probes and lookups 30 s apart: only the gateway's first ones and the test's run.
    health = {"interval_s": 30, "healthy_after": healthy_after}
    gateway = {"health": health, "discovery": {"interval_s": 30}}
    return stack_data(replicas=1, gateway=gateway, routing={"policy": policy})


@contextlib.asynccontextmanager
async def scaled_gateway(
    behind: Behind, healthy_after: int = 1, policy: str = "round_robin"
) -> AsyncIterator[tuple[Gateway, httpx.AsyncClient]]:
    """A gateway whose pool `chat` is scaled (3 slots) behind `NAME`; round robin, so the
    tests can count exactly where requests went."""
    target = DiscoveryTarget(dns=NAME, port=behind.port, max_replicas=3)
    async with gateway_for(
        scaled(healthy_after, policy), {"chat": [f"http://{NAME}:{behind.port}"]},
        discovery={"chat": target}, resolver=behind.resolve,
    ) as (gateway, client):  # fmt: skip
        yield gateway, client


async def send(client: httpx.AsyncClient, n: int, text: str = "Hello") -> None:
    for i in range(n):
        response = await client.post("/v1/chat/completions", json=chat(f"{text} {i}", max_tokens=2))
        assert response.status_code == 200, response.text


def test_a_scaled_pool_routes_to_every_replica_its_name_resolves_to() -> None:
    async def main() -> None:
        async with behind_one_name() as behind:
            behind.in_dns = ["127.0.0.1", "127.0.0.2"]
            async with scaled_gateway(behind) as (gateway, client):
                slots = gateway.pools["chat"].replicas
                assert [(r.url, r.is_healthy, r.is_vacant) for r in slots] == [
                    (f"http://127.0.0.1:{behind.port}", True, False),
                    (f"http://127.0.0.2:{behind.port}", True, False),
                    (f"http://{NAME}:{behind.port}", False, True),  # the third: vacant
                ]
                await send(client, 8)
        # Not all on one pod (as one client connection to the name would put them).
        assert behind.served == {"127.0.0.1": 4, "127.0.0.2": 4, "127.0.0.3": 0}

    asyncio.run(main())


def test_a_new_address_is_routed_to_only_after_its_200s_and_a_vanished_one_no_more() -> None:
    async def main() -> None:
        async with behind_one_name() as behind:
            behind.in_dns = ["127.0.0.1", "127.0.0.2"]
            async with scaled_gateway(behind, healthy_after=2) as (gateway, client):
                pool = gateway.pools["chat"]
                assert [r.is_healthy for r in pool.replicas] == [False, False, False]
                monitor = gateway.backends.monitor
                for replica in pool.replicas[:2]:
                    await monitor.probe(replica)  # the second 200: they join
                kept = pool.replicas[1]
                behind.in_dns = ["127.0.0.3", "127.0.0.2"]  # .1 scaled away, .3 came
                assert await gateway.backends.discoveries["chat"].refresh()
                assert pool.replicas[1] is kept  # .2 stayed: same replica, still healthy
                new = pool.replicas[0]
                assert new.url == f"http://127.0.0.3:{behind.port}" and not new.is_healthy
                await asyncio.sleep(0.2)  # its first probe (at once): one 200 of two
                assert not new.is_healthy
                await send(client, 4)
                assert behind.served == {"127.0.0.1": 0, "127.0.0.2": 4, "127.0.0.3": 0}
                await monitor.probe(new)
                assert new.is_healthy
                await send(client, 4, "Again")
                assert behind.served["127.0.0.3"] == 2 and behind.served["127.0.0.1"] == 0

    asyncio.run(main())


def test_a_request_running_on_a_pod_that_left_dns_is_not_cut() -> None:
    async def main() -> None:
        async with behind_one_name() as behind:
            behind.in_dns = ["127.0.0.1"]
            async with scaled_gateway(behind) as (gateway, client):
                body = chat("A long answer", max_tokens=60, ignore_eos=True, stream=True)
                async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                    assert response.status_code == 200
                    lines = response.aiter_lines()
                    assert (await anext(lines)).startswith("data: ")
                    behind.in_dns = ["127.0.0.2"]  # its pod left the Service mid-stream
                    assert await gateway.backends.discoveries["chat"].refresh()
                    assert gateway.pools["chat"].replicas[0].url.startswith("http://127.0.0.2")
                    rest = [line async for line in lines if line.startswith("data: ")]
                assert rest[-1] == "data: [DONE]"
                assert not any('"error"' in line for line in rest)

    asyncio.run(main())


def test_the_cache_aware_index_of_a_slot_that_got_another_pod_starts_empty() -> None:
    async def main() -> None:
        async with behind_one_name() as behind:
            behind.in_dns = ["127.0.0.1"]
            async with scaled_gateway(behind, policy="cache_aware") as (gateway, client):
                policy = gateway.pools["chat"].policy
                assert isinstance(policy, CacheAware)
                await send(client, 2, "A prompt long enough to fill a block or two " * 8)
                assert policy.indexes[0].num_blocks > 0
                behind.in_dns = ["127.0.0.2"]  # slot 0: another pod
                assert await gateway.backends.discoveries["chat"].refresh()
                assert policy.indexes[0].num_blocks == 0

    asyncio.run(main())


def test_a_dns_outage_keeps_the_pool_serving() -> None:
    async def main() -> None:
        async with behind_one_name() as behind:
            behind.in_dns = ["127.0.0.1", "127.0.0.2"]
            async with scaled_gateway(behind) as (gateway, client):
                behind.failure = socket.gaierror(socket.EAI_AGAIN, "Temporary failure")
                assert not await gateway.backends.discoveries["chat"].refresh()
                assert not await gateway.backends.discoveries["chat"].refresh()
                assert [r.is_healthy for r in gateway.pools["chat"].replicas] == [
                    True,
                    True,
                    False,
                ]
                await send(client, 4)
                # What an operator's alert reads: two lookups in a row failed, two addresses kept.
                text = gateway.metrics.render().decode()
                assert 'inhouse_gateway_discovery_failed_lookups{pool="chat"} 2' in text
                assert 'inhouse_gateway_discovery_addresses{pool="chat"} 2' in text
                behind.failure = None
                assert await gateway.backends.discoveries["chat"].refresh()
                text = gateway.metrics.render().decode()
                assert 'inhouse_gateway_discovery_failed_lookups{pool="chat"} 0' in text
        assert behind.served == {"127.0.0.1": 2, "127.0.0.2": 2, "127.0.0.3": 0}

    asyncio.run(main())


def test_a_pool_whose_name_resolves_at_no_time_has_no_replica_and_answers_503() -> None:
    async def main() -> None:
        async with behind_one_name() as behind:
            behind.in_dns = []
            async with scaled_gateway(behind) as (gateway, client):
                assert all(r.is_vacant for r in gateway.pools["chat"].replicas)
                response = await client.post("/v1/chat/completions", json=chat())
                assert response.status_code == 503
                assert not gateway.is_ready

    asyncio.run(main())


def _gateway(targets: dict[str, DiscoveryTarget], **gateway: Any) -> Gateway:
    from inhouse.spec.gateway import parse_gateway
    from inhouse.spec.stack import parse_stack

    stack = parse_stack(stack_data(replicas=2, gateway=gateway))
    return Gateway(stack, parse_gateway(stack.gateway), {"chat": []}, "k", discovery=targets)


def test_an_entry_without_max_replicas_gets_the_documented_default_and_says_so() -> None:
    target = DiscoveryTarget(dns=NAME, port=8000)  # an endpoints file from an older render
    with logged() as messages:
        gateway = _gateway({"chat": target})
    assert len(gateway.pools["chat"].replicas) == 16  # gateway.discovery.max_replicas
    assert messages == [
        "pool chat: the endpoints file's discovery entry has no max_replicas (an older "
        "render); 16 replica slots (gateway.discovery.max_replicas; render again to match "
        "the autoscaler's maximum)"
    ]
    assert (
        len(_gateway({"chat": target}, discovery={"max_replicas": 4}).pools["chat"].replicas) == 4
    )
    with_max = DiscoveryTarget(dns=NAME, port=8000, max_replicas=5)
    gateway = _gateway({"chat": with_max}, discovery={"max_replicas": 4})
    assert len(gateway.pools["chat"].replicas) == 5  # the file's own wins
    assert gateway.pools["chat"].policy.context.num_replicas == 5


def test_discovery_for_a_pool_the_stack_does_not_have_is_refused() -> None:
    from inhouse.errors import SpecError

    with pytest.raises(SpecError, match="discovery names pool\\(s\\) long, which the stack"):
        _gateway(
            {"chat": DiscoveryTarget(dns=NAME, port=1), "long": DiscoveryTarget(dns=NAME, port=1)}
        )


def test_the_gateway_follows_dns_on_its_own_every_interval() -> None:
    """No test-driven lookups: `discovery.interval_s` apart the gateway resolves the name, a
    new pod is probed and joins, and the one that left is no longer probed."""

    async def main() -> None:
        async with behind_one_name() as behind:
            behind.in_dns = ["127.0.0.1"]
            target = DiscoveryTarget(dns=NAME, port=behind.port, max_replicas=2)
            fast = {"health": {"interval_s": 0.05}, "discovery": {"interval_s": 0.05}}
            data = stack_data(replicas=1, gateway=fast, routing={"policy": "round_robin"})
            async with gateway_for(
                data, {}, discovery={"chat": target}, resolver=behind.resolve
            ) as (gateway, client):
                pool = gateway.pools["chat"]
                old = pool.replicas[0]
                assert old.is_healthy
                behind.in_dns = ["127.0.0.2"]
                for _ in range(100):
                    await asyncio.sleep(0.05)
                    if pool.replicas[0].is_healthy and pool.replicas[0] is not old:
                        break
                assert pool.replicas[0].url == f"http://127.0.0.2:{behind.port}"
                assert pool.replicas[0].is_healthy
                assert old not in gateway.backends.monitor.replicas
                assert not old.is_healthy
                await send(client, 2)
        assert behind.served == {"127.0.0.1": 0, "127.0.0.2": 2, "127.0.0.3": 0}

    asyncio.run(main())
