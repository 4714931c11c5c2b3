"""Availability is arithmetic, not "at least two replicas": each pool's figure under the
stated failure rate and repair time, and the pools that cannot meet their target alone.

"99.9%" was read only as "two replicas per pool", and the code assistant's one-replica fallback
pool sat beside that rule unremarked in the memo."""

from __future__ import annotations

import math

import pytest

from inhouse.errors import SpecError
from inhouse.plan.availability import (
    assess_pool,
    node_down_share,
    pool_availability,
    replica_down_share,
)
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


def test_replicas_on_one_node_share_its_failure_and_the_node_limits_the_pool() -> None:
    """Two replicas on one node were counted as independent: a node failure (a power supply, a
    kernel panic, a host reboot for a driver update) that takes both was not in the figure."""
    planning = parse(small_requirements(node_failures_per_month=0.5)).planning
    u = replica_down_share(planning)
    v = node_down_share(planning)
    # Half a failure a month, back in 60 min: 0.5 h down in 730 h of MTBF.
    assert v == pytest.approx(0.5 / 730.5)
    one_node = assess_pool("chat", (2,), 0.999, planning)
    two_nodes = assess_pool("chat", (1, 1), 0.999, planning)
    # One node: it must be up, and then at most one of its two replicas down.
    assert one_node.availability == pytest.approx((1 - v) * ((1 - u) ** 2 + 2 * u * (1 - u)))
    # Two nodes: each replica is lost with its node or on its own, independently of the other.
    w = 1 - (1 - u) * (1 - v)
    assert two_nodes.availability == pytest.approx((1 - w) ** 2 + 2 * w * (1 - w))
    independent = pool_availability(2, 1, u)
    assert one_node.availability < two_nodes.availability < independent
    assert (one_node.smallest_outage, two_nodes.smallest_outage) == ("one node", "two failures")
    # A spread pool with two replicas on one of its nodes is still limited by that node.
    assert assess_pool("chat", (2, 1), 0.999, planning).smallest_outage == "one node"
    assert assess_pool("chat", (1,), 0.999, planning).smallest_outage == "one replica"


def test_the_defaults_are_labelled_assumptions_and_stated_values_are_not() -> None:
    default = parse(small_requirements()).planning
    assert "replica_failures_per_month" not in default.model_fields_set
    assert "node_failures_per_month" not in default.model_fields_set
    assert default.node_failures_per_month > 0
    stated = parse(small_requirements(replica_failures_per_month=0.5)).planning
    assert stated.replica_failures_per_month == 0.5


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("replica_failures_per_month", -1),
        ("node_failures_per_month", -1),
        ("node_failures_per_month", "often"),
        ("replica_mttr_min", 0),
        ("replica_mttr_min", "1h"),
    ],
)
def test_a_bad_failure_rate_or_repair_time_is_refused_by_field(field: str, value: object) -> None:
    with pytest.raises(SpecError, match=f"planning.{field}"):
        parse(small_requirements(**{field: value}))


def test_the_plan_states_each_pools_availability_and_flags_a_lone_fallback() -> None:
    data = small_requirements(
        replica_failures_per_month=1, replica_mttr_min=60, node_failures_per_month=0.5
    )
    data["workloads"][0]["models"]["fallback"] = "Llama-3.2-1B"
    data["workloads"][0]["slo"]["availability"] = 0.999
    plan = make_plan(parse(data))
    report = build_report(plan, sensitivity=False)
    section = report["availability"]
    u = 1.0 / 731.0  # one hour down in a month of 730 h of MTBF
    v = 0.5 / 730.5  # the node's: half an hour down a month
    assert section["replica_down_share"] == pytest.approx(u)
    assert section["node_down_share"] == pytest.approx(v)
    pools = {p["pool"]: p for p in section["pools"]}
    primary, fallback = pools["chat"], pools["chat-fallback"]
    n = primary["replicas"]
    assert n >= 2 and primary["tolerated_down"] == 1
    # Both pools fit one 8-GPU node: the node must be up, then at most one replica down.
    assert primary["nodes"] == 1 and primary["replicas_per_node"] == [n]
    assert primary["availability"] == pytest.approx(
        (1 - v) * ((1 - u) ** n + n * u * (1 - u) ** (n - 1))
    )
    assert primary["meets"] and primary["smallest_outage"] == "one node"
    # The fallback's one replica is down when it or its node is: 99.795%, short of 99.9%.
    assert fallback["replicas"] == 1 and fallback["tolerated_down"] == 0
    assert fallback["availability"] == pytest.approx((1 - u) * (1 - v))
    assert not fallback["meets"] and fallback["smallest_outage"] == "one replica"
    down = 1 - (1 - u) * (1 - v)
    assert math.isclose(fallback["downtime_min_per_month"], down * 730 * 60, rel_tol=1e-9)

    memo = render_memo(report, {})
    assert "### Availability" in memo
    short = f"chat-fallback ({100 * (1 - down):.3f}% against 99.900%) cannot meet the target"
    assert short in memo
    assert "SHORT: cannot meet it on its own" in memo
    assert "ok; all replicas on one node: a node failure is an outage" in memo
    assert "`planning.node_failures_per_month`" in memo
    assert "as the requirements state them" in memo


def test_a_pool_spread_one_replica_a_node_takes_two_failures_at_once() -> None:
    data = small_requirements(node_failures_per_month=0.5)
    data["hardware"][0]["gpus_per_node"] = 1
    plan = make_plan(parse(data))
    report = build_report(plan, sensitivity=False)
    section = report["availability"]
    u, v = section["replica_down_share"], section["node_down_share"]
    (pool,) = section["pools"]
    n = pool["replicas"]
    assert pool["nodes"] == n >= 2 and pool["replicas_per_node"] == [1] * n
    w = 1 - (1 - u) * (1 - v)  # a replica is lost on its own or with its node
    assert pool["availability"] == pytest.approx((1 - w) ** n + n * w * (1 - w) ** (n - 1))
    assert pool["smallest_outage"] == "two failures"
    assert "one replica a node: an outage takes two failures at once" in render_memo(report, {})


def test_the_memo_labels_default_failure_figures_as_assumptions() -> None:
    plan = make_plan(parse(small_requirements()))
    report = build_report(plan, sensitivity=False)
    assert report["availability"]["assumed"] is True
    memo = render_memo(report, {})
    assert "assumed, not measured" in memo
    assert "Each replica fails once a month and each node 0.5 times a month" in memo
