"""Availability is arithmetic, not "at least two replicas": each pool's figure under the
stated failure rate and repair time, and the pools that cannot meet their target alone.

"99.9%" was read only as "two replicas per pool", and the code assistant's one-replica fallback
pool sat beside that rule unremarked in the memo."""

from __future__ import annotations

import math

import pytest

from inhouse.errors import SpecError
from inhouse.plan.availability import pool_availability, replica_down_share
from inhouse.plan.memo import render_memo
from inhouse.plan.planner import make_plan
from inhouse.plan.report import build_report

from .plan_helpers import parse, small_requirements


def test_a_replicas_down_share_is_mttr_over_mtbf_plus_mttr() -> None:
    planning = parse(small_requirements(replica_failures_per_month=2, replica_mttr_min=90)).planning
    # 2 failures of 1.5 h in 730 h: MTBF 365 h, so 1.5 / (365 + 1.5).
    assert replica_down_share(planning) == pytest.approx(1.5 / 366.5)


def test_a_pool_is_available_while_no_more_replicas_are_down_than_it_tolerates() -> None:
    u = 0.01
    assert pool_availability(1, 0, u) == pytest.approx(1 - u)
    # Four replicas, one may be down: none down, or exactly one of the four.
    assert pool_availability(4, 1, u) == pytest.approx((1 - u) ** 4 + 4 * u * (1 - u) ** 3)
    assert pool_availability(3, 1, 0.0) == 1.0


def test_the_defaults_are_labelled_assumptions_and_stated_values_are_not() -> None:
    default = parse(small_requirements()).planning
    assert "replica_failures_per_month" not in default.model_fields_set
    stated = parse(small_requirements(replica_failures_per_month=0.5)).planning
    assert stated.replica_failures_per_month == 0.5


@pytest.mark.parametrize(
    ("field", "value"),
    [("replica_failures_per_month", -1), ("replica_mttr_min", 0), ("replica_mttr_min", "1h")],
)
def test_a_bad_failure_rate_or_repair_time_is_refused_by_field(field: str, value: object) -> None:
    with pytest.raises(SpecError, match=f"planning.{field}"):
        parse(small_requirements(**{field: value}))


def test_the_plan_states_each_pools_availability_and_flags_a_lone_fallback() -> None:
    data = small_requirements(replica_failures_per_month=1, replica_mttr_min=60)
    data["workloads"][0]["models"]["fallback"] = "Llama-3.2-1B"
    data["workloads"][0]["slo"]["availability"] = 0.999
    plan = make_plan(parse(data))
    report = build_report(plan, sensitivity=False)
    section = report["availability"]
    u = 1.0 / 731.0  # one hour down in a month of 730 h of MTBF
    assert section["replica_down_share"] == pytest.approx(u)
    pools = {p["pool"]: p for p in section["pools"]}
    primary, fallback = pools["chat"], pools["chat-fallback"]
    n = primary["replicas"]
    assert n >= 2 and primary["tolerated_down"] == 1
    assert primary["availability"] == pytest.approx((1 - u) ** n + n * u * (1 - u) ** (n - 1))
    assert primary["meets"]
    # The fallback's one replica is down 1/731 of the time: 99.863%, short of 99.9%.
    assert fallback["replicas"] == 1 and fallback["tolerated_down"] == 0
    assert fallback["availability"] == pytest.approx(1 - u)
    assert not fallback["meets"]
    assert math.isclose(fallback["downtime_min_per_month"], u * 730 * 60, rel_tol=1e-9)

    memo = render_memo(report, {})
    assert "### Availability" in memo
    assert "chat-fallback (99.863% against 99.900%) cannot meet the target on its own" in memo
    assert "SHORT: cannot meet it on its own" in memo
    assert "`planning.replica_failures_per_month`" in memo
    assert "as the requirements state them" in memo


def test_the_memo_labels_default_failure_figures_as_assumptions() -> None:
    plan = make_plan(parse(small_requirements()))
    report = build_report(plan, sensitivity=False)
    assert report["availability"]["assumed"] is True
    memo = render_memo(report, {})
    assert "assumed, not measured" in memo
    assert "Each replica fails once a month and is back in 60 min" in memo
