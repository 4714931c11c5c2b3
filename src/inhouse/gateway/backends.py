"""The gateway's engines: each pool's replicas, its routing policy and token counter, the
dispatcher that places requests on them, their health, and what a failed attempt costs a
replica. Admission asks it which pool serves a model; the request path asks it for a replica
and hands the replica back.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from inhouse.errors import SpecError
from inhouse.gateway.dispatch import (
    HASHING_POLICIES,
    Dispatcher,
    Placement,
    PoolState,
    build_policy,
    running_capacity,
)
from inhouse.gateway.metrics import GatewayMetrics
from inhouse.gateway.prompt import ROUTER_BLOCK_TOKENS, LocalCounter, RemoteCounter, TokenCounter
from inhouse.gateway.replicas import HealthMonitor, Replica
from inhouse.openai_errors import ApiError
from inhouse.spec.gateway import GatewaySpec, TierSpec
from inhouse.spec.stack import PoolSpec, StackSpec
from inhouse.tokenizer import SimpleTokenizer, load_tokenizer

log = logging.getLogger("inhouse.gateway")


class Backends:
    """Pools, replicas, routing, health and failover accounting; nothing about tenants."""

    def __init__(
        self, stack: StackSpec, spec: GatewaySpec, pool_urls: Mapping[str, list[str]]
    ) -> None:
        self.stack = stack
        self.spec = spec
        self.pools: dict[str, PoolState] = {}
        replicas: list[Replica] = []
        for pool in stack.pools:
            state = self._build_pool(pool, list(pool_urls.get(pool.name, ())))
            self.pools[pool.name] = state
            replicas.extend(state.replicas)
        self.dispatcher = Dispatcher(stack, self.pools, spec.health.scrape_max_age_s)
        self.monitor = HealthMonitor(replicas, spec.health, on_join=self._on_join)

    def _build_pool(self, pool: PoolSpec, urls: list[str]) -> PoolState:
        if len(urls) != pool.replicas:
            raise SpecError(
                f"pool {pool.name!r}: {pool.replicas} replicas but {len(urls)} engine URLs; "
                "give --endpoints (written by `inhouse up`) or the pool's `urls`"
            )
        capacity = running_capacity(pool)
        proxy = self.spec.proxy
        max_inflight = proxy.max_inflight_per_replica or (capacity + pool.saturation_waiting)
        replicas = [
            Replica(pool.name, i, url, capacity, proxy.connect_timeout_s, proxy.upstream_idle_s)
            for i, url in enumerate(urls)
        ]
        return PoolState(
            pool,
            replicas,
            build_policy(pool, ROUTER_BLOCK_TOKENS),
            max_inflight,
            self._counter(pool),
            ROUTER_BLOCK_TOKENS,
            pool.routing.policy in HASHING_POLICIES,
        )

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
            healthy = [r for r in pool.replicas if r.is_healthy] or pool.replicas
            replica = min(healthy, key=lambda r: r.num_inflight)
            response = await self.monitor.client.post(replica.url + path, json=payload)
            if response.status_code != 200:
                raise ApiError(response.status_code, response.text[:500], param="prompt")
            return response.json()

        return post

    def _on_join(self, replica: Replica) -> None:
        self.dispatcher.drain(self.pools[replica.pool])

    @property
    def has_healthy(self) -> bool:
        return any(r.is_healthy for pool in self.pools.values() for r in pool.replicas)

    async def place(
        self, pool: PoolState, view: Any, tier: TierSpec, pool_reason: str, exclude: frozenset[int]
    ) -> Placement:
        placement = await self.dispatcher.place(pool, view, tier, exclude)
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
        for pool in self.pools.values():
            metrics.queue_depth.child(pool.name).set(pool.num_queued)
            indexes = getattr(pool.policy, "indexes", None)
            for replica in pool.replicas:
                metrics.healthy.child(pool.name, replica.label).set(int(replica.is_healthy))
                metrics.inflight.child(pool.name, replica.label).set(replica.num_inflight)
                if indexes:
                    blocks = indexes[replica.index].num_blocks
                    metrics.index_blocks.child(pool.name, replica.label).set(blocks)
