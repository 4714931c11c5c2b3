"""Re-plan triggers: one per pool for the engine signals, one per workload for traffic, anchored
on what the plan's simulation shows at peak."""

from __future__ import annotations

import copy

import pytest
from tests.plan.plan_helpers import parse, small_requirements

from inhouse.plan.planner import make_plan
from inhouse.plan.report import build_report, final_stack
from inhouse.plan.triggers import anchored
from inhouse.spec.triggers import Trigger, describe


def trigger(**changes: object) -> Trigger:
    fields: dict[str, object] = {
        "change": "prefix_hit_halved",
        "change_text": "prefix-cache hit rate halved",
        "signal": "prefix_hit_rate",
        "pool": "chat",
        "model": "chat",
        "workloads": ("chat",),
        "threshold": 0.76,
        "planned": 0.80,
        "breaks_at": 0.89,
    }
    return Trigger.model_validate({**fields, **changes})


def test_anchored_takes_the_simulated_value_and_keeps_the_analytic_factor() -> None:
    observed = {"pools": {"chat": {"prefix_hit_rate": 0.9}}, "workloads": {}}
    moved = anchored(trigger(), observed)
    assert (moved.planned, moved.threshold) == (0.9, round(0.9 * 0.76 / 0.80, 2))
    assert anchored(trigger(), {"pools": {}, "workloads": {}}) == trigger()  # nothing seen
    queue = trigger(signal="queue_every_replica", threshold=0.0, planned=0.0)
    assert anchored(queue, observed) == queue


def test_rounding_never_puts_the_level_on_the_plan() -> None:
    observed = {"pools": {}, "workloads": {"chat": {"rate_per_s": 0.5}}}
    rate = trigger(signal="request_rate", planned=0.5, threshold=0.501)
    assert anchored(rate, observed).threshold == 0.51


def test_an_output_trigger_is_anchored_on_the_simulated_output_p95() -> None:
    longer = trigger(
        change="output_p95_1.7x",
        change_text="p95 output 1.7x longer (p50 kept)",
        signal="output_tokens_p95",
        planned=400.0,
        threshold=520.0,
    )
    moved = anchored(longer, {"pools": {"chat": {"output_p95_tokens": 450.4}}, "workloads": {}})
    assert (moved.planned, moved.threshold) == (450.0, round(450.4 * 520.0 / 400.0))
    text = describe(moved)
    assert "vllm:request_generation_tokens" in text
    assert f"above {moved.threshold:,.0f} tokens (planned {moved.planned:,.0f} tokens)" in text


def test_words_name_pool_workloads_level_and_plan() -> None:
    text = describe(trigger())
    assert "pool chat (chat)" in text and "below 76% (planned 80%)" in text


@pytest.fixture(scope="module")
def two_pools() -> tuple[dict[str, object], object, object]:
    data = small_requirements()
    batch = copy.deepcopy(data["workloads"][0])  # type: ignore[index]
    batch["name"] = "batch"
    batch["models"] = {"allowed": ["Qwen2.5-7B"]}
    data["workloads"].append(batch)  # type: ignore[union-attr]
    plan = make_plan(parse(data))
    report = build_report(plan)
    return report, final_stack(plan, report), plan


def test_every_pool_and_every_workload_gets_its_triggers(two_pools: tuple) -> None:  # type: ignore[type-arg]
    report, stack, _ = two_pools
    pools = {p.name for p in stack.pools if p.role != "fallback"}
    assert len(pools) == 2
    for signal in ("prompt_tokens_p95", "output_tokens_p95", "queue_every_replica"):
        assert {t.pool for t in stack.triggers if t.signal == signal} == pools
    rates = {t.model: t for t in stack.triggers if t.signal == "request_rate"}
    assert set(rates) == {"chat", "batch"}
    for name, rate in rates.items():
        seen = report["slo_check"]["1x"]["workloads"][name]["completed"]
        assert rate.planned > 0 and rate.threshold > rate.planned, seen
    assert {w.name for w in stack.workloads} == {"chat", "batch"}


def test_the_output_row_re_forecasts_and_its_trigger_reads_the_simulated_p95(
    two_pools: tuple,  # type: ignore[type-arg]
) -> None:
    # The plan rests on the output lengths, but section 7 had no row and render no alert.
    report, stack, plan = two_pools
    (row,) = [s for s in report["sensitivity"] if s["name"] == "output_p95_1.7x"]
    assert row["predicted_p95_ms"] is not None or row["first_break"] is not None
    (check,) = [c for c in plan.checks if c.multiple == 1.0 and not c.down]
    seen = check.signals["pools"]
    found = [t for t in stack.triggers if t.signal == "output_tokens_p95"]
    assert [t.model_dump(mode="json") for t in found] == row["triggers"]
    for t in found:
        assert t.planned == round(seen[t.pool]["output_p95_tokens"])
        assert t.threshold > t.planned
        assert t.breaks_at == row["breaks_at_size"]
