"""The memo's availability table: what each pool's replica count gives, under what assumptions,
and the pools that cannot meet their workloads' availability target on their own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inhouse.plan.memo_format import _table


def _share(value: float) -> str:
    """99.995%, 99.863%: three decimals, which is where the 99.9% targets differ."""
    return f"{100.0 * value:.3f}%"


def _times(count: float) -> str:
    return "once" if count == 1 else f"{count:g} times"


def _limit(p: Mapping[str, Any]) -> str:
    """The failure domain that limits the pool: the smallest failure that is an outage."""
    if p["smallest_outage"] == "one replica":
        return "one replica: its failure or its node's is an outage"
    if p["smallest_outage"] == "one node" and p["nodes"] == 1:
        return "all replicas on one node: a node failure is an outage"
    if p["smallest_outage"] == "one node":
        return f"{max(p['replicas_per_node'])} replicas on one node: its failure is an outage"
    return "one replica a node: an outage takes two failures at once"


def short_pools(r: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [p for p in (r.get("availability") or {}).get("pools", []) if not p["meets"]]


def availability_summary(r: Mapping[str, Any]) -> list[str]:
    """The summary's sentence where a pool falls short of its target on its own."""
    short = short_pools(r)
    if not short:
        return []
    names = ", ".join(
        f"{p['pool']} ({_share(p['availability'])} against {_share(p['target'])})" for p in short
    )
    return [f"Availability: {names} cannot meet the target on its own (section 5).", ""]


def availability_lines(r: Mapping[str, Any]) -> list[str]:
    a = r.get("availability")
    if not a:
        return []
    rows = []
    for p in a["pools"]:
        tolerated = "one" if p["tolerated_down"] == 1 else "none"
        verdict = "ok" if p["meets"] else "SHORT: cannot meet it on its own"
        verdict += f"; {_limit(p)}"
        rows.append(
            [
                p["pool"],
                str(p["replicas"]),
                tolerated,
                _share(p["availability"]),
                f"{p['downtime_min_per_month']:,.1f} min",
                f"{_share(p['target'])} ({p['allowed_min_per_month']:,.1f} min)",
                verdict,
            ]
        )
    source = (
        "assumed, not measured: replace them with your fleet's figures"
        if a["assumed"]
        else "as the requirements state them"
    )
    lines = ["### Availability", ""]
    lines += _table(
        [
            "pool",
            "replicas",
            "replicas lost it tolerates",
            "availability",
            "down a month",
            "target (allowed down)",
            "",
        ],
        rows,
    )
    lines += [
        f"Each replica fails {_times(a['replica_failures_per_month'])} a month and each node "
        f"{_times(a['node_failures_per_month'])} a month, each back in "
        f"{a['replica_mttr_min']:g} min (`planning.replica_failures_per_month`, "
        f"`planning.node_failures_per_month`, `planning.replica_mttr_min`; {source}), so a "
        f"replica is down {_share(a['replica_down_share'])} of the time on its own and a node "
        f"{_share(a['node_down_share'])}, taking every replica on it. A pool counts as "
        "available while no more replicas are down than it was checked without: one of two or "
        "more (the failover check below), none of one; so a node holding more replicas than "
        "that is an outage when it fails. Failures that take several nodes at once (a switch, "
        "a bad rollout) are not in the figure. The target is the highest `slo.availability` of "
        "the workloads the pool serves.",
        "",
    ]
    for p in short_pools(r):
        if p["role"] == "fallback":
            lines += [
                f"{p['pool']} has one replica and no spare: while it is down, what its primary "
                "cannot take (the primary down or saturated) has nowhere to go. Give it a second "
                "replica, or accept it as best effort.",
                "",
            ]
    return lines
