"""Small requirements and pool needs for the planner's tests."""

from __future__ import annotations

from typing import Any

from inhouse.plan.analytic import Stream
from inhouse.plan.requirements import Requirements, parse_requirements
from inhouse.plan.sizing import PoolNeed
from inhouse.plan.traffic import profile_workload
from inhouse.plan.workload_req import Slo


def small_requirements(**planning: Any) -> dict[str, Any]:
    """An 8B chat workload on rented H100s, with short simulator checks."""
    return {
        "version": 1,
        "name": "small",
        "workloads": [
            {
                "name": "chat",
                "kind": "shared-prefix",
                "traffic": {"avg_per_s": 1.0, "peak_per_s": 2.0},
                "prompt_tokens": {"p50": 1000, "p95": 3000},
                "shared_prefix_tokens": 500,
                "output_tokens": {"p50": 100, "p95": 300},
                "slo": {"ttft_p95_ms": 1000, "itl_p95_ms": 60},
                "models": {"allowed": ["Llama-3.1-8B"]},
            }
        ],
        "hardware": [{"gpu": "h100_sxm", "pricing": "hourly", "usd_per_gpu_hour": 3.0}],
        "api_prices": [
            {"name": "api", "input_usd_per_million": 2.0, "output_usd_per_million": 8.0}
        ],
        "planning": {
            "quantizations": ["fp8"],
            "kv_cache_dtypes": ["auto"],
            "max_num_batched_tokens": [2048],
            "verify_duration_s": 20,
            "stress_duration_s": 10,
            "load_multiples": [1, 2],
            **planning,
        },
    }


def parse(data: dict[str, Any]) -> Requirements:
    return parse_requirements(data, "test")


def need_for(model: str, max_model_len: int = 8192) -> PoolNeed:
    req = parse(small_requirements()).workloads[0]
    profile = profile_workload(req)
    slo = Slo(ttft_p95_ms=1000, itl_p95_ms=60)
    return PoolNeed(
        name="chat",
        role="standard",
        streams=(Stream(profile, profile.shapes),),
        models=(model,),
        slos={"chat": slo},
        degraded_slos={"chat": None},
        quantiles={"chat": 0.95},
        min_replicas=2,
        max_model_len=max_model_len,
    )
