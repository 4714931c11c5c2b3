"""Watching the gateway's routing: when it last sent a request to a replica, when it saw it
healthy. A task scrapes the gateway's `/metrics` every 0.25 s (finer than Prometheus' 1 s, so
"stopped routing within the health window" is measured, not rounded to a scrape) and keeps
each replica's `inhouse_gateway_routing_decisions_total` and `inhouse_gateway_replica_healthy`.
Replicas are the gateway's labels: the replica's index in its pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import httpx

POLL_S = 0.25


@dataclass
class RouteWatch:
    metrics_url: str
    pool: str
    samples: list[tuple[float, dict[str, float], dict[str, float]]] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    def start(self) -> RouteWatch:
        self._task = asyncio.get_running_loop().create_task(self._poll())
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _poll(self) -> None:
        async with httpx.AsyncClient(timeout=2.0) as client:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    text = (await client.get(self.metrics_url)).text
                    self.samples.append((time.perf_counter(), *self._parse(text)))
                await asyncio.sleep(POLL_S)

    def _parse(self, text: str) -> tuple[dict[str, float], dict[str, float]]:
        decisions: dict[str, float] = {}
        healthy: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("#") or f'pool="{self.pool}"' not in line:
                continue
            name, _, rest = line.partition("{")
            replica = _label(rest, "replica")
            if replica is None:
                continue
            value = float(line.rsplit(" ", 1)[1])
            if name == "inhouse_gateway_routing_decisions_total":
                decisions[replica] = decisions.get(replica, 0.0) + value
            elif name == "inhouse_gateway_replica_healthy":
                healthy[replica] = value
        return decisions, healthy

    def last_routed(self, replica: str, after: float, before: float = float("inf")) -> float | None:
        """The last sample time in (after, before) at which the replica's routing count grew."""
        last = None
        prev = None
        for t, decisions, _ in self.samples:
            count = decisions.get(replica, 0.0)
            if prev is not None and count > prev and after < t < before:
                last = t
            prev = count
        return last

    def observed(self, replica: str, after: float, before: float = float("inf")) -> bool:
        """Whether a sample in (after, before) showed the replica (its health gauge, which the
        gateway exports for every replica at every scrape; its routing count appears only once
        something was routed there): without one, "nothing routed there" was not seen, only
        not seen to happen."""
        return any(after < t < before and replica in h for t, _, h in self.samples)

    def first_routed(self, replica: str, after: float) -> float | None:
        prev = None
        for t, decisions, _ in self.samples:
            count = decisions.get(replica, 0.0)
            if prev is not None and count > prev and t > after:
                return t
            prev = count
        return None

    def first_healthy(self, replica: str, after: float) -> float | None:
        for t, _, healthy in self.samples:
            if t > after and healthy.get(replica, 0.0) == 1.0:
                return t
        return None

    def first_unhealthy(self, replica: str, after: float) -> float | None:
        for t, _, healthy in self.samples:
            if t > after and healthy.get(replica, 1.0) == 0.0:
                return t
        return None

    def routed_count(self, replica: str, start: float, end: float) -> float:
        """Routing decisions to the replica between two times (sample resolution)."""
        inside = [d.get(replica, 0.0) for t, d, _ in self.samples if start <= t <= end]
        return max(inside) - min(inside) if inside else 0.0


def _label(labels: str, key: str) -> str | None:
    """The value of `key="..."` in a sample's label text (gateway labels hold no quotes)."""
    start = labels.find(f'{key}="')
    if start < 0:
        return None
    start += len(key) + 2
    return labels[start : labels.find('"', start)]
