"""The fast error-budget burn pages on a real outage at normal traffic, not on a handful of
5xx in a quiet hour (where three failures out of twenty requests is a 15% error ratio)."""

from __future__ import annotations

from pathlib import Path

from tests.render.promtool_scenarios import needs_promtool, run_scenarios, scenario, selector

from inhouse.metric_names import replica_label
from inhouse.render import render_stack
from inhouse.render.alerts import Alert
from inhouse.render.prometheus import stack_rules
from inhouse.spec.stack import StackSpec, parse_stack

METRIC = "inhouse_gateway_requests_total"


def _stack() -> StackSpec:
    return parse_stack(
        {"name": "demo", "pools": [{"name": "chat", "model": "Qwen2.5-7B", "replicas": 2}]}
    )


def _fast_burn(stack: StackSpec) -> Alert:
    _, alerts = stack_rules(stack, "demo")
    return next(a for a in alerts if a.name == "InhouseErrorBudgetBurnFast")


def _requests(ok_per_min: float, errors: str) -> list[tuple[str, str]]:
    labels = {"tenant": "acme", "model": "Qwen2.5-7B", "pool": "chat", "replica": replica_label(0)}
    return [
        (selector(METRIC, {**labels, "code": "200"}), f"0+{ok_per_min:g}x80"),
        (selector(METRIC, {**labels, "code": "500"}), errors),
    ]


@needs_promtool
def test_a_handful_of_errors_in_a_quiet_hour_does_not_page(tmp_path: Path) -> None:
    stack = _stack()
    alert = _fast_burn(stack)
    # A quiet night: one request every 3 minutes, three of them 5xx in minutes 61-63; both
    # windows' error ratios are far above 14.4 x the 0.1% budget.
    quiet = _requests(1 / 3, "0x60 1 2 3x16")
    # Normal traffic, a real outage: 100 requests a minute succeed, 100 more fail each minute.
    outage = _requests(100, "0x60 0+100x19")
    tests = [
        scenario("three 5xx in a quiet hour", "1m", quiet, [("66m", alert, None)]),
        scenario("outage at normal traffic", "1m", outage, [("70m", alert, {"pool": "chat"})]),
    ]
    verdict = run_scenarios(tmp_path, render_stack(stack), tests)
    assert verdict == "", verdict
