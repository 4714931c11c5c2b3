"""The fallback pool of each workload that names a fallback model: the cheapest one that
serves one lost replica of any of the workload's pools, or why none can (`search` adds it to
each candidate); and why a pool need has no configuration at all (`why_none`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from inhouse.plan.layout import fallback_need
from inhouse.plan.requirements import Requirements
from inhouse.plan.sizing import PoolNeed, Rejected, Sized, SizingResult
from inhouse.plan.traffic import TrafficProfile
from inhouse.spec.catalog import get_model


def why_none(need: PoolNeed, rejected: Sequence[Rejected]) -> str:
    """The binding constraint of a need no configuration meets: the latency floor closest to
    its target, else memory, else capacity."""
    floors = [r for r in rejected if r.floor_ms > 0]
    if floors:
        best = min(floors, key=lambda r: r.floor_ms / r.target_ms)
        assert best.choice is not None
        prompts = ", ".join(
            f"{s.name} p95 prompt {float(np.quantile(s.shapes.prompt, 0.95)):,.0f} tokens"
            for s in need.streams
        )
        return (
            f"pool {need.name}: {best.reason} ({prompts}; fastest configuration: "
            f"{best.choice.label})"
        )
    if rejected:
        return f"pool {need.name}: {rejected[0].reason}"
    # NOTE: with every list in `planning` non-empty and the quality floor checked up front,
    # what is left is TP: "no GPU on offer fits the model" sent people to buy bigger GPUs.
    models = ", ".join(
        f"{name} ({get_model(name).num_attention_heads} attention heads)" for name in need.models
    )
    return (
        f"pool {need.name}: no configuration to try: no degree in planning.tensor_parallel "
        f"divides the attention heads of {models or 'an allowed model'} and fits in one node "
        "(hardware gpus_per_node) of a GPU on offer"
    )


def with_fallbacks(
    requirements: Requirements,
    profiles: dict[str, TrafficProfile],
    primaries: list[Sized],
    size: Callable[[PoolNeed], SizingResult],
    size_as: Callable[[PoolNeed, Sized], Sized | Rejected],
) -> tuple[list[Sized], dict[str, str], list[str]]:
    """The primaries plus, per workload naming a fallback model, its cheapest fallback pool
    that serves one lost replica of any pool of the workload (`fallback_need`: on one pool,
    `1 / replicas` of it; split at a prompt length, a replica of either part, each with its
    own prompts); which pool falls back to which; and the fallbacks no configuration serves.

    NOTE: a fallback model that cannot serve (a context shorter than the prompts, an SLO it
    cannot meet) was left out without a word, and the plan went out with no fallback pool."""
    fallbacks: dict[str, str] = {}
    problems: list[str] = []
    all_pools = list(primaries)
    for req in requirements.workloads:
        primary = next((p for p in primaries if p.need.name == req.name), None)
        if primary is None or req.models.fallback is None:
            continue  # no fallback, or served as adapters on another workload's pool
        losses: list[PoolNeed] = []
        for pool in primaries:
            for stream in pool.need.streams:
                if stream.name == req.name:
                    quantile = pool.need.quantiles[req.name]
                    # The lost part's own SLO: a long-context pool's loss sends long prompts,
                    # held to the long-prompt TTFT.
                    slo = pool.need.degraded_slos[req.name] or pool.need.slos[req.name]
                    need = fallback_need(
                        req, profiles[req.name], stream, pool.replicas, quantile, slo
                    )
                    assert need is not None, "a workload naming a fallback model"
                    losses.append(need)
        chosen = _serving_every_loss(losses, size, size_as)
        if chosen is None:
            problems.append(_fallback_problem(req.name, req.models.fallback, losses, size))
        else:
            all_pools.append(chosen)
            for pool in primaries:
                if req.name in pool.need.slos:
                    fallbacks[pool.need.name] = chosen.need.name
    return all_pools, fallbacks, problems


def _fallback_problem(
    workload: str,
    model: str,
    losses: list[PoolNeed],
    size: Callable[[PoolNeed], SizingResult],
) -> str:
    """Why no fallback pool serves the workload's lost replicas, naming the field."""
    unserved = next((loss for loss in losses if not size(loss).sized), losses[0])
    why = why_none(unserved, size(unserved).rejected)
    return (
        f"workloads[{workload}].models.fallback ({model}) cannot take one lost replica's "
        f"traffic: {why}; allow a fallback model that can, or drop models.fallback"
    )


def _serving_every_loss(
    losses: list[PoolNeed],
    size: Callable[[PoolNeed], SizingResult],
    size_as: Callable[[PoolNeed, Sized], Sized | Rejected],
) -> Sized | None:
    """The cheapest fallback that serves each of `losses` (one at a time): every loss's own
    cheapest configurations, each given the replicas the most demanding loss needs of it.

    NOTE: a split workload's lost replicas differ in kind, not only in load: the long pool's
    sends the fallback long prompts alone, the standard pool's short ones alone. Sized for the
    whole workload's prompt mix at the larger share, the fallback met prompts neither loss
    sends (two replicas where one serves either loss, in tests/plan/test_fallback.py; where
    the long part's share per replica is the larger, too few long prompts)."""
    best: Sized | None = None
    for loss in losses:
        for option in size(loss).sized:
            served: list[Sized] = []
            for other in losses:
                also = option if other is loss else size_as(other, option)
                if isinstance(also, Rejected):
                    break
                served.append(also)
            else:
                most = max(served, key=lambda s: s.replicas)
                if best is None or (most.num_gpus, most.usd_per_hour) < (
                    best.num_gpus,
                    best.usd_per_hour,
                ):
                    best = most
    return best
