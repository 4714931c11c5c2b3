"""A fleet-simulator run as Prometheus series, for `promtool test rules`: the plan's own traffic
replayed against the rendered rules.

Every request that arrived after the warm-up is observed once, as the engine (vLLM's series, per
replica) and the gateway (its series, per requested model) would count it; each series grows at
the run's steady rate (observations per minute = count / arrival window), sampled once a minute
for `SAMPLES` minutes. Rates and quantiles over any window then equal the run's own figures up
to histogram-bucket interpolation, which is exactly what the rules see in production.

Not replayed: gauges the records do not carry (KV-cache usage, waiting requests) and GPU
telemetry. `up` is 1 for every engine replica and the gateway, but 0 for a replica the run had
down (`down_replicas`, as the simulator's: a pool's last N), which is not scraped and so has no
vLLM series; each replica keeps one process (`process_start_time_seconds` constant: no
restarts). A pool that served nothing (a fallback outside a failover) has its series at 0 and
no figures: its quantiles and ratios read nothing, as the rules' do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from inhouse.fleet import FleetResult, RequestRecord
from inhouse.metric_names import E2E_BUCKETS_S, replica_label
from inhouse.plan.mix import workload_of
from inhouse.render.alerts_slo import engine_labels, gateway_labels
from inhouse.render.alerts_triggers import max_model_len
from inhouse.render.layout import engine_pools
from inhouse.spec.stack import PoolSpec, StackSpec
from inhouse.spec.vllm_buckets import (
    ITL_BUCKETS_S,
    TTFT_BUCKETS_S,
    build_1_2_5_buckets,
    histogram_quantile,
)

SAMPLES = 150  # one a minute: two and a half hours
EVAL_TIME = "2h10m"  # past every rule's window and hold (the longest: 1 h over 1 h)


def _selector(metric: str, labels: Mapping[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{metric}{{{inner}}}"


def _counter(
    metric: str, labels: Mapping[str, str], total: float, window_s: float
) -> dict[str, str]:
    per_minute = total * 60.0 / window_s
    return {"series": _selector(metric, labels), "values": f"0+{per_minute:.9g}x{SAMPLES}"}


def _histogram(
    metric: str,
    labels: Mapping[str, str],
    observed: Sequence[float],
    buckets: Iterable[float],
    window_s: float,
) -> list[dict[str, str]]:
    data = np.sort(np.asarray(observed, dtype=np.float64))
    out = []
    for le in (*buckets, float("inf")):
        count = float(np.searchsorted(data, le, side="right"))
        le_text = "+Inf" if le == float("inf") else str(float(le))
        out.append(_counter(f"{metric}_bucket", {**labels, "le": le_text}, count, window_s))
    return out


@dataclass(frozen=True)
class Replay:
    """The series, and the figures they encode (the test's ground truth)."""

    series: list[dict[str, str]]
    # workload -> ttft/e2e; pool -> itl (key "pool:NAME"), absent for a pool with no gap
    p95_ms: dict[str, dict[str, float]]
    error_ratio: dict[str, float]  # workload -> failed / arrived
    rate_per_s: dict[str, float]  # workload -> arrivals per second
    # Per pool that served a request (absent for one that served none):
    prompt_p95: dict[str, float]  # tokens, as histogram_quantile reads them
    output_p95: dict[str, float]  # generated tokens, likewise
    hit_rate: dict[str, float]  # cached / prompt tokens
    tpot_median_ms: dict[str, float]  # as histogram_quantile reads it


def _engine_series(
    pool: PoolSpec, result: FleetResult, done: list[RequestRecord], window_s: float, down: int
) -> list[dict[str, str]]:
    """The pool's vLLM series, per replica up (its last `down` are not scraped)."""
    out: list[dict[str, str]] = []
    tokens = [float(b) for b in build_1_2_5_buckets(max_model_len(pool))]
    for replica in range(pool.replicas - down):
        mine = [r for r in done if r.pool == pool.name and r.replica == replica]
        labels = engine_labels(pool, replica)
        out += _histogram(
            "vllm:time_to_first_token_seconds",
            labels,
            [r.ttft_s for r in mine],
            TTFT_BUCKETS_S,
            window_s,
        )
        out += _histogram(
            "vllm:e2e_request_latency_seconds",
            labels,
            [r.e2el_s for r in mine],
            E2E_BUCKETS_S,
            window_s,
        )
        out += _histogram(
            "vllm:inter_token_latency_seconds", labels, result.itl_s(mine), ITL_BUCKETS_S, window_s
        )
        out += _histogram(
            "vllm:request_time_per_output_token_seconds",
            labels,
            [r.tpot_s for r in mine if r.num_output_tokens > 1],
            ITL_BUCKETS_S,
            window_s,
        )
        prompts = [r.num_prompt_tokens for r in mine]
        out += _histogram("vllm:request_prompt_tokens", labels, prompts, tokens, window_s)
        outputs = [r.num_output_tokens for r in mine]
        out += _histogram("vllm:request_generation_tokens", labels, outputs, tokens, window_s)
        cached = sum(r.num_cached_tokens for r in mine)
        out.append(_counter("vllm:prefix_cache_hits_total", labels, cached, window_s))
        out.append(_counter("vllm:prefix_cache_queries_total", labels, sum(prompts), window_s))
    return out


def _gateway_series(
    stack: StackSpec, counted: list[RequestRecord], window_s: float
) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for workload in stack.workloads:
        pool = stack.pool_of_workload(workload)
        labels = gateway_labels(pool, workload.model)
        mine = [r for r in counted if workload_of(r.request_id) == workload.name]
        done = [r for r in mine if r.ok]
        out += _histogram(
            "inhouse_gateway_ttft_seconds",
            labels,
            [r.ttft_s for r in done],
            TTFT_BUCKETS_S,
            window_s,
        )
        out += _histogram(
            "inhouse_gateway_e2e_seconds", labels, [r.e2el_s for r in done], E2E_BUCKETS_S, window_s
        )
        codes = {"200": len(done), "503": len(mine) - len(done)}
        for code, count in codes.items():
            series = {**labels, "replica": replica_label(0), "code": code}
            out.append(_counter("inhouse_gateway_requests_total", series, count, window_s))
    return out


PROCESS_START = 1_800_000_000  # each replica's process start time, seconds since the epoch


def _up_series(
    stack: StackSpec, namespace: str, down_replicas: Mapping[str, int]
) -> list[dict[str, str]]:
    out = [
        {
            "series": _selector(
                "up", {"namespace": namespace, "job": "gateway", "pod": "gateway-0"}
            ),
            "values": f"1x{SAMPLES}",
        }
    ]
    for pool in engine_pools(stack):
        up_replicas = pool.replicas - down_replicas.get(pool.name, 0)
        for replica in range(pool.replicas):
            labels = {k: v for k, v in engine_labels(pool, replica).items() if k != "model_name"}
            labels["namespace"] = namespace
            up = int(replica < up_replicas)
            out.append({"series": _selector("up", labels), "values": f"{up}x{SAMPLES}"})
            # one process through the run: no restart for the flapping alert to count
            start = _selector("process_start_time_seconds", labels)
            out.append({"series": start, "values": f"{PROCESS_START}x{SAMPLES}"})
    return out


def read_quantile(q: float, observed: Sequence[float], buckets: Sequence[float]) -> float:
    """The quantile a rule reads from these observations in these buckets: the definition of
    the re-plan triggers' quantile signals (`inhouse.spec.triggers`)."""
    data = np.sort(np.asarray(observed, dtype=np.float64))
    shares = [float(np.searchsorted(data, b, side="right")) / len(data) for b in buckets]
    return histogram_quantile(q, buckets, shares)


def _p95(values: Sequence[float]) -> float:
    return 1000.0 * float(np.percentile(np.asarray(values, dtype=np.float64), 95))


def replay(
    stack: StackSpec,
    result: FleetResult,
    warmup_s: float,
    duration_s: float,
    namespace: str,
    down_replicas: Mapping[str, int] | None = None,
) -> Replay:
    """`result` as series; `down_replicas`: the run's, as given to the simulator."""
    down = dict(down_replicas or {})
    window_s = duration_s - warmup_s
    counted = [r for r in result.records if r.arrival_s >= warmup_s]
    done = [r for r in counted if r.ok]
    series = _up_series(stack, namespace, down) + _gateway_series(stack, counted, window_s)
    p95: dict[str, dict[str, float]] = {}
    errors, rates = {}, {}
    for workload in stack.workloads:
        mine = [r for r in counted if workload_of(r.request_id) == workload.name]
        ok = [r for r in mine if r.ok]
        p95[workload.name] = {
            "ttft": _p95([r.ttft_s for r in ok]),
            "e2e": _p95([r.e2el_s for r in ok]),
        }
        errors[workload.name] = (len(mine) - len(ok)) / len(mine)
        rates[workload.name] = len(mine) / window_s
    prompt, output, hits, tpot = {}, {}, {}, {}
    for pool in engine_pools(stack):
        series += _engine_series(pool, result, done, window_s, down.get(pool.name, 0))
        mine = [r for r in done if r.pool == pool.name]
        gaps = result.itl_s(mine)
        p95[f"pool:{pool.name}"] = (
            {"itl": 1000.0 * float(np.percentile(gaps, 95))} if len(gaps) else {}
        )
        if not mine:  # NOTE: a fallback outside a failover: its rules read nothing
            continue
        tokens = [float(b) for b in build_1_2_5_buckets(max_model_len(pool))]
        prompt[pool.name] = read_quantile(0.95, [r.num_prompt_tokens for r in mine], tokens)
        output[pool.name] = read_quantile(0.95, [r.num_output_tokens for r in mine], tokens)
        hits[pool.name] = sum(r.num_cached_tokens for r in mine) / sum(
            r.num_prompt_tokens for r in mine
        )
        tpots = [r.tpot_s for r in mine if r.num_output_tokens > 1]
        tpot[pool.name] = 1000.0 * read_quantile(0.5, tpots, ITL_BUCKETS_S)
    return Replay(series, p95, errors, rates, prompt, output, hits, tpot)


def as_test(replay: Replay, checks: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """One promtool test: the replayed series, and at `EVAL_TIME` the expected alerts."""
    return {
        "name": name,
        "interval": "1m",
        "input_series": replay.series,
        "alert_rule_test": [{"eval_time": EVAL_TIME, **check} for check in checks],
    }
