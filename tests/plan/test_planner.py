from typing import Any

import pytest

from inhouse.errors import SpecError
from inhouse.fleet import MAX_SIMULATED_REQUESTS, simulate_stack
from inhouse.plan.planner import PlanInfeasibleError, make_plan
from inhouse.plan.report import build_report
from inhouse.plan.verify import mixed_workload
from inhouse.spec.stack import dump_stack, parse_stack

from .plan_helpers import parse, small_requirements


def one_h100(model: str, ttft_ms: float) -> dict[str, object]:
    data = small_requirements(verify_top=0)
    data["workloads"][0].update(
        kind="longctx",
        prompt_tokens={"p50": 20000, "p95": 24000},
        max_prompt_tokens=30000,
        slo={"ttft_p95_ms": ttft_ms, "availability": 0.9},
        models={"allowed": [model]},
    )
    data["hardware"] = [
        {
            "gpu": "h100_sxm",
            "gpus_per_node": 1,
            "max_nodes": 1,
            "pricing": "hourly",
            "usd_per_gpu_hour": 3,
        }
    ]
    return data


def test_50ms_ttft_for_24k_prompts_on_one_h100_names_ttft() -> None:
    with pytest.raises(PlanInfeasibleError) as info:
        make_plan(parse(one_h100("Llama-3.1-8B", 50)))
    message = str(info.value)
    assert "no plan meets the requirements" in message
    assert "binding constraint" in message
    assert "chat p95 ttft is" in message
    assert "on an idle replica, above the 45 ms limit" in message


def test_70b_on_one_h100_names_memory() -> None:
    with pytest.raises(PlanInfeasibleError, match="does not fit"):
        make_plan(parse(one_h100("Llama-3.3-70B", 5000)))


def test_gpu_budget_is_a_binding_constraint() -> None:
    data = small_requirements(verify_top=0)
    data["workloads"][0]["traffic"] = {"avg_per_s": 20.0, "peak_per_s": 40.0}
    data["hardware"] = [
        {
            "gpu": "h100_sxm",
            "gpus_per_node": 1,
            "max_nodes": 1,
            "pricing": "hourly",
            "usd_per_gpu_hour": 3,
        }
    ]
    with pytest.raises(PlanInfeasibleError, match=r"needs \d+ h100_sxm GPUs .* offers 1"):
        make_plan(parse(data))


def test_small_plan_is_verified_and_its_stack_simulates() -> None:
    requirements = parse(small_requirements())
    plan = make_plan(requirements)
    assert plan.verifications and plan.verifications[-1].check.passed
    assert [c.multiple for c in plan.checks] == [1.0, 2.0]
    assert [list(c.down) for c in plan.degraded] == [["chat"]]
    stack = parse_stack(__import__("yaml").safe_load(dump_stack(plan.stack)))
    (pool,) = stack.pools
    assert (pool.model, pool.quant, pool.routing.policy) == (
        "meta-llama/Llama-3.1-8B-Instruct",  # the chat checkpoint, not the catalog's base id
        "fp8",
        "cache_aware",
    )
    assert pool.replicas >= 2  # 99.9% availability: N+1
    result = simulate_stack(stack, mixed_workload(requirements, {"chat": "chat"}), duration_s=10)
    assert result.completed and not [r for r in result.records if not r.ok]

    report = build_report(plan, sensitivity=False)
    for key in ("pools", "slo_check", "degraded", "cost", "sensitivity", "assumptions"):
        assert key in report
    entry = report["pools"][0]
    for key in (
        "model",
        "quant",
        "gpu",
        "tp",
        "replicas",
        "max_num_seqs",
        "kv_budget_tokens",
        "predicted",
    ):
        assert key in entry
    assert set(entry["predicted"]["chat"]) >= {"ttft_p95_ms", "itl_p95_ms"}
    cost = report["cost"]
    assert cost["usd_per_hour"] == pytest.approx(3.0 * sum(p["num_gpus"] for p in report["pools"]))
    blended = cost["usd_per_million_tokens"]["chat"]["blended"]
    load = cost["workloads"]["chat"]["at_average_load"]
    tps = load["input_tokens_per_s"] + load["output_tokens_per_s"]
    assert blended == pytest.approx(cost["usd_per_hour"] / (tps * 3600) * 1e6)
    assert cost["breakeven_months"]["api"] in (0.0, None)  # rented: from month one, or never


