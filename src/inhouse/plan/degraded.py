"""Degraded mode: one replica lost per pool, judged against the degraded SLO.

* `degraded_checks`: the stack with one replica of each multi-replica pool lost (one pool at a
  time), each workload against its degraded SLO (its normal one where none is stated).
* `shed_checks`: where the workloads a degraded pool serves sit in two or more gateway tiers,
  the same run with the lowest tier shed (the gateway refuses it while the replica is lost:
  modelled by not sending that tier's traffic at all). Reported beside the unshed run.
* `misses`: the workloads whose stated degraded SLO a run breaks.
* `cheapest_other`: the analytic search with `enforce_degraded_slo` flipped, to say what the
  other choice costs (the cheapest plan meeting only the normal SLOs, or the cheapest that also
  meets the degraded one).

With `planning.enforce_degraded_slo` (the default) the planner accepts a candidate only when its
unshed degraded runs meet every stated degraded SLO; when no candidate does, it keeps the best
plan for the normal SLOs and says which constraint prevents the degraded one (`Shortfall`).
"""

from __future__ import annotations

from dataclasses import dataclass

from inhouse.plan.requirements import Requirements
from inhouse.plan.search import search
from inhouse.plan.traffic import TrafficProfile
from inhouse.plan.verify import SimCheck, run_check, tier_priority
from inhouse.spec.stack import StackSpec


@dataclass(frozen=True, slots=True)
class Alternative:
    """The cheapest plan of the other choice: its label and price, or why there is none."""

    meets: str  # "degraded" (also meets the degraded SLO) or "normal" (the normal SLOs only)
    label: str | None
    usd_per_hour: float | None
    why_none: str | None = None


def enforcing(requirements: Requirements) -> bool:
    """Whether the planner sizes for the degraded SLO: asked, and some workload states one."""
    return requirements.planning.enforce_degraded_slo and any(
        w.degraded_slo is not None for w in requirements.workloads
    )


def degraded_pools(stack: StackSpec) -> list[str]:
    return [p.name for p in stack.pools if p.role != "fallback" and p.replicas >= 2]


def degraded_checks(
    stack: StackSpec, requirements: Requirements, names: dict[str, str]
) -> list[SimCheck]:
    duration = requirements.planning.stress_duration_s
    return [
        run_check(stack, requirements, names, down={pool: 1}, degraded=True, duration_s=duration)
        for pool in degraded_pools(stack)
    ]


def lowest_tier(stack: StackSpec, requirements: Requirements, pool: str) -> frozenset[str]:
    """The workloads of the lowest tier among those `pool` serves, if it serves two or more
    tiers (else nothing to shed)."""
    served = [w for w in requirements.workloads if _serves(stack, pool, w.name)]
    tiers = {tier_priority(w.tier) for w in served}
    if len(tiers) < 2:
        return frozenset()
    last = max(tiers)
    return frozenset(w.name for w in served if tier_priority(w.tier) == last)


def _serves(stack: StackSpec, pool: str, workload: str) -> bool:
    """Whether `pool` takes the workload's requests: by name (clients send the workload's name,
    or its adapter's), or as the long pool of one that does."""
    return any(
        workload in p.model_names and (p.name == pool or p.long_pool == pool) for p in stack.pools
    )


def shed_checks(
    stack: StackSpec, requirements: Requirements, names: dict[str, str]
) -> list[SimCheck]:
    """The degraded runs again with the lowest tier shed, for the pools serving several."""
    duration = requirements.planning.stress_duration_s
    out = []
    for pool in degraded_pools(stack):
        shed = lowest_tier(stack, requirements, pool)
        if shed:
            out.append(
                run_check(
                    stack,
                    requirements,
                    names,
                    down={pool: 1},
                    degraded=True,
                    duration_s=duration,
                    shed=shed,
                )
            )
    return out


def misses(requirements: Requirements, checks: list[SimCheck]) -> list[str]:
    """Workloads with a stated degraded SLO that a degraded run breaks (or fails requests of)."""
    stated = {w.name for w in requirements.workloads if w.degraded_slo is not None}
    out: list[str] = []
    for check in checks:
        for name, summary in check.workloads.items():
            if name in stated and not summary["pass"] and name not in out:
                out.append(name)
    return out


def cheapest_other(
    requirements: Requirements, profiles: dict[str, TrafficProfile], *, enforce: bool
) -> Alternative:
    """The analytic search's cheapest candidate with `enforce_degraded_slo` set to `enforce`."""
    planning = requirements.planning.model_copy(update={"enforce_degraded_slo": enforce})
    result = search(requirements, profiles, planning)
    meets = "degraded" if enforce else "normal"
    if not result.candidates:
        reasons = [r for _, rs in result.rejected_layouts for r in rs]
        reasons += ["; ".join(m.problems) for m in result.hardware_misses[:1]]
        return Alternative(meets, None, None, reasons[0] if reasons else "no candidate fits")
    best = result.candidates[0]
    return Alternative(meets, best.label, best.usd_per_hour)
