"""The gateway's engines: each pool's replicas, its routing policy and token counter, the
dispatcher that places requests on them, their health, and what a failed attempt costs a
replica. Admission asks it which pool serves a model; the request path asks it for a replica
and hands the replica back. A scaled pool's replicas come from DNS (`discovery.py`): fixed
slots whose addresses change.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from inhouse.errors import SpecError
from inhouse.gateway.discovery import PoolDiscovery, Resolver, engine_url, resolve_dns
from inhouse.gateway.dispatch import (
    HASHING_POLICIES,
    Dispatcher,
    Placement,
    PoolState,
    build_policy,
    running_capacity,
)
from inhouse.gateway.metrics import GatewayMetrics
from inhouse.gateway.prompt import (
    ROUTER_BLOCK_TOKENS,
    LocalCounter,
    RemoteCounter,
    TokenCounter,
    nested_too_deep,
)
from inhouse.gateway.replicas import HealthMonitor, Replica
from inhouse.openai_errors import ApiError
from inhouse.spec.endpoints import DiscoveryTarget
from inhouse.spec.gateway import GatewaySpec, TierSpec
from inhouse.spec.stack import PoolSpec, StackSpec
from inhouse.tokenizer import SimpleTokenizer, load_tokenizer

log = logging.getLogger("inhouse.gateway")


class Backends:
    """Pools, replicas, routing, health and failover accounting; nothing about tenants.

    `discovery` names the scaled pools (the endpoints file's `discovery`): their replicas
    come from resolving each one's DNS name with `resolver`, and their `pool_urls` entry is
    not used."""

    def __init__(
        self,
        stack: StackSpec,
        spec: GatewaySpec,
        pool_urls: Mapping[str, list[str]],
        discovery: Mapping[str, DiscoveryTarget] | None = None,
        resolver: Resolver = resolve_dns,
    ) -> None:
        self.stack = stack
        self.spec = spec
        self.pools: dict[str, PoolState] = {}
        self.discoveries: dict[str, PoolDiscovery] = {}
        discovery = discovery or {}
        unknown = sorted(set(discovery) - {pool.name for pool in stack.pools})
        if unknown:
            raise SpecError(
                f"endpoints: discovery names pool(s) {', '.join(unknown)}, which the stack does "
                f"not have; pools: {', '.join(p.name for p in stack.pools)} (render the "
                "endpoints from this stack)"
            )
        replicas: list[Replica] = []
        for pool in stack.pools:
            target = discovery.get(pool.name)
            if target is None:
                state = self._build_pool(pool, list(pool_urls.get(pool.name, ())))
            else:
                state = self._build_scaled_pool(pool, target, resolver)
            self.pools[pool.name] = state
            replicas.extend(state.replicas)
        self.dispatcher = Dispatcher(stack, self.pools, spec.health.scrape_max_age_s)
        self.monitor = HealthMonitor(replicas, spec.health, on_join=self._on_join)
        self._tasks: list[asyncio.Task[None]] = []

    def _build_pool(self, pool: PoolSpec, urls: list[str]) -> PoolState:
        if len(urls) != pool.replicas:
            raise SpecError(
                f"pool {pool.name!r}: {pool.replicas} replicas but {len(urls)} engine URLs; "
                "give --endpoints (written by `inhouse up`) or the pool's `urls`"
            )
        proxy = self.spec.proxy
        capacity = running_capacity(pool)
        replicas = [
            Replica(pool.name, i, url, capacity, proxy.connect_timeout_s, proxy.upstream_idle_s)
            for i, url in enumerate(urls)
        ]
        return self._pool_state(pool, replicas)

    def _build_scaled_pool(
        self, pool: PoolSpec, target: DiscoveryTarget, resolver: Resolver
    ) -> PoolState:
        """A pool of vacant slots, filled from DNS once `start` resolves its name."""
        num_slots = target.max_replicas
        if num_slots is None:
            num_slots = max(pool.replicas, self.spec.discovery.max_replicas)
            log.warning(
                "pool %s: the endpoints file's discovery entry has no max_replicas (an older "
                "render); %d replica slots (gateway.discovery.max_replicas; render again to "
                "match the autoscaler's maximum)",
                pool.name,
                num_slots,
            )
        state = self._pool_state(
            pool, [self._slot(pool, i, None, target) for i in range(num_slots)]
        )

        def on_change(index: int, address: str | None) -> None:
            self._move_slot(state, target, index, address)

        self.discoveries[pool.name] = PoolDiscovery(
            pool.name, target, num_slots, on_change, resolver
        )
        return state

    def _slot(
        self, pool: PoolSpec, index: int, address: str | None, target: DiscoveryTarget
    ) -> Replica:
        """A scaled pool's replica at `address`, or its vacant slot (None)."""
        proxy = self.spec.proxy
        url = engine_url(address or target.dns, target.port)
        return Replica(
            pool.name,
            index,
            url,
            running_capacity(pool),
            proxy.connect_timeout_s,
            proxy.upstream_idle_s,
            is_vacant=address is None,
        )

    def _move_slot(
        self, pool: PoolState, target: DiscoveryTarget, index: int, address: str | None
    ) -> None:
        """Slot `index` of a scaled pool has another address (or none): a new replica there,
        unhealthy until its probes pass, and the policy forgets the engine that was there."""
        old = pool.replicas[index]
        new = self._slot(pool.spec, index, address, target)
        pool.replicas[index] = new
        if not old.is_vacant:
            old.is_healthy = False  # its requests in flight end on it; none start there
            self.monitor.unwatch(old)
            log.info(
                "replica %s/%s left: %s no longer in DNS (%d request(s) in flight run on)",
                pool.name, index, old.url, old.num_inflight,
            )  # fmt: skip
        if not new.is_vacant:
            self.monitor.watch(new)
            log.info("replica %s/%s: %s from DNS, probing", pool.name, index, new.url)
        pool.policy.forget_replica(index)

    def _pool_state(self, pool: PoolSpec, replicas: list[Replica]) -> PoolState:
        proxy = self.spec.proxy
        max_inflight = proxy.max_inflight_per_replica or (
            running_capacity(pool) + pool.saturation_waiting
        )
        return PoolState(
            pool,
            replicas,
            build_policy(pool, ROUTER_BLOCK_TOKENS, len(replicas)),
            max_inflight,
            self._counter(pool),
            ROUTER_BLOCK_TOKENS,
            pool.routing.policy in HASHING_POLICIES,
        )

    async def start(self) -> None:
        """Resolve the scaled pools' names, probe every replica, then keep both going."""
        await asyncio.gather(*(d.refresh() for d in self.discoveries.values()))
        await self.monitor.start()
        loop = asyncio.get_running_loop()
        interval_s = self.spec.discovery.interval_s
        self._tasks = [loop.create_task(d.run(interval_s)) for d in self.discoveries.values()]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        for discovery in self.discoveries.values():
            discovery.close()
        await self.monitor.stop()

    def _counter(self, pool: PoolSpec) -> TokenCounter:
        """How the pool's prompts are counted: the model's own tokenizer when it is on disk."""
        if (Path(pool.model) / "tokenizer.json").is_file():
            # NOTE: the model's own tokenizer, chat rendered with the ChatML-style template of
            # the simulated engine: exact for completions, close for chat on a real vLLM.
            return LocalCounter(load_tokenizer(pool.model, 1 << 17))
        if self.stack.engine_of(pool) == "simulated":
            return LocalCounter(SimpleTokenizer())
        return RemoteCounter(self._poster(pool.name))

    def _poster(self, pool_name: str) -> Any:
        async def post(path: str, payload: dict[str, Any]) -> Any:
            pool = self.pools[pool_name]
            healthy = (
                [r for r in pool.replicas if r.is_healthy]
                or [r for r in pool.replicas if not r.is_vacant]
                or pool.replicas
            )
            replica = min(healthy, key=lambda r: r.num_inflight)
            try:
                response = await self.monitor.client.post(replica.url + path, json=payload)
                answer = response.json() if response.status_code == 200 else None
            except RecursionError:
                raise nested_too_deep() from None
            except (httpx.HTTPError, ValueError):
                # No replica to count the prompt: the pool is down (or not an engine), the
                # client's error is the pool's, not a 500.
                raise ApiError(
                    503,
                    f"No replica of pool {pool_name!r} could count the prompt "
                    f"({path}). Please try again later.",
                    reason="no_replica",
                    retry_after_s=5.0,
                ) from None
            if answer is None:
                raise engine_refusal(response.status_code, response.content)
            return answer

        return post

    def _on_join(self, replica: Replica) -> None:
        """A replica (re)joins routing: the router forgets what it believed the replica held.
        NOTE: one that left may have restarted with an empty cache (the router cannot tell);
        an index that still claimed its prompts sent their sessions back as cache hits priced
        as cheap prefills, piling recomputes onto the cold replica. A replica that only missed
        probes loses its hits until the index learns them again, a smaller cost."""
        pool = self.pools[replica.pool]
        pool.policy.forget_replica(replica.index)
        self.dispatcher.drain(pool)

    @property
    def has_healthy(self) -> bool:
        return any(r.is_healthy for pool in self.pools.values() for r in pool.replicas)

    async def place(
        self,
        pool: PoolState,
        view: Any,
        tier: TierSpec,
        pool_reason: str,
        exclude: frozenset[int],
        holds_back: bool = True,
    ) -> Placement:
        placement = await self.dispatcher.place(pool, view, tier, exclude, holds_back)
        placement.pool_reason = pool_reason
        return placement

    def release(self, placement: Placement) -> None:
        self.dispatcher.release(placement)

    def first_token(self, placement: Placement) -> None:
        placement.replica.num_failures = 0
        self.dispatcher.first_token(placement)

    def failed(self, placement: Placement, error: Exception) -> None:
        """An attempt that failed before the client saw a byte: let go of it (the next attempt
        goes elsewhere) and count it against the replica, unless the replica answered 503.

        A 503 is the engine saying it will not take the request now — busy (its waiting queue
        is full), loading or draining — and it is alive enough to say so. Counted as a health
        failure, two busy answers in a row would take a full but healthy replica out of
        routing, putting its load on the others, which fill and go out in turn: an overload
        turned into an outage. Whether it is draining or dead is for its `/health` to say,
        which the probes ask every `interval_s`."""
        replica = placement.replica
        if getattr(error, "status", None) != 503 and replica.record_failure(self.spec.health):
            log.warning("replica %s/%s removed: %s", replica.pool, replica.index, error)
        self.dispatcher.release(placement)

    def export(self, metrics: GatewayMetrics) -> None:
        """The pools' gauges, at each scrape."""
        for name, discovery in self.discoveries.items():
            metrics.discovery_addresses.child(name).set(discovery.num_addresses)
            metrics.discovery_failed.child(name).set(discovery.num_failed_lookups)
        for pool in self.pools.values():
            metrics.queue_depth.child(pool.name).set(pool.num_queued)
            indexes = getattr(pool.policy, "indexes", None)
            for replica in pool.replicas:
                metrics.healthy.child(pool.name, replica.label).set(int(replica.is_healthy))
                metrics.inflight.child(pool.name, replica.label).set(replica.num_inflight)
                if indexes:
                    blocks = indexes[replica.index].num_blocks
                    metrics.index_blocks.child(pool.name, replica.label).set(blocks)


def engine_refusal(status: int, content: bytes) -> ApiError:
    """An engine's refusal of a request the gateway sent for the client (its `/tokenize`),
    as the client's error: the engine's own message and `param` when it gave them in
    OpenAI's shape, else (at most 500 characters of) its text."""
    message, param, kind = content[:500].decode("utf-8", "replace"), None, None
    with contextlib.suppress(ValueError, AttributeError, TypeError, KeyError, RecursionError):
        error = json.loads(content)["error"]
        if isinstance(error.get("message"), str):
            message = error["message"]
            param = error.get("param") if isinstance(error.get("param"), str) else None
            kind = error.get("type") if isinstance(error.get("type"), str) else None
    if status >= 500:  # the engine failed, not the request: retry, as for a generation
        return ApiError(502, f"The engine failed to count the prompt: {message}",
                        reason="upstream_error", retry_after_s=1.0)  # fmt: skip
    return ApiError(status, message, param=param, error_type=kind)
