"""`inhouse plan --compare`: alternatives planned by the same planner, summarized alike."""

from __future__ import annotations

from inhouse.plan import build_report, make_plan
from inhouse.plan.compare import compare, summarize

from .plan_helpers import parse, small_requirements


def _with_utility() -> dict:
    data = small_requirements()
    data["workloads"].append(
        {
            "name": "utility",
            "kind": "utility",
            "traffic": {"avg_per_s": 2.0, "peak_per_s": 4.0},
            "prompt_tokens": {"p50": 300, "p95": 900},
            "output_tokens": {"p50": 10, "p95": 40},
            "slo": {"e2e_p95_ms": 2000},
            "models": {"allowed": ["Llama-3.1-8B"], "lora_on": "chat"},
        }
    )
    return data


def test_layout_and_engine_alternatives_are_planned() -> None:
    req = parse(_with_utility())
    chosen = build_report(make_plan(req, verify=False), sensitivity=False)
    result = compare(req, chosen, verify=False)
    axes = [a["axis"] for a in result["alternatives"]]
    assert axes == ["layout", "engine"]
    layout = result["alternatives"][0]
    assert layout["feasible"] is True
    # Layout B: utility has a pool of its own, so a chat replica no longer carries it
    pools = {b["pool"]: b["workloads"] for b in layout["blast_radius"]}
    assert pools["utility"] == ["utility"] and "utility" not in pools["chat"]
    assert any(
        "utility" in b["workloads"] for b in result["chosen"]["blast_radius"] if b["pool"] == "chat"
    )
    assert result["alternatives"][1]["label"] == "sglang instead of vllm"


def test_summary_margins_are_one_minus_p95_over_target() -> None:
    req = parse(small_requirements())
    report = build_report(make_plan(req), sensitivity=False)
    margins = summarize(report)["slo_margins"]["chat"]["ttft"]
    assert abs(margins["margin"] - (1 - margins["p95_ms"] / margins["target_ms"])) < 1e-12
