"""The gateway's Prometheus metrics: exactly `inhouse.render.metric_names.GATEWAY_METRICS` (the
names, types, labels and buckets the rendered rules and dashboards use), plus the few extra
series listed in `EXTRA_METRICS`.

Label children are cached in plain dicts, so the hot path pays a dict lookup and an `inc()`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from inhouse.render.metric_names import GATEWAY_METRICS, LOOP_LAG_PERIOD_S, MetricDef

CONTENT_TYPE = CONTENT_TYPE_LATEST


EXTRA_METRICS: tuple[MetricDef, ...] = (
    MetricDef(
        "inhouse_gateway_retries_total",
        "counter",
        ("pool", "replica"),
        "Attempts that failed before the first byte on a replica and were retried elsewhere.",
    ),
    MetricDef(
        "inhouse_gateway_stream_errors_total",
        "counter",
        ("pool", "replica"),
        "Streams the engine broke off after the first byte (the client got an error event).",
    ),
    MetricDef(
        "inhouse_gateway_inflight_requests",
        "gauge",
        ("pool", "replica"),
        "Requests the gateway has dispatched to a replica that have not finished.",
    ),
)


def _build(registry: CollectorRegistry, spec: MetricDef) -> Any:
    name = spec.name.removesuffix("_total") if spec.kind == "counter" else spec.name
    if spec.kind == "counter":
        return Counter(name, spec.help, spec.labels, registry=registry)
    if spec.kind == "gauge":
        return Gauge(name, spec.help, spec.labels, registry=registry)
    return Histogram(name, spec.help, spec.labels, buckets=spec.buckets, registry=registry)


class _Family:
    """A metric family with its label children cached by label tuple."""

    __slots__ = ("_children", "_metric")

    def __init__(self, metric: Any) -> None:
        self._metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def child(self, *labels: str) -> Any:
        found = self._children.get(labels)
        if found is None:
            metric = self._metric
            found = self._children[labels] = metric.labels(*labels) if labels else metric
        return found


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        families = {m.name: _Family(_build(self.registry, m)) for m in GATEWAY_METRICS}
        families.update({m.name: _Family(_build(self.registry, m)) for m in EXTRA_METRICS})
        self.requests = families["inhouse_gateway_requests_total"]
        self.tokens = families["inhouse_gateway_tokens_total"]
        self.ttft = families["inhouse_gateway_ttft_seconds"]
        self.e2e = families["inhouse_gateway_e2e_seconds"]
        self.rejections = families["inhouse_gateway_rejections_total"]
        self.queue_depth = families["inhouse_gateway_queue_depth"]
        self.decisions = families["inhouse_gateway_routing_decisions_total"]
        self.index_blocks = families["inhouse_gateway_prefix_index_blocks"]
        self.healthy = families["inhouse_gateway_replica_healthy"]
        self.retries = families["inhouse_gateway_retries_total"]
        self.stream_errors = families["inhouse_gateway_stream_errors_total"]
        self.inflight = families["inhouse_gateway_inflight_requests"]
        self.loop_lag = families["inhouse_gateway_event_loop_lag_seconds"]
        self._refreshers: list[Callable[[GatewayMetrics], None]] = []

    async def watch_loop_lag(self, period_s: float = LOOP_LAG_PERIOD_S) -> None:
        """Observe how late a timer due every `period_s` runs, until cancelled."""
        lag = self.loop_lag.child()
        clock = time.perf_counter  # NOTE: uvloop's loop.time() is cached per iteration
        while True:
            due = clock() + period_s
            await asyncio.sleep(period_s)
            lag.observe(max(0.0, clock() - due))

    def on_render(self, refresh: Callable[[GatewayMetrics], None]) -> None:
        """Call `refresh` before every exposition (gauges read from live state)."""
        self._refreshers.append(refresh)

    def render(self) -> bytes:
        for refresh in self._refreshers:
            refresh(self)
        data: bytes = generate_latest(self.registry)
        return data
