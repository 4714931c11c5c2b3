"""The search: layouts × sized pool configurations → whole-stack candidates, ranked by cost.

For every layout, each pool need is sized on every configuration (`sizing.size_need`, cached
across layouts); the cheapest few per need are combined. A combination gets its fallback pool,
must fit the hardware on offer (GPU count per type, whole nodes, tensor-parallel groups inside one
NVLink domain), and — on owned or bought nodes, whose GPUs are paid for anyway — spare GPUs are
given to the busiest pools as extra replicas. Candidates rank by $/hour, then by the smallest
margin between any analytic p95 and its target (larger is better).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from inhouse.plan.cost import hardware_usd_per_hour, node_cost, nodes_needed
from inhouse.plan.dist import mix
from inhouse.plan.fallback_pools import why_none, with_fallbacks
from inhouse.plan.layout import Layout, build_layouts
from inhouse.plan.requirements import HardwareOffer, Planning, Requirements
from inhouse.plan.sizing import (
    Corrections,
    PoolNeed,
    Rejected,
    Sized,
    SizingResult,
    corrected_ms,
    resize,
    size_choice,
    size_need,
)
from inhouse.plan.traffic import TrafficProfile
from inhouse.spec.catalog import get_gpu

TOP_PER_NEED = 3


@dataclass(slots=True)
class Candidate:
    """A whole stack: pools sized, placed and priced."""

    layout: Layout
    pools: list[Sized]
    fallbacks: dict[str, str]  # pool -> fallback pool
    gpus: dict[str, int] = field(default_factory=dict)
    nodes: dict[str, int] = field(default_factory=dict)
    placement: dict[str, list[tuple[int, tuple[int, ...]]]] = field(default_factory=dict)
    usd_per_hour: float = 0.0
    margin: float = 0.0
    predictions: dict[str, dict[str, float]] = field(default_factory=dict)
    floors: dict[str, dict[str, float]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        parts = [f"{p.need.name}: {p.replicas}x {p.choice.label}" for p in self.pools]
        return " | ".join(parts)


@dataclass(slots=True)
class SearchResult:
    candidates: list[Candidate]
    rejected_layouts: list[tuple[Layout, list[str]]]
    sizing: dict[str, SizingResult]
    hardware_misses: list[Candidate]


def offers_by_gpu(requirements: Requirements) -> dict[str, HardwareOffer]:
    return {get_gpu(offer.gpu).name: offer for offer in requirements.hardware}


def need_key(need: PoolNeed) -> str:
    # NOTE: the load is part of the key: a fallback need is the workload at a share of its
    # peak that depends on its primary's replicas, and every candidate's fallback was the one
    # sized for the first candidate's primary.
    streams = ",".join(
        f"{s.name}:{s.share:.4f}:{len(s.shapes.prompt)}:{s.profile.peak_rate_per_s!r}:"
        f"{s.profile.peak_sessions}"
        for s in need.streams
    )
    quantiles = ",".join(f"{k}:{v!r}" for k, v in sorted(need.quantiles.items()))
    return (
        f"{need.name}|{need.role}|{streams}|{quantiles}|{need.long_prompt_tokens}|"
        f"{need.max_model_len}"
    )


def search(
    requirements: Requirements,
    profiles: dict[str, TrafficProfile],
    planning: Planning,
    *,
    time_scale: float = 1.0,
    corrections: Corrections | None = None,
) -> SearchResult:
    offers = offers_by_gpu(requirements)
    prices = {gpu: node_cost(offer).usd_per_gpu_hour for gpu, offer in offers.items()}
    max_tp = {gpu: offer.gpus_per_node for gpu, offer in offers.items()}
    cache: dict[str, SizingResult] = {}
    candidates: list[Candidate] = []
    misses: list[Candidate] = []
    rejected: list[tuple[Layout, list[str]]] = []
    for layout in build_layouts(requirements, profiles):
        options: list[list[Sized]] = []
        reasons: list[str] = []
        for need in layout.needs:
            key = need_key(need)
            if key not in cache:
                cache[key] = size_need(
                    need,
                    prices,
                    planning,
                    time_scale=time_scale,
                    corrections=corrections,
                    max_tp=max_tp,
                )
            sized = _diverse(cache[key].sized)
            if not sized:
                reasons.append(why_none(need, cache[key].rejected))
            options.append(sized)
        if reasons:
            rejected.append((layout, reasons))
            continue
        for combo in itertools.product(*options):
            candidate = _assemble(
                requirements,
                profiles,
                layout,
                list(combo),
                planning,
                prices,
                cache,
                time_scale,
                corrections,
            )
            (misses if candidate.problems else candidates).append(candidate)
    candidates.sort(key=lambda c: (round(c.usd_per_hour, 2), -c.margin))
    misses.sort(key=lambda c: c.usd_per_hour)
    return SearchResult(candidates, rejected, cache, misses)


def _diverse(sized: Sequence[Sized]) -> list[Sized]:
    """The cheapest few, at most one per (model, GPU, TP, quantization)."""
    out: list[Sized] = []
    seen: set[tuple[str, str, int, str]] = set()
    for item in sized:
        key = (item.choice.model, item.choice.gpu, item.choice.tp, item.choice.quant)
        if key in seen:
            continue
        seen.add(key)
        out.append(item)
        if len(out) == TOP_PER_NEED:
            break
    return out


def _assemble(
    requirements: Requirements,
    profiles: dict[str, TrafficProfile],
    layout: Layout,
    pools: list[Sized],
    planning: Planning,
    prices: dict[str, float],
    cache: dict[str, SizingResult],
    time_scale: float,
    corrections: Corrections | None,
) -> Candidate:
    max_tp = {g: o.gpus_per_node for g, o in offers_by_gpu(requirements).items()}

    def size(need: PoolNeed) -> SizingResult:
        key = need_key(need)
        if key not in cache:
            cache[key] = size_need(
                need,
                prices,
                planning,
                time_scale=time_scale,
                corrections=corrections,
                max_tp=max_tp,
            )
        return cache[key]

    return _priced(requirements, profiles, layout, pools, planning, size, time_scale, corrections)


def _priced(
    requirements: Requirements,
    profiles: dict[str, TrafficProfile],
    layout: Layout,
    primaries: list[Sized],
    planning: Planning,
    size: Callable[[PoolNeed], SizingResult],
    time_scale: float,
    corrections: Corrections | None,
) -> Candidate:
    """The primaries with their fallback pools, fitted to the hardware, forecast and priced.

    NOTE: a fallback pool is sized for one lost replica of its primary, so it is sized from the
    primary's final replica count: spare GPUs on owned nodes grow the primaries after the first
    fit, and then the fallbacks are sized again for the grown primaries and the whole refitted
    (it was sized from the primary's first count, e.g. 1/7 of the peak beside 8 replicas)."""

    def size_as(need: PoolNeed, like: Sized) -> Sized | Rejected:
        """The fewest replicas of `like`'s configuration that meet `need`."""
        return size_choice(
            need,
            like.choice,
            planning,
            like.usd_per_gpu_hour,
            time_scale=time_scale,
            corrections=corrections,
        )

    while True:
        pools, fallbacks, problems = with_fallbacks(
            requirements, profiles, primaries, size, size_as
        )
        candidate = Candidate(layout, pools, fallbacks, problems=problems)
        _fit_hardware(candidate, requirements, planning, time_scale)
        fitted = [p for p in candidate.pools if p.need.role != "fallback"]
        if not fallbacks or [p.replicas for p in fitted] == [p.replicas for p in primaries]:
            break
        # Terminates: the spare GPUs only add primary replicas, and a fallback sized for less
        # load needs no more GPUs, so the nodes never grow and the replicas are bounded by them.
        assert sum(p.replicas for p in fitted) > sum(p.replicas for p in primaries), "no growth"
        primaries = fitted
    candidate.predictions = predict_workloads(candidate.pools, corrections)
    candidate.floors = predict_workloads(candidate.pools, floor=True)
    candidate.margin = _margin(candidate, requirements, planning)
    return candidate


def _fit_hardware(
    candidate: Candidate, requirements: Requirements, planning: Planning, time_scale: float
) -> None:
    offers = offers_by_gpu(requirements)
    for gpu, offer in offers.items():
        on_gpu = [i for i, p in enumerate(candidate.pools) if p.choice.gpu == gpu]
        used = sum(candidate.pools[i].num_gpus for i in on_gpu)
        nodes = nodes_needed(offer, used)
        if offer.max_nodes is not None and nodes > offer.max_nodes:
            have = offer.max_nodes * offer.gpus_per_node
            candidate.problems.append(
                f"needs {used} {gpu} GPUs ({nodes} nodes); the hardware offers {have} "
                f"({offer.max_nodes} node{'s' if offer.max_nodes > 1 else ''})"
            )
            continue
        if offer.pricing == "capex" and on_gpu:
            _fill_spare(candidate, on_gpu, nodes * offer.gpus_per_node - used, planning, time_scale)
            used = sum(candidate.pools[i].num_gpus for i in on_gpu)
        if used:
            candidate.gpus[gpu] = used
            candidate.nodes[gpu] = nodes
            candidate.usd_per_hour += hardware_usd_per_hour(offer, used)
            candidate.placement.update(_place(candidate.pools, on_gpu, offer.gpus_per_node))


def _fill_spare(
    candidate: Candidate, on_gpu: list[int], spare: int, planning: Planning, time_scale: float
) -> None:
    """Give GPUs already paid for to the busiest pools that fit them, as extra replicas."""
    while spare > 0:
        fits = [i for i in on_gpu if candidate.pools[i].choice.tp <= spare]
        if not fits:
            return
        busiest = max(fits, key=lambda i: candidate.pools[i].forecast.utilization)
        pool = candidate.pools[busiest]
        candidate.pools[busiest] = resize(pool, pool.replicas + 1, planning, time_scale)
        spare -= pool.choice.tp


def _place(
    pools: list[Sized], on_gpu: list[int], gpus_per_node: int
) -> dict[str, list[tuple[int, tuple[int, ...]]]]:
    """(node, GPU indices) per replica: largest TP groups first, each inside one node, aligned
    to its size so a group never straddles an NVLink half."""
    order = sorted(
        (
            (pools[i].choice.tp, pools[i].need.name, r)
            for i in on_gpu
            for r in range(pools[i].replicas)
        ),
        key=lambda item: -item[0],
    )
    next_free: list[int] = []
    out: dict[str, list[tuple[int, tuple[int, ...]]]] = {}
    for tp, name, _ in order:
        node = next((n for n, used in enumerate(next_free) if used + tp <= gpus_per_node), None)
        if node is None:
            next_free.append(0)
            node = len(next_free) - 1
        start = next_free[node]
        next_free[node] += tp
        out.setdefault(name, []).append((node, tuple(range(start, start + tp))))
    return out


def predict_workloads(
    pools: Sequence[Sized], corrections: Corrections | None = None, *, floor: bool = False
) -> dict[str, dict[str, float]]:
    """Analytic p95 (ms) per workload and metric, mixing the pools that serve it by share
    (corrected as in `sizing.corrected_ms`; `floor`: on idle replicas). Fallback pools carry no
    traffic in normal operation and are left out."""
    parts: dict[str, list[tuple[Sized, float]]] = {}
    for pool in pools:
        if pool.need.role == "fallback":
            continue
        for stream in pool.need.streams:
            parts.setdefault(stream.name, []).append((pool, stream.share))
    out: dict[str, dict[str, float]] = {}
    for workload, items in parts.items():
        # Long prompts with a TTFT of their own: each TTFT is over its own pools' prompts.
        by_length = any(p.need.slos[workload].has_long_ttft for p, _ in items)
        long = [(p, s) for p, s in items if p.need.role == "long"] if by_length else []
        metrics: dict[str, float] = {}
        for metric in ("ttft", "itl", "tpot", "e2e"):
            part = items
            if metric == "ttft" and long:
                part = [(p, s) for p, s in items if p.need.role != "long"] or items
            metrics[metric] = _mixed_p95(part, workload, metric, corrections, floor)
        if long:
            metrics["long_ttft"] = _mixed_p95(
                long, workload, "ttft", corrections, floor, "long_ttft"
            )
        out[workload] = metrics
    return out


def _mixed_p95(
    items: Sequence[tuple[Sized, float]],
    workload: str,
    metric: str,
    corrections: Corrections | None,
    floor: bool,
    correction: str | None = None,
) -> float:
    """The p95 (ms) of `metric` over the pools serving the workload, mixed by share, corrected
    by the simulator's factor for `correction` (default: the metric's own)."""
    idle = mix([(getattr(p.floor.streams[workload], metric), s) for p, s in items])
    idle_ms = 1000.0 * idle.quantile(0.95)
    if floor:
        return idle_ms
    dist = mix([(getattr(p.forecast.streams[workload], metric), share) for p, share in items])
    value = 1000.0 * dist.quantile(0.95)
    return corrected_ms(value, idle_ms, corrections, workload, correction or metric)


def _margin(candidate: Candidate, requirements: Requirements, planning: Planning) -> float:
    """Smallest relative slack: 1 − p95/target over every SLO, and 1 − utilization/cap."""
    slacks = [1.0]
    for req in requirements.workloads:
        predicted = candidate.predictions.get(req.name, {})
        for metric, target in req.slo.targets().items():
            if metric in predicted:
                slacks.append(1.0 - predicted[metric] / target)
    for pool in candidate.pools:
        if pool.need.role != "fallback":
            slacks.append(1.0 - pool.forecast.utilization / planning.max_utilization)
    return min(slacks)


def grow(
    candidate: Candidate,
    workloads: Sequence[str],
    requirements: Requirements,
    profiles: dict[str, TrafficProfile],
    planning: Planning,
    corrections: Corrections | None = None,
) -> Candidate | None:
    """The candidate with one more replica in each pool serving one of `workloads` (the
    simulator's answer to a near miss), its fallback pools sized again for the grown pools,
    re-placed and re-priced; None if it no longer fits."""
    primaries = [
        resize(p, p.replicas + 1, planning) if any(w in p.need.slos for w in workloads) else p
        for p in candidate.pools
        if p.need.role != "fallback"
    ]
    offers = offers_by_gpu(requirements)
    prices = {gpu: node_cost(offer).usd_per_gpu_hour for gpu, offer in offers.items()}
    max_tp = {gpu: offer.gpus_per_node for gpu, offer in offers.items()}

    def size(need: PoolNeed) -> SizingResult:
        return size_need(need, prices, planning, corrections=corrections, max_tp=max_tp)

    grown = _priced(
        requirements, profiles, candidate.layout, primaries, planning, size, 1.0, corrections
    )
    return None if grown.problems else grown
