"""Engine replicas as the gateway sees them: health, live load, scraped engine state.

* Health: a replica is routable only after `healthy_after` consecutive `/health` 200s (a
  loading model answers 503, so it is not ready). It stops being routable at once when its
  `/health` answers anything but 200 (a draining or dead engine says so: it is believed), and
  after `unhealthy_after` consecutive failures otherwise — probes that time out or find no
  one listening, and real requests refused, reset or answered 500, 502 or 504 before their
  first byte (no answer may be the network's fault, so one of them must not flap a replica).
  A request answered 503 ("busy") is retried elsewhere and not counted (`Backends.failed`).
  Probes keep running, so recovery brings it back.
* Load: `num_inflight` is the gateway's own count, changed at dispatch and at the end of every
  request, never a scraped figure (the root of the hot-spotting bugs in routers that counted
  late). The engine's `vllm:num_requests_waiting` and `vllm:kv_cache_usage_perc` are scraped
  every `scrape_interval_s` and trusted for `scrape_max_age_s`; older values count as zero
  (neither a thundering herd onto a replica whose scrape went stale nor a fail-closed outage).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx

from inhouse.http1.upstream import UpstreamPool
from inhouse.metric_names import replica_label
from inhouse.routing.view import ReplicaView
from inhouse.spec.gateway import HealthSpec

log = logging.getLogger("inhouse.gateway")


class Replica:
    """One engine replica of a pool. Mutated only from the event loop.

    `is_vacant`: a scaled pool's slot with no address now (`gateway.discovery`); its `url` is
    the pool's DNS name, a placeholder: it is never probed, never healthy, never routed to."""

    def __init__(
        self,
        pool: str,
        index: int,
        url: str,
        running_capacity: int,
        connect_timeout_s: float,
        idle_s: float = 60.0,
        is_vacant: bool = False,
    ) -> None:
        parts = urlsplit(url)
        assert parts.hostname, f"engine URL {url!r} has no host"
        self.pool = pool
        self.index = index
        self.label = replica_label(index)
        self.url = url.rstrip("/")
        self.upstream = UpstreamPool(parts.hostname, parts.port or 80, connect_timeout_s, idle_s)
        self.path_prefix = parts.path.rstrip("/")
        self.is_vacant = is_vacant
        self.running_capacity = running_capacity
        self.is_healthy = False
        self.num_inflight = 0
        self.prefilling: dict[int, int] = {}  # tier priority -> requests before first token
        self.num_failures = 0
        self.num_successes = 0
        self.scraped_waiting = 0
        self.scraped_kv_usage = 0.0
        self.scraped_at = -1e18
        self.max_model_len: int | None = None  # what `/v1/models` said at the last 200 probe

    def num_waiting(self, now: float, max_age_s: float) -> int:
        """Requests queued in the engine: the scrape while fresh, and at least what exceeds
        its running batch by the gateway's own in-flight count (a live estimate)."""
        over = self.num_inflight - self.running_capacity
        if now - self.scraped_at <= max_age_s and self.scraped_waiting > over:
            return self.scraped_waiting
        return over if over > 0 else 0

    def view(self, now: float, max_age_s: float, is_eligible: bool = True) -> ReplicaView:
        """What the routing policy sees; a replica that is not `is_eligible` (at its cap,
        excluded, held back) is shown as not healthy, so the policy passes it over."""
        fresh = now - self.scraped_at <= max_age_s
        return ReplicaView(
            self.index,
            self.num_inflight,
            self.num_waiting(now, max_age_s),
            self.scraped_kv_usage if fresh else 0.0,
            self.is_healthy and is_eligible,
        )

    def record_success(self, health: HealthSpec) -> bool:
        """A passed probe or request; True when the replica (re)joins."""
        self.num_failures = 0
        self.num_successes += 1
        if not self.is_healthy and self.num_successes >= health.healthy_after:
            self.is_healthy = True
            return True
        return False

    def record_failure(self, health: HealthSpec, is_explicit: bool = False) -> bool:
        """A failed probe or request; True when the replica leaves: at once when `is_explicit`
        (its `/health` answered, and not 200), after `unhealthy_after` in a row otherwise."""
        self.num_successes = 0
        self.num_failures += 1
        threshold = 1 if is_explicit else health.unhealthy_after
        if self.is_healthy and self.num_failures >= threshold:
            self.is_healthy = False
            return True
        return False


def parse_engine_metrics(text: str) -> tuple[int, float]:
    """(requests waiting, KV usage) from a vLLM `/metrics` page, summed over engines."""
    waiting = 0.0
    kv = 0.0
    num_kv = 0
    for line in text.splitlines():
        if line.startswith("vllm:num_requests_waiting{") or line.startswith(
            "vllm:num_requests_waiting "
        ):
            waiting += float(line.rsplit(" ", 1)[1])
        elif line.startswith("vllm:kv_cache_usage_perc"):
            kv += float(line.rsplit(" ", 1)[1])
            num_kv += 1
    return int(waiting), (kv / num_kv if num_kv else 0.0)


