"""What a request costs when the stack runs all month and traffic flows only in active hours."""

import pytest

from inhouse.plan import build_report, make_plan
from inhouse.plan.cost import WorkloadCost
from inhouse.plan.memo import render_memo
from inhouse.plan.requirements import HOURS_PER_MONTH

from .plan_helpers import parse, small_requirements


def _cost(active_hours_per_month: float) -> WorkloadCost:
    return WorkloadCost(
        name="code",
        usd_per_hour=99.0,
        input_usd_per_hour=75.0,
        output_usd_per_hour=24.0,
        requests_per_s=3.0,
        input_tokens_per_s=26_000.0,
        cached_tokens_per_s=0.0,
        output_tokens_per_s=1_000.0,
        active_hours_per_month=active_hours_per_month,
    )


def test_a_request_carries_the_idle_hours_the_stack_is_paid_for() -> None:
    # The code-assistant memo priced a request at $99/h / (3 req/s x 3600) = $0.00917 while the
    # plan pays the $99/h for all 730 h of the month and the 3 req/s flow 220 h of it: a month
    # of requests costs $72,270 / 2,376,000 = $0.0304 each, 3.3x the figure shown.
    cost = _cost(220.0).as_dict(())
    month_usd = 99.0 * HOURS_PER_MONTH
    month_requests = 3.0 * 3600 * 220.0
    assert cost["usd_per_request"] == pytest.approx(99.0 / (3.0 * 3600))
    assert cost["usd_per_request_with_idle_hours"] == pytest.approx(month_usd / month_requests)
    tokens = (26_000.0 + 1_000.0) * 3600 * 220.0
    assert cost["usd_per_million_tokens_with_idle_hours"] == pytest.approx(month_usd / tokens * 1e6)


def test_traffic_every_hour_leaves_the_two_figures_equal() -> None:
    cost = _cost(HOURS_PER_MONTH).as_dict(())
    assert cost["usd_per_request_with_idle_hours"] == pytest.approx(cost["usd_per_request"])


def test_the_memo_prices_a_request_with_the_idle_hours() -> None:
    data = small_requirements()
    data["usage"] = {"active_hours_per_day": 10, "active_days_per_month": 22}
    data.pop("api_prices")  # the idle-hour figure was worded only beside an API comparison
    report = build_report(make_plan(parse(data), verify=False), sensitivity=False)
    chat = report["cost"]["workloads"]["chat"]
    expected = chat["usd_per_hour"] * HOURS_PER_MONTH / chat["per_month"]["requests"]
    assert chat["usd_per_request_with_idle_hours"] == pytest.approx(expected)
    memo = render_memo(report, {})
    assert f"${expected:.5f}" in memo
    assert "$/request with idle hours" in memo


def test_the_memo_says_input_tokens_count_the_cached_ones() -> None:
    # "$/1M in" divides the prefill time's cost by every prompt token, cached or not, while the
    # API row beside it prices cached input apart; the memo did not say which it counted.
    report = build_report(make_plan(parse(small_requirements()), verify=False), sensitivity=False)
    load = report["cost"]["workloads"]["chat"]["at_average_load"]
    share = load["cached_input_tokens_per_s"] / load["input_tokens_per_s"]
    assert (
        f"Input tokens count every prompt token, cached or not (chat: {share:.0%} from the "
        "prefix cache)" in render_memo(report, {})
    )
