"""The gateway: three parts with one job each, and its lifecycle.

    admission (`admission.Admitter`): tenants, keys, limits, priority, the long-prompt gate
    backends (`backends.Backends`): pools, replicas, routing, health, failover accounting
    observation (`observation.Observer`): ids, metrics, the request log, tracing

The request path (`proxy.py`) runs a request through them:

    tenant = key → parse (400) → model (404/403) → text only, count + gate (400) → reserve (429)
    → pool + replica (queue / 503) → proxy with retries before the first byte → settle

`Gateway` composes them, counts the requests in flight and drains; the ASGI layer (`app.py`)
only reads the body and writes what they answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path

from inhouse.gateway.admission import Admitter
from inhouse.gateway.backends import Backends
from inhouse.gateway.discovery import Resolver, resolve_dns
from inhouse.gateway.limits import LimitStore, MemoryLimits
from inhouse.gateway.metrics import GatewayMetrics
from inhouse.gateway.observation import Observer
from inhouse.gateway.tenants import Tenants
from inhouse.spec.endpoints import DiscoveryTarget
from inhouse.spec.gateway import GatewaySpec
from inhouse.spec.stack import StackSpec

log = logging.getLogger("inhouse.gateway")


class Gateway:
    def __init__(
        self,
        stack: StackSpec,
        spec: GatewaySpec,
        pool_urls: Mapping[str, list[str]],
        demo_key: str | None = None,
        limits: LimitStore | None = None,
        log_prompts: bool | None = None,
        base_dir: Path | None = None,
        discovery: Mapping[str, DiscoveryTarget] | None = None,
        resolver: Resolver = resolve_dns,
    ) -> None:
        self.stack = stack
        self.spec = spec
        self.backends = Backends(stack, spec, pool_urls, discovery, resolver)
        # NOTE: in memory a request always settles (its task's `finally`), so its lease never
        # outlives it; the lease only bounds a bug.
        store = limits or MemoryLimits(lease_s=spec.proxy.request_timeout_s)
        self.admission = Admitter(stack, Tenants(spec, demo_key, base_dir), store, self.backends)
        self.observer = Observer(spec, log_prompts)
        # The parts' handles, for the apps and the tests.
        self.pools = self.backends.pools
        self.dispatcher = self.backends.dispatcher
        self.tenants = self.admission.tenants
        self.limits = self.admission.limits
        self.metrics = self.observer.metrics
        self.is_draining = False
        self.num_active = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.metrics.on_render(self._refresh_gauges)

    async def start(self) -> None:
        await self.limits.start()
        await self.backends.start()
        self.observer.start()

    async def stop(self) -> None:
        await self.observer.stop()
        await self.backends.stop()
        await self.limits.close()

    async def drain(self, timeout_s: float) -> int:
        """Refuse new requests; wait up to `timeout_s` for the accepted ones. Returns how many
        were still running at the deadline."""
        self.is_draining = True
        log.info("draining: %d request(s) in flight, up to %.0f s", self.num_active, timeout_s)
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            log.warning("drain timeout with %d request(s) in flight", self.num_active)
        return self.num_active

    def begin(self) -> None:
        self.num_active += 1
        self._idle.clear()

    def end(self) -> None:
        self.num_active -= 1
        if self.num_active == 0:
            self._idle.set()

    @property
    def is_ready(self) -> bool:
        return not self.is_draining and self.backends.has_healthy

    def _refresh_gauges(self, metrics: GatewayMetrics) -> None:
        self.admission.export(metrics)
        self.backends.export(metrics)
