"""`/metrics` implements the render contract: every GATEWAY_METRICS family with its exact type,
labels and buckets."""

from __future__ import annotations

import asyncio
import time

from prometheus_client.parser import text_string_to_metric_families

from inhouse.gateway.metrics import EXTRA_METRICS, GatewayMetrics
from inhouse.metric_names import GATEWAY_METRICS


def test_exposition_matches_the_contract() -> None:
    metrics = GatewayMetrics()
    for spec in (*GATEWAY_METRICS, *EXTRA_METRICS):  # one child each, so every series shows
        family = {
            "inhouse_gateway_requests_total": metrics.requests,
            "inhouse_gateway_tokens_total": metrics.tokens,
            "inhouse_gateway_ttft_seconds": metrics.ttft,
            "inhouse_gateway_e2e_seconds": metrics.e2e,
            "inhouse_gateway_rejections_total": metrics.rejections,
            "inhouse_gateway_queue_depth": metrics.queue_depth,
            "inhouse_gateway_routing_decisions_total": metrics.decisions,
            "inhouse_gateway_prefix_index_blocks": metrics.index_blocks,
            "inhouse_gateway_replica_healthy": metrics.healthy,
            "inhouse_gateway_discovery_addresses": metrics.discovery_addresses,
            "inhouse_gateway_discovery_failed_lookups": metrics.discovery_failed,
            "inhouse_gateway_retries_total": metrics.retries,
            "inhouse_gateway_stream_errors_total": metrics.stream_errors,
            "inhouse_gateway_inflight_requests": metrics.inflight,
            "inhouse_gateway_event_loop_lag_seconds": metrics.loop_lag,
            "inhouse_gateway_limit_store_up": metrics.store_up,
            "inhouse_gateway_limit_store_errors_total": metrics.store_errors,
            "inhouse_gateway_client_disconnects_total": metrics.disconnects,
        }[spec.name]
        child = family.child(*("x" for _ in spec.labels))
        child.observe(0.5) if spec.kind == "histogram" else child.inc()
    parsed = {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}
    for spec in GATEWAY_METRICS:
        name = spec.name.removesuffix("_total") if spec.kind == "counter" else spec.name
        family = parsed[name]
        assert family.type == spec.kind, spec.name
        samples = [s for s in family.samples if not s.name.endswith("_created")]
        assert {s.name for s in samples} == set(spec.series_names()), spec.name
        for sample in samples:
            labels = set(sample.labels) - {"le"}
            assert labels == set(spec.labels), (spec.name, labels)
        if spec.kind == "histogram":
            bounds = sorted(float(s.labels["le"]) for s in samples if s.name.endswith("_bucket"))
            assert bounds[:-1] == list(spec.buckets), spec.name


def test_event_loop_lag_sees_a_blocked_loop() -> None:
    async def main() -> GatewayMetrics:
        metrics = GatewayMetrics()
        task = asyncio.create_task(metrics.watch_loop_lag(period_s=0.01))
        await asyncio.sleep(0.05)
        time.sleep(0.08)  # blocks the loop: the pending timer runs ~70 ms late
        await asyncio.sleep(0.03)
        task.cancel()
        return metrics

    metrics = asyncio.run(main())
    samples = {
        (s.name, s.labels.get("le")): s.value
        for f in text_string_to_metric_families(metrics.render().decode())
        if f.name == "inhouse_gateway_event_loop_lag_seconds"
        for s in f.samples
    }
    count = samples[("inhouse_gateway_event_loop_lag_seconds_count", None)]
    assert count >= 4
    assert count - samples[("inhouse_gateway_event_loop_lag_seconds_bucket", "0.05")] == 1


def test_series_values_are_exact_and_histogram_buckets_inclusive_and_cumulative() -> None:
    metrics = GatewayMetrics()
    metrics.tokens.child("t", "m", "prompt").inc(30)
    metrics.tokens.child("t", "m", "prompt").inc(12)
    metrics.queue_depth.child("p").set(3)
    metrics.queue_depth.child("p").set(1)
    ttft = metrics.ttft.child("t", "m", "p")
    bounds = next(m.buckets for m in GATEWAY_METRICS if m.name == "inhouse_gateway_ttft_seconds")
    for value in (bounds[0], bounds[0] * 1.5, bounds[-1] + 1.0):  # on a bound, between, past all
        ttft.observe(value)
    samples = {
        (s.name, s.labels.get("le")): s.value
        for f in text_string_to_metric_families(metrics.render().decode())
        for s in f.samples
        if not s.name.endswith("_created")
    }
    assert samples[("inhouse_gateway_tokens_total", None)] == 42
    assert samples[("inhouse_gateway_queue_depth", None)] == 1
    name = "inhouse_gateway_ttft_seconds"
    assert samples[(f"{name}_bucket", repr(bounds[0]))] == 1  # `le` includes the bound
    assert samples[(f"{name}_bucket", repr(bounds[1]))] == 2  # cumulative
    assert samples[(f"{name}_bucket", repr(bounds[-1]))] == 2
    assert samples[(f"{name}_bucket", "+Inf")] == 3
    assert samples[(f"{name}_count", None)] == 3
    assert abs(samples[(f"{name}_sum", None)] - (bounds[0] * 2.5 + bounds[-1] + 1.0)) < 1e-9