class HealthMonitor:
    """Probes `/health`, scrapes `/metrics` and reads `/v1/models` (max_model_len, at every 200
    probe: the engine may have restarted with another) for every replica it watches, on one
    httpx client, as background tasks of the gateway's loop. A scaled pool's replicas come and
    go (`watch`, `unwatch`); vacant slots are not watched."""

    def __init__(
        self,
        replicas: list[Replica],
        health: HealthSpec,
        on_join: Callable[[Replica], None] | None = None,
    ) -> None:
        self.replicas = [r for r in replicas if not r.is_vacant]
        self.health = health
        self._on_join = on_join
        self._client: httpx.AsyncClient | None = None
        self._loops: dict[Replica, tuple[asyncio.Task[None], ...]] = {}
        self._num_slots = len(replicas)  # vacant ones too: connections for the most it may watch
        self._is_started = False

    async def start(self) -> None:
        limits = httpx.Limits(max_connections=max(8, 2 * self._num_slots))
        self._client = httpx.AsyncClient(timeout=self.health.timeout_s, limits=limits)
        await asyncio.gather(*(self.probe(r) for r in self.replicas))
        for replica in self.replicas:
            self._start_loops(replica, is_probed=True)
        self._is_started = True

    def watch(self, replica: Replica) -> None:
        """Probe and scrape `replica` from now on (a new address in a scaled pool's slot): a
        first probe at once, so it can join as soon as its engine answers 200."""
        assert not replica.is_vacant, "a vacant slot has nothing to probe"
        self.replicas.append(replica)
        if self._is_started:
            self._start_loops(replica, is_probed=False)

    def unwatch(self, replica: Replica) -> None:
        """Stop probing and scraping `replica` (its address left DNS) and close its idle
        connections; its requests in flight run on (the engine's own drain ends them)."""
        self.replicas.remove(replica)
        for task in self._loops.pop(replica, ()):
            task.cancel()
        replica.upstream.close()

    def _start_loops(self, replica: Replica, is_probed: bool) -> None:
        loop = asyncio.get_running_loop()
        self._loops[replica] = (
            loop.create_task(self._probe_loop(replica, is_probed)),
            loop.create_task(self._scrape_loop(replica)),
        )

    async def stop(self) -> None:
        tasks = [task for loops in self._loops.values() for task in loops]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._loops.clear()
        self._is_started = False
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        for replica in self.replicas:
            replica.upstream.close()
        await asyncio.sleep(0)  # let the closed transports release their sockets

    @property
    def client(self) -> httpx.AsyncClient:
        assert self._client is not None, "HealthMonitor.start() first"
        return self._client

    async def probe(self, replica: Replica) -> None:
        """One `/health` probe: 200 counts towards joining; any other answer takes a routable
        replica out at once; no answer (timeout, refused, reset) counts towards
        `unhealthy_after`."""
        status: int | None = None  # None: no answer
        with contextlib.suppress(httpx.HTTPError):
            status = (await self.client.get(replica.url + "/health")).status_code
        if status == 200:
            await self._read_models(replica)
            if replica.record_success(self.health):
                log.info("replica %s/%s joined (%s)", replica.pool, replica.index, replica.url)
                if self._on_join is not None:
                    self._on_join(replica)
        elif replica.record_failure(self.health, is_explicit=status is not None):
            why = "health checks fail" if status is None else f"answered {status}"
            log.warning("replica %s/%s removed: %s", replica.pool, replica.index, why)

    async def _read_models(self, replica: Replica) -> None:
        """The context length the engine reports (the shortest of its models'), read at every
        200 probe; an answer that does not parse keeps the last one.

        NOTE: every probe, not only after a failure: an engine restarted with another
        `--max-model-len` between two probes (a fast restart, a pod replaced at the same
        address) fails none, and its old length made the gateway refuse what it would serve,
        or send what it refuses. A restart leaves no other signal every engine gives (vLLM's
        `created` is the time of the request; a connection reset is hidden behind a mesh
        proxy). The read costs what the probe does (measured, docs/gateway.md)."""
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, TypeError):
            response = await self.client.get(replica.url + "/v1/models")
            response.raise_for_status()
            cards = response.json()["data"]
            lengths = [int(c["max_model_len"]) for c in cards if c.get("max_model_len")]
            replica.max_model_len = min(lengths) if lengths else None

    async def _probe_loop(self, replica: Replica, is_probed: bool) -> None:
        if not is_probed:
            await self.probe(replica)
        while True:
            await asyncio.sleep(self.health.interval_s)
            await self.probe(replica)

    async def _scrape_loop(self, replica: Replica) -> None:
        while True:
            if replica.is_healthy:
                with contextlib.suppress(httpx.HTTPError, ValueError, IndexError):
                    response = await self.client.get(replica.url + "/metrics")
                    if response.status_code == 200:
                        waiting, kv = parse_engine_metrics(response.text)
                        replica.scraped_waiting, replica.scraped_kv_usage = waiting, kv
                        replica.scraped_at = time.monotonic()
            await asyncio.sleep(self.health.scrape_interval_s)
