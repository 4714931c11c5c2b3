from __future__ import annotations

import dataclasses

from inhouse.drill.soak_virtual import (
    CRM_EXAMPLE,
    DayStats,
    drifts,
    load_requirements,
    model_names,
    simulate_soak,
)
from inhouse.launch.demo import demo_stack


def _day(day: int, ttft: float, hit: float = 0.8) -> DayStats:
    return DayStats(day, 1000, 0, ttft, 30.0, hit, 0.2, 0.3, 1.0)


def test_the_regression_rule_flags_more_than_ten_percent_day_over_day() -> None:
    days = [_day(1, 300.0), _day(2, 320.0), _day(3, 360.0), _day(4, 360.0, hit=0.7)]
    found = [(d.day, d.metric) for d in drifts(days)]
    assert found == [(3, "p95_ttft_ms"), (4, "prefix_hit_rate")]
    assert drifts(days[:2]) == []


def test_days_carry_state_and_count_every_request() -> None:
    requirements = load_requirements(CRM_EXAMPLE)
    stack = demo_stack(2)
    assert model_names(requirements, stack) == {"chat": "chat-70b", "utility": "utility-summarize"}
    days = simulate_soak(stack, requirements, 2, day_s=40.0)
    assert [d.day for d in days] == [1, 2]
    assert all(d.num_requests > 0 and d.p95_ttft_ms > 0 for d in days)
    assert 0.0 < days[1].prefix_hit_rate <= 1.0 and 0.0 < days[1].kv_use_max <= 1.0
    again = simulate_soak(stack, requirements, 2, day_s=40.0)  # deterministic for a seed
    strip = [dataclasses.replace(d, wall_s=0.0) for d in days]
    assert strip == [dataclasses.replace(d, wall_s=0.0) for d in again]
