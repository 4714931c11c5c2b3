"""The gateway's Prometheus metrics: exactly `inhouse.metric_names.GATEWAY_METRICS` (the
names, types, labels and buckets the rendered rules and dashboards use), plus the few extra
series listed in `EXTRA_METRICS`.

The series live in plain objects the request path updates with one addition (a counter, a
gauge) or a bisect and two additions (a histogram): the gateway runs on one event loop, so the
lock `prometheus_client` takes per update (and its Python loop over a histogram's buckets) is
cost without use: 10 µs a request in-process. `prometheus_client` still writes the exposition,
from the families `_Collector` yields at scrape time. Label children are cached by label tuple,
so the hot path pays a dict lookup and an `inc()`.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.utils import floatToGoString

from inhouse.metric_names import GATEWAY_METRICS, LOOP_LAG_PERIOD_S, MetricDef

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
    MetricDef(
        "inhouse_gateway_limit_store_up",
        "gauge",
        (),
        "1 while the shared limit store (Redis) answers, 0 while gateway.limits."
        "on_store_failure applies (only with redis_url).",
    ),
    MetricDef(
        "inhouse_gateway_limit_store_errors_total",
        "counter",
        (),
        "Calls to the shared limit store that failed or timed out.",
    ),
    MetricDef(
        "inhouse_gateway_client_disconnects_total",
        "counter",
        ("phase",),
        "Requests whose client left before their response was complete, by where they were "
        "(queued, engine, stream); the engine request was aborted.",
    ),
)


class _Value:
    """A counter's or a gauge's series."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def set(self, value: float) -> None:
        self.value = value


class _Histogram:
    """A histogram's series: a count per bucket (`le` inclusive, +Inf last) and the sum."""

    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self._bounds, value)] += 1
        self.sum += value


class _Family:
    """A metric family with its label children cached by label tuple."""

    __slots__ = ("_bounds", "_children", "_les", "spec")

    def __init__(self, spec: MetricDef) -> None:
        self.spec = spec
        self._bounds = (*spec.buckets, math.inf)
        self._les: list[str] = [floatToGoString(b) for b in self._bounds]  # type: ignore[no-untyped-call]
        self._children: dict[tuple[str, ...], Any] = {}

    def child(self, *labels: str) -> Any:
        found = self._children.get(labels)
        if found is None:
            spec = self.spec
            assert len(labels) == len(spec.labels), (spec.name, labels)
            found = _Histogram(self._bounds) if spec.kind == "histogram" else _Value()
            self._children[labels] = found
        return found

    def collect(self) -> Metric:
        spec = self.spec
        names = list(spec.labels)
        if spec.kind != "histogram":
            kind = CounterMetricFamily if spec.kind == "counter" else GaugeMetricFamily
            family: Any = kind(spec.name, spec.help, labels=names)
            for labels, value in self._children.items():
                family.add_metric(labels, value.value)
        else:
            family = HistogramMetricFamily(spec.name, spec.help, labels=names)
            for labels, histogram in self._children.items():
                running = 0
                buckets = []
                for le, count in zip(self._les, histogram.counts, strict=True):
                    running += count
                    buckets.append((le, running))
                family.add_metric(labels, buckets, histogram.sum)
        return family  # type: ignore[no-any-return]


class _Collector:
    def __init__(self, families: list[_Family]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        for family in self.families:
            yield family.collect()


class GatewayMetrics:
    def __init__(self) -> None:
        families = {m.name: _Family(m) for m in (*GATEWAY_METRICS, *EXTRA_METRICS)}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(list(families.values())))
        self.requests = families["inhouse_gateway_requests_total"]
        self.tokens = families["inhouse_gateway_tokens_total"]
        self.ttft = families["inhouse_gateway_ttft_seconds"]
        self.e2e = families["inhouse_gateway_e2e_seconds"]
        self.rejections = families["inhouse_gateway_rejections_total"]
        self.queue_depth = families["inhouse_gateway_queue_depth"]
        self.decisions = families["inhouse_gateway_routing_decisions_total"]
        self.index_blocks = families["inhouse_gateway_prefix_index_blocks"]
        self.healthy = families["inhouse_gateway_replica_healthy"]
        self.discovery_addresses = families["inhouse_gateway_discovery_addresses"]
        self.discovery_failed = families["inhouse_gateway_discovery_failed_lookups"]
        self.retries = families["inhouse_gateway_retries_total"]
        self.stream_errors = families["inhouse_gateway_stream_errors_total"]
        self.inflight = families["inhouse_gateway_inflight_requests"]
        self.loop_lag = families["inhouse_gateway_event_loop_lag_seconds"]
        self.store_up = families["inhouse_gateway_limit_store_up"]
        self.store_errors = families["inhouse_gateway_limit_store_errors_total"]
        self.disconnects = families["inhouse_gateway_client_disconnects_total"]
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
