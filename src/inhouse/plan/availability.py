"""Availability arithmetic: what each pool's replica count gives under stated assumptions.

"99.9%" was read as "at least two replicas" with no figure behind it, and a one-replica pool
(a fallback) sat beside that rule unremarked. Here each replica is down, independently of the
others, a share `u = f·r / (730 h + f·r)` of the time, from `f` failures a month
(`planning.replica_failures_per_month`) of `r` hours each (`planning.replica_mttr_min`): the
MTBF form, `MTTR / (MTBF + MTTR)` with `MTBF = 730 h / f`. A pool of `n` replicas counts as
available while at most the replicas it was checked without are down: one where it has two or
more (the plan simulates one replica lost), none where it has one. So its availability is the
binomial `sum_{j<=k} C(n, j) u^j (1 - u)^(n - j)` with `k` tolerated, held against the highest
`slo.availability` of the workloads it serves.

Both inputs default to assumptions, not measurements (docs/plan.md says which); failures that
take several replicas at once (a node, a switch, a bad rollout) are outside the arithmetic, and
a pool whose replicas all sit on one node is named for it.
"""

from __future__ import annotations

import math
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
    nodes: int

    @property
    def meets(self) -> bool:
        return self.availability >= self.target

    @property
    def downtime_min_per_month(self) -> float:
        return (1.0 - self.availability) * MINUTES_PER_MONTH

    @property
    def allowed_min_per_month(self) -> float:
        return (1.0 - self.target) * MINUTES_PER_MONTH


def replica_down_share(planning: Planning) -> float:
    """The share of the time one replica is down: MTTR / (MTBF + MTTR)."""
    down_h = planning.replica_failures_per_month * planning.replica_mttr_min / 60.0
    return down_h / (HOURS_PER_MONTH + down_h)


def pool_availability(replicas: int, tolerated_down: int, down_share: float) -> float:
    """P(at most `tolerated_down` of `replicas` independent replicas are down)."""
    up = 1.0 - down_share
    return sum(
        math.comb(replicas, j) * down_share**j * up ** (replicas - j)
        for j in range(min(tolerated_down, replicas) + 1)
    )


def assess_pool(
    pool: str, replicas: int, target: float, nodes: int, planning: Planning
) -> PoolAvailability:
    tolerated = 1 if replicas >= 2 else 0
    share = replica_down_share(planning)
    return PoolAvailability(
        pool=pool,
        replicas=replicas,
        tolerated_down=tolerated,
        replica_down_share=share,
        availability=pool_availability(replicas, tolerated, share),
        target=target,
        nodes=nodes,
    )


def availability_report(plan: Plan) -> dict[str, Any]:
    """`plan.json` -> `availability`: the assumptions, then each pool's figure and verdict."""
    planning = plan.requirements.planning
    pools = []
    for pool in plan.chosen.pools:
        target = max(plan.requirements.workload(w).slo.availability for w in pool.need.slos)
        nodes = len({node for node, _ in plan.chosen.placement.get(pool.need.name, [])})
        a = assess_pool(pool.need.name, pool.replicas, target, nodes, planning)
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
            }
        )
    return {
        "replica_failures_per_month": planning.replica_failures_per_month,
        "replica_mttr_min": planning.replica_mttr_min,
        "replica_down_share": replica_down_share(planning),
        "assumed": "replica_failures_per_month" not in planning.model_fields_set
        or "replica_mttr_min" not in planning.model_fields_set,
        "pools": pools,
    }