def test_a_p95_prompt_past_every_allowed_context_is_named_before_sampling() -> None:
    data = small_requirements()
    data["workloads"][0]["prompt_tokens"] = {"p50": 100_000, "p95": 200_000}
    with pytest.raises(PlanInfeasibleError) as info:
        make_plan(parse(data), verify=False)
    assert str(info.value) == (
        "small: workloads[chat].prompt_tokens.p95 (200,000 tokens) is longer than the context "
        "of every allowed model (the longest: Llama-3.1-8B, 131,072 tokens). To act: shorten "
        "it, or allow a model with a longer context."
    )


def test_a_check_that_measured_nothing_says_so() -> None:
    # 0.001 requests/s sends none in 20 simulated seconds: every p95 was NaN and the plan was
    # "infeasible" with no binding constraint at all.
    data = small_requirements()
    data["workloads"][0]["traffic"] = {"avg_per_s": 0.001, "peak_per_s": 0.001}
    with pytest.raises(PlanInfeasibleError) as info:
        make_plan(parse(data))
    assert (
        "binding constraint: chat — no request of it completed after the warm-up in the 20 s "
        "simulated at 1x peak, so no p95 could be measured; raise planning.verify_duration_s"
    ) in str(info.value)


def test_a_quality_floor_above_every_allowed_model_names_the_field() -> None:
    # Was "infeasible: ... no configuration to try (no GPU on offer fits the model)".
    data = small_requirements()
    data["workloads"][0]["models"]["min_params_b"] = 1000
    with pytest.raises(SpecError) as info:
        make_plan(parse(data), verify=False)
    assert str(info.value) == (
        "workloads.0.models.min_params_b (1000) refuses every allowed model: Llama-3.1-8B "
        "(8.0B) is below the 1000B quality floor. Lower the floor or allow a larger model."
    )


def test_no_tensor_parallel_degree_that_fits_says_so() -> None:
    # TP 3 divides none of Llama-3.1-8B's 32 heads; it read "no GPU on offer fits the model".
    with pytest.raises(PlanInfeasibleError) as info:
        make_plan(parse(small_requirements(tensor_parallel=[3])), verify=False)
    assert (
        "pool chat: no configuration to try: no degree in planning.tensor_parallel divides the "
        "attention heads of Llama-3.1-8B (32 attention heads) and fits in one node"
    ) in str(info.value)


@pytest.mark.parametrize(
    ("planning", "field", "multiple", "duration_key"),
    [
        ({"verify_duration_s": 3600}, "planning.verify_duration_s (3600)", 1, "verify_duration_s"),
        (
            {"load_multiples": [1, 10], "stress_duration_s": 3600},
            "planning.load_multiples.1 (10)",
            10,
            "stress_duration_s",
        ),
    ],
)
def test_a_check_past_the_simulators_request_limit_is_refused_before_simulating(
    planning: dict[str, Any], field: str, multiple: float, duration_key: str
) -> None:
    # 300 requests/s x 3600 s (or 30 x 10 x 3600 s): over a million requests for one check,
    # which simulated for an hour or more before.
    peak = 300.0 / multiple
    data = small_requirements(**planning)
    data["workloads"][0]["traffic"] = {"avg_per_s": peak / 2, "peak_per_s": peak}
    requirements = parse(data)
    duration = getattr(requirements.planning, duration_key)
    expected = peak * multiple * duration
    assert expected > MAX_SIMULATED_REQUESTS
    with pytest.raises(SpecError) as info:
        make_plan(requirements)
    message = str(info.value)
    assert f"small: {field}: the simulator check at {multiple:g}x peak" in message
    assert f"about {expected:,.0f} requests ({peak:,.4g} requests/s forecast at peak" in message
    assert f"more than the {MAX_SIMULATED_REQUESTS:,}" in message
