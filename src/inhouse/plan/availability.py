"""Availability arithmetic: what each pool's replica count gives under stated assumptions.

"99.9%" was read as "at least two replicas" with no figure behind it, and a one-replica pool
(a fallback) sat beside that rule unremarked. Here each replica is down on its own a share
`u = f·r / (730 h + f·r)` of the time, from `f` failures a month
(`planning.replica_failures_per_month`) of `r` hours each (`planning.replica_mttr_min`): the
MTBF form, `MTTR / (MTBF + MTTR)` with `MTBF = 730 h / f`. Each node is down a share `v` of the
time the same way (`planning.node_failures_per_month`, back in the same `r`), taking every
replica on it: two replicas on one node were counted as independent, and a node failure that
takes both was not in the figure. A pool counts as available while at most the replicas it was
checked without are down: one where it has two or more (the plan simulates one replica lost),
none where it has one. So its availability is `P(D <= k)`, with `k` tolerated and `D` the sum
over its nodes of the replicas down on each: all `m` of a node's with probability `v`, else a
binomial `C(m, j) u^j (1 - u)^(m - j)`. It is held against the highest `slo.availability` of
the workloads it serves.

The inputs default to assumptions, not measurements (docs/plan.md says which); failures that
take several nodes at once (a switch, a bad rollout) are outside the arithmetic.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inhouse.plan.requirements import HOURS_PER_MONTH, Planning

if TYPE_CHECKING:
    from inhouse.plan.planner import Plan

MINUTES_PER_MONTH = HOURS_PER_MONTH * 60.0


@dataclass(frozen=True, slots=True)
class PoolAvailability:
    pool: str
    replicas: int
    tolerated_down: int
    replica_down_share: float
    availability: float
    target: float
    replicas_per_node: tuple[int, ...]

    @property
    def nodes(self) -> int:
        return len(self.replicas_per_node)

    @property
    def smallest_outage(self) -> str:
        """The smallest failure that is an outage: one replica (a pool of one), one node (a
        node holding more replicas than the pool tolerates losing), or two failures at once."""
        if self.tolerated_down == 0:
            return "one replica"
        if max(self.replicas_per_node) > self.tolerated_down:
            return "one node"
        return "two failures"

    @property
    def meets(self) -> bool:
        return self.availability >= self.target

    @property
    def downtime_min_per_month(self) -> float:
        return (1.0 - self.availability) * MINUTES_PER_MONTH

    @property
    def allowed_min_per_month(self) -> float:
        return (1.0 - self.target) * MINUTES_PER_MONTH


def _down_share(failures_per_month: float, mttr_min: float) -> float:
    down_h = failures_per_month * mttr_min / 60.0
    return down_h / (HOURS_PER_MONTH + down_h)


def replica_down_share(planning: Planning) -> float:
    """The share of the time one replica is down on its own: MTTR / (MTBF + MTTR)."""
    return _down_share(planning.replica_failures_per_month, planning.replica_mttr_min)


def node_down_share(planning: Planning) -> float:
    """The share of the time one node is down, with every replica on it."""
    return _down_share(planning.node_failures_per_month, planning.replica_mttr_min)


def pool_availability(replicas: int, tolerated_down: int, down_share: float) -> float:
    """P(at most `tolerated_down` of `replicas` independent replicas are down)."""
    up = 1.0 - down_share
    return sum(
        math.comb(replicas, j) * down_share**j * up ** (replicas - j)
        for j in range(min(tolerated_down, replicas) + 1)
    )


def _replicas_down(on_node: int, replica_share: float, node_share: float) -> list[float]:
    """P(j of a node's `on_node` replicas are down), j = 0..on_node: all with the node, else
    each on its own."""
    up = 1.0 - replica_share
    dist = [
        (1.0 - node_share) * math.comb(on_node, j) * replica_share**j * up ** (on_node - j)
        for j in range(on_node + 1)
    ]
    dist[on_node] += node_share
    return dist


def spread_availability(
    replicas_per_node: Sequence[int],
    tolerated_down: int,
    replica_share: float,
    node_share: float,
) -> float:
    """P(at most `tolerated_down` replicas are down), nodes failing independently of each other
    and each taking its replicas: the per-node distributions of replicas down, convolved."""
    total = [1.0]
    for on_node in replicas_per_node:
        node = _replicas_down(on_node, replica_share, node_share)
        out = [0.0] * (len(total) + on_node)
        for i, p in enumerate(total):
            for j, q in enumerate(node):
                out[i + j] += p * q
        total = out
    return sum(total[: tolerated_down + 1])


def assess_pool(
    pool: str, replicas_per_node: Sequence[int], target: float, planning: Planning
) -> PoolAvailability:
    """`replicas_per_node`: how many of the pool's replicas each of its nodes holds."""
    per_node = tuple(m for m in replicas_per_node if m > 0)
    assert per_node, f"pool {pool} has no replica placed on a node"
    replicas = sum(per_node)
    tolerated = 1 if replicas >= 2 else 0
    share = replica_down_share(planning)
    return PoolAvailability(
        pool=pool,
        replicas=replicas,
        tolerated_down=tolerated,
        replica_down_share=share,
        availability=spread_availability(per_node, tolerated, share, node_down_share(planning)),
        target=target,
        replicas_per_node=per_node,
    )


def availability_report(plan: Plan) -> dict[str, Any]:
    """`plan.json` -> `availability`: the assumptions, then each pool's figure and verdict."""
    planning = plan.requirements.planning
    pools = []
    for pool in plan.chosen.pools:
        target = max(plan.requirements.workload(w).slo.availability for w in pool.need.slos)
        placed = Counter(node for node, _ in plan.chosen.placement.get(pool.need.name, []))
        # Every replica is placed (`search._place`); one not placed is counted on a node alone.
        per_node = [placed[n] for n in sorted(placed)]
        per_node += [1] * (pool.replicas - sum(per_node))
        a = assess_pool(pool.need.name, per_node, target, planning)
        pools.append(
            {
                "pool": a.pool,
                "role": pool.need.role,
                "replicas": a.replicas,
                "tolerated_down": a.tolerated_down,
                "availability": a.availability,
                "target": a.target,
                "meets": a.meets,
                "downtime_min_per_month": a.downtime_min_per_month,
                "allowed_min_per_month": a.allowed_min_per_month,
                "nodes": a.nodes,
                "replicas_per_node": list(a.replicas_per_node),
                "smallest_outage": a.smallest_outage,
            }
        )
    return {
        "replica_failures_per_month": planning.replica_failures_per_month,
        "replica_mttr_min": planning.replica_mttr_min,
        "replica_down_share": replica_down_share(planning),
        "node_failures_per_month": planning.node_failures_per_month,
        "node_down_share": node_down_share(planning),
        "assumed": any(
            field not in planning.model_fields_set
            for field in (
                "replica_failures_per_month",
                "replica_mttr_min",
                "node_failures_per_month",
            )
        ),
        "pools": pools,
    }
