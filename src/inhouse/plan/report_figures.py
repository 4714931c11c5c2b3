"""What `plan.json` quotes but its assembler (`report.build_report`) does not compute: each
workload's share of the stack's cost at its average traffic (one forecast per pool) and the
sensitivity runs. Computed once, before assembly, as typed values.

A workload's cost share: a pool's $/h is its GPUs' part of what its GPU type costs the stack
(`hardware_usd_per_hour` of that offer: an H200 pool pays H200 prices, a pool on an owned node
its share of that node), split among the workloads it serves by the replica time (prefill +
decode busy) each takes at average traffic; a fallback pool's $/h is split evenly among the
workloads it stands in for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from inhouse.plan.analytic import PoolModel
from inhouse.plan.cost import WorkloadCost, hardware_usd_per_hour
from inhouse.plan.planner import Plan
from inhouse.plan.search import offers_by_gpu
from inhouse.plan.sensitivity import run_sensitivity
from inhouse.plan.sizing import Sized
from inhouse.plan.traffic import TrafficProfile


@dataclass(frozen=True, slots=True)
class PoolShare:
    """One workload's part of one pool at its average traffic (per pool: all its replicas)."""

    usd_per_hour: float
    input_usd_per_hour: float  # the prefill part of usd_per_hour
    requests_per_s: float = 0.0
    input_tokens_per_s: float = 0.0
    cached_tokens_per_s: float = 0.0
    output_tokens_per_s: float = 0.0


@dataclass(frozen=True, slots=True)
class ReportFigures:
    """The figures `build_report` assembles: cost shares by workload, sensitivity rows."""

    costs: Mapping[str, WorkloadCost]
    sensitivity: tuple[Mapping[str, object], ...]


def report_figures(plan: Plan, *, sensitivity: bool = True) -> ReportFigures:
    rows: tuple[Mapping[str, object], ...] = ()
    if sensitivity:
        req = plan.requirements
        rows = tuple(
            run_sensitivity(req, plan.chosen, plan.profiles, plan.corrections, _observed(plan))
        )
    return ReportFigures(workload_costs(plan), rows)


def _observed(plan: Plan) -> dict[str, dict[str, dict[str, float]]] | None:
    """The trigger signals the 1x simulation showed (None: an unverified plan)."""
    check = next((c for c in plan.checks if c.multiple == 1.0 and not c.down), None)
    return check.signals if check is not None else None


def workload_costs(plan: Plan) -> dict[str, WorkloadCost]:
    """Each workload's share of the stack's $/h at its average traffic (module docstring)."""
    shares: dict[str, list[PoolShare]] = {w.name: [] for w in plan.requirements.workloads}
    chosen = plan.chosen
    offers = offers_by_gpu(plan.requirements)
    for pool in chosen.pools:
        # NOTE: by the pool's own GPU type, not the stack's average $/GPU: with H100s and H200s
        # in one plan, an even split charged each pool the mean of the two prices.
        gpu = pool.choice.gpu
        used = chosen.gpus[gpu]
        pool_usd = hardware_usd_per_hour(offers[gpu], used) * pool.num_gpus / used
        for workload, share in pool_shares(pool, pool_usd).items():
            shares[workload].append(share)
    hours = plan.requirements.usage.active_hours_per_month
    out = {}
    for name, parts in shares.items():
        usd = sum(p.usd_per_hour for p in parts)
        usd_in = sum(p.input_usd_per_hour for p in parts)
        out[name] = WorkloadCost(
            name,
            usd,
            usd_in,
            usd - usd_in,
            sum(p.requests_per_s for p in parts),
            sum(p.input_tokens_per_s for p in parts),
            sum(p.cached_tokens_per_s for p in parts),
            sum(p.output_tokens_per_s for p in parts),
            hours,
        )
    return out


def pool_shares(pool: Sized, pool_usd: float) -> dict[str, PoolShare]:
    """The pool's $/h (`pool_usd`) and traffic at average load, by the workload it serves."""
    if pool.need.role == "fallback":
        each = pool_usd / len(pool.need.slos)
        return {w: PoolShare(each, 0.0) for w in pool.need.slos}
    streams = tuple(
        type(s)(s.profile.scaled(load_factor=_avg_over_peak(s.profile)), s.shapes, s.share)
        for s in pool.need.streams
    )
    f = PoolModel(pool.replica, streams, 1.0).forecast(1.0 / pool.replicas, pool.replicas)
    busy = {w: s.prefill_busy + s.decode_busy for w, s in f.streams.items()}
    total_busy = sum(busy.values()) or 1.0
    out = {}
    for w, s in f.streams.items():
        usd = pool_usd * busy[w] / total_busy
        prefill_share = s.prefill_busy / (s.prefill_busy + s.decode_busy or 1.0)
        out[w] = PoolShare(
            usd,
            usd * prefill_share,
            s.rate_per_s * pool.replicas,
            s.input_tokens_per_s * pool.replicas,
            s.cached_tokens_per_s * pool.replicas,
            s.output_tokens_per_s * pool.replicas,
        )
    return out


def _avg_over_peak(profile: TrafficProfile) -> float:
    if profile.is_sessions:
        return profile.avg_sessions / profile.peak_sessions
    return profile.avg_rate_per_s / profile.peak_rate_per_s
