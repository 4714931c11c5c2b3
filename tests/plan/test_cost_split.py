"""Each workload's share of the cost, where the plan spans two GPU types."""

from typing import Any

import pytest

from inhouse.plan import make_plan
from inhouse.plan.report_figures import workload_costs

from .plan_helpers import parse


def _workload(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "utility",
        "traffic": {"avg_per_s": 1.0, "peak_per_s": 1.0},
        "prompt_tokens": {"p50": 500, "p95": 1000},
        "output_tokens": {"p50": 100, "p95": 200},
        "slo": {"e2e_p95_ms": 20_000, "availability": 0.9},
        "models": {"allowed": ["Llama-3.1-8B"]},
    }


def test_a_pool_pays_for_its_own_gpu_type() -> None:
    # One $2 H100 on offer, H200s at $10: one pool gets the H100, the other an H200. Each
    # workload's $/h is its pool's GPUs at that GPU's price (an even split by GPU count
    # charged both $6.00/h, the mean, so the H100 workload's $/1M tokens was 3x too high).
    req = parse(
        {
            "version": 1,
            "name": "mixed",
            "workloads": [_workload("a"), _workload("b")],
            "hardware": [
                {
                    "gpu": "h100_sxm",
                    "gpus_per_node": 1,
                    "max_nodes": 1,
                    "pricing": "hourly",
                    "usd_per_gpu_hour": 2.0,
                },
                {
                    "gpu": "h200_sxm",
                    "gpus_per_node": 1,
                    "pricing": "hourly",
                    "usd_per_gpu_hour": 10.0,
                },
            ],
            "planning": {
                "quantizations": ["fp8"],
                "kv_cache_dtypes": ["fp8"],
                "tensor_parallel": [1],
            },
        }
    )
    plan = make_plan(req, verify=False)
    gpu_of = {p.need.name: p.choice.gpu for p in plan.chosen.pools}
    assert sorted(gpu_of.values()) == ["h100_sxm", "h200_sxm"]
    assert plan.chosen.usd_per_hour == pytest.approx(12.0)
    price = {"h100_sxm": 2.0, "h200_sxm": 10.0}
    costs = workload_costs(plan)
    for name in ("a", "b"):
        assert costs[name].usd_per_hour == pytest.approx(price[gpu_of[name]])
