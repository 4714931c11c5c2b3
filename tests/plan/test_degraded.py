"""Degraded mode by default: sized for the degraded SLO, the other choice priced, and the
lowest tier shed where a pool serves two."""

from __future__ import annotations

from typing import Any

import pytest

from inhouse.fleet import simulate_stack
from inhouse.plan.degraded import lowest_tier, shed_checks
from inhouse.plan.memo import render_memo
from inhouse.plan.planner import Plan, make_plan
from inhouse.plan.report import build_report
from inhouse.plan.verify import mixed_workload
from inhouse.spec.stack import parse_stack

from .plan_helpers import parse, small_requirements


def busy(**planning: Any) -> dict[str, Any]:
    """60 req/s of the small chat workload: two replicas carry it, one alone cannot."""
    data = small_requirements(**planning)
    workload = data["workloads"][0]
    workload["traffic"] = {"avg_per_s": 30.0, "peak_per_s": 60.0}
    workload["degraded_slo"] = {"ttft_p95_ms": 1000, "itl_p95_ms": 60}
    return data


@pytest.fixture(scope="module")
def plans() -> dict[str, Plan]:
    return {
        "default": make_plan(parse(busy())),
        "off": make_plan(parse(busy(enforce_degraded_slo=False))),
    }


def test_the_degraded_slo_is_enforced_unless_turned_off(plans: dict[str, Plan]) -> None:
    assert parse(busy()).planning.enforce_degraded_slo
    enforced, off = plans["default"], plans["off"]
    assert enforced.degraded_enforced and enforced.shortfall is None
    assert all(check.passed for check in enforced.degraded)
    assert enforced.chosen.pools[0].replicas > off.chosen.pools[0].replicas
    assert not off.degraded_enforced


def test_each_choice_names_the_cheapest_plan_of_the_other(plans: dict[str, Plan]) -> None:
    enforced, off = plans["default"], plans["off"]
    assert enforced.alternative is not None and off.alternative is not None
    # off: the cheapest plan that also meets the degraded SLO is the one enforcement chose
    assert off.alternative.meets == "degraded"
    assert off.alternative.usd_per_hour == pytest.approx(enforced.chosen.usd_per_hour)
    assert enforced.alternative.meets == "normal"
    assert enforced.alternative.usd_per_hour == pytest.approx(off.chosen.usd_per_hour)
    memo_off = render_memo(build_report(off, sensitivity=False), {})
    assert "The cheapest plan that also meets it (analytic) is chat: 3x" in memo_off
    memo_on = render_memo(build_report(enforced, sensitivity=False), {})
    assert "Sized for the degraded SLO" in memo_on
    assert "$3.00/h less" in memo_on


def test_a_degraded_slo_the_hardware_cannot_meet_is_named_not_hidden() -> None:
    data = busy()
    data["hardware"][0].update(gpus_per_node=2, max_nodes=1)  # room for two replicas only
    plan = make_plan(parse(data))
    assert plan.chosen.pools[0].replicas == 2
    assert not plan.degraded_enforced
    assert plan.shortfall is not None and "the hardware offers 2" in plan.shortfall
    report = build_report(plan, sensitivity=False)
    assert report["degraded_mode"]["shortfall"] == plan.shortfall
    memo = render_memo(report, {})
    assert "no plan on the offered hardware meets the degraded SLO" in memo
    assert "the degraded SLO is NOT met" in memo


def tiered() -> tuple[Any, Any]:
    data = small_requirements()
    chat = data["workloads"][0]
    chat["tier"] = "interactive"
    chat["traffic"] = {"avg_per_s": 4.0, "peak_per_s": 8.0}
    utility = {
        **chat,
        "name": "util",
        "tier": "batch",
        "models": {"allowed": ["Llama-3.1-8B"], "lora_on": "chat"},
    }
    data["workloads"].append(utility)
    stack = parse_stack(
        {
            "name": "t",
            "pools": [
                {
                    "name": "chat",
                    "model": "Llama-3.1-8B",
                    "served_model_name": "chat",
                    "lora_adapters": ["util"],
                    "quant": "fp8",
                    "replicas": 2,
                }
            ],
        }
    )
    return parse(data), stack


def test_tiers_become_priorities_and_the_lowest_tier_is_shed_first() -> None:
    requirements, stack = tiered()
    names = {"chat": "chat", "util": "util"}
    assert dict(mixed_workload(requirements, names).priorities) == {"chat": 0, "util": 10}
    assert lowest_tier(stack, requirements, "chat") == {"util"}
    (check,) = shed_checks(stack, requirements, names)
    assert check.down == {"chat": 1} and check.shed == ("util",)
    assert set(check.workloads) == {"chat"}  # the shed tier is refused, not judged
    # a shed workload sends nothing
    shed = mixed_workload(requirements, names, shed=frozenset({"util"}))
    result = simulate_stack(stack, shed, duration_s=5)
    assert result.records and all(r.request_id.startswith("chat/") for r in result.records)


def test_one_tier_has_nothing_to_shed() -> None:
    requirements, stack = tiered()
    one = requirements.model_copy(
        update={
            "workloads": tuple(
                w.model_copy(update={"tier": "standard"}) for w in requirements.workloads
            )
        }
    )
    assert lowest_tier(stack, one, "chat") == frozenset()
