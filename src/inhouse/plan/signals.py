"""The re-plan triggers' signals as a simulated run shows them: what the operator's Prometheus
would read at planned load, the anchor of each trigger's level (`inhouse.plan.triggers`).

Per pool, from the requests each pool served after the warm-up: the p95 prompt and output lengths
and the median TPOT as `histogram_quantile` reads them from vLLM's buckets, and the
prompt-token-weighted prefix hit rate (vLLM's counters); per workload, its arrivals per second.
"""

from __future__ import annotations

import numpy as np

from inhouse.fleet import FleetResult
from inhouse.plan.mix import workload_of
from inhouse.spec.stack import StackSpec
from inhouse.spec.vllm_buckets import ITL_BUCKETS_S, build_1_2_5_buckets, histogram_quantile

DEFAULT_MAX_MODEL_LEN = 131072


def read_quantile(q: float, observed: list[float], bounds: list[float]) -> float:
    """The q-quantile `histogram_quantile` reads from these observations in these buckets."""
    data = np.sort(np.asarray(observed, dtype=np.float64))
    shares = [float(np.searchsorted(data, b, side="right")) / len(data) for b in bounds]
    return histogram_quantile(q, bounds, shares)


def observed_signals(
    stack: StackSpec, result: FleetResult, warmup_s: float, duration_s: float
) -> dict[str, dict[str, dict[str, float]]]:
    counted = [r for r in result.records if r.arrival_s >= warmup_s]
    window_s = max(duration_s - warmup_s, 1e-9)
    workloads: dict[str, dict[str, float]] = {}
    for record in counted:
        name = workload_of(record.request_id)
        entry = workloads.setdefault(name, {"rate_per_s": 0.0})
        entry["rate_per_s"] += 1.0 / window_s
    pools: dict[str, dict[str, float]] = {}
    for pool in stack.pools:
        done = [r for r in counted if r.ok and r.pool == pool.name]
        if not done:
            continue
        bounds = [
            float(b) for b in build_1_2_5_buckets(pool.knobs.max_model_len or DEFAULT_MAX_MODEL_LEN)
        ]
        prompts = [float(r.num_prompt_tokens) for r in done]
        tpots = [r.tpot_s for r in done if r.num_output_tokens > 1]
        signals = {
            "prompt_p95_tokens": read_quantile(0.95, prompts, bounds),
            "output_p95_tokens": read_quantile(
                0.95, [float(r.num_output_tokens) for r in done], bounds
            ),
            "prefix_hit_rate": sum(r.num_cached_tokens for r in done) / sum(prompts),
        }
        if tpots:
            signals["tpot_median_ms"] = 1000.0 * read_quantile(0.5, tpots, list(ITL_BUCKETS_S))
        pools[pool.name] = signals
    return {"pools": pools, "workloads": workloads}
