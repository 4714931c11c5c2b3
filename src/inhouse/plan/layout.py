"""Layouts: which pools a plan has and which traffic each serves.

A layout turns the workloads into pool needs. Variants the search compares:

* a workload with `lora_on` is served either as LoRA adapters on the other workload's pool
  (Layout A in the seeds) or by a pool of its own (Layout B);
* an open-loop workload with a long prompt tail (p95 ≥ 8K tokens and ≥ 2x its p50) is served by
  one pool, or split at its p75 or p90 prompt length into a standard pool and a long-context
  pool. Each part then keeps its own quantile of the latencies under the target so that the
  mixture still meets the workload's p95: the 5% of requests allowed above the target are split,
  1% to the standard part and 4% to the long part (long prompts are where latency is hard), so a
  part holding share `w` of the requests keeps its `1 − budget/w` quantile under the target;
* a workload naming a `fallback` model gets a fallback pool (sized after the primary).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from inhouse.plan.analytic import Stream
from inhouse.plan.requirements import Requirements
from inhouse.plan.sizing import PoolNeed
from inhouse.plan.traffic import TrafficProfile
from inhouse.plan.workload_req import UNSPLIT_KINDS, Slo, WorkloadReq
from inhouse.spec.catalog import get_model

LONG_TAIL_MIN_P95_TOKENS = 8192
LONG_TAIL_MIN_RATIO = 2.0
SPLIT_QUANTILES = (0.75, 0.9)
# Shares of requests above the p95 target a split workload allows each part (sum: 5%).
STANDARD_EXCEED = 0.01
LONG_EXCEED = 0.04
# Above this availability a pool runs at least two replicas (N+1).
N_PLUS_ONE_AVAILABILITY = 0.99


@dataclass(frozen=True, slots=True)
class Layout:
    name: str
    description: str
    needs: tuple[PoolNeed, ...]


def params_b(name: str) -> float:
    """A model's size in 1e9 parameters (all of them, experts included): the card's figure,
    else the catalog's count."""
    model = get_model(name)
    return model.params_b_stated or model.num_params / 1e9


def allowed_models(req: WorkloadReq) -> tuple[tuple[str, ...], list[str]]:
    """Catalog names the workload may use (quality floor applied), and why others were not."""
    names: list[str] = []
    refused: list[str] = []
    floor = req.models.min_params_b
    for name in req.models.allowed:
        model = get_model(name)
        size = params_b(name)
        if floor is not None and size < floor:
            refused.append(f"{model.name} ({size:.1f}B) is below the {floor:g}B quality floor")
            continue
        if model.name not in names:
            names.append(model.name)
    return tuple(names), refused


def fallback_larger_than_primary(req: WorkloadReq) -> str | None:
    """Why the workload's fallback model defeats its purpose, if it does: it is larger than a
    model the planner may choose for the workload's own pool.

    NOTE: refused, not warned about. The fallback pool takes one lost primary replica's
    traffic at the degraded SLO; the primary's own model named as the fallback could take it
    on the same GPUs on offer with fewer weights, so a larger one is never the cheaper cover,
    and a degraded mode better than the normal one is no degraded mode. (Sizes count every
    parameter, as the quality floor does: a MoE fallback with fewer active parameters than a
    dense primary is still refused by its weights.) A stack's pool-level `fallback` may spill
    to a larger pool: that is a routing rule, which this does not judge."""
    if req.models.fallback is None:
        return None
    fallback = get_model(req.models.fallback).name
    size = params_b(fallback)
    models, _ = allowed_models(req)
    smaller = [(params_b(name), name) for name in models if params_b(name) < size]
    if not smaller:
        return None
    primary_b, primary = min(smaller)
    return (
        f"workloads[{req.name}].models.fallback ({fallback}, {size:.1f}B) is larger than "
        f"{primary} ({primary_b:.1f}B), which models.allowed lets the planner choose for the "
        "workload's own pool: a fallback pool of a larger model costs more than a spare replica "
        f"of the primary and serves slower. Name a fallback of at most {primary_b:.1f}B, or "
        "drop the smaller models from models.allowed (or raise models.min_params_b above them)"
    )


def _round_up(tokens: float, step: int = 1024) -> int:
    return int(math.ceil(tokens / step) * step)


def _max_model_len(profile: TrafficProfile, prompt_limit: int) -> int:
    output_max = float(np.max(profile.shapes.output)) * 2.0
    return _round_up(prompt_limit + output_max)


def _min_replicas(*reqs: WorkloadReq) -> int:
    return 2 if max(r.slo.availability for r in reqs) >= N_PLUS_ONE_AVAILABILITY else 1


def build_layouts(requirements: Requirements, profiles: dict[str, TrafficProfile]) -> list[Layout]:
    """Every layout variant the search compares."""
    choices: list[list[tuple[str, list[PoolNeed] | str]]] = []
    for req in requirements.workloads:
        choices.append(_variants(requirements, req, profiles))
    layouts: list[Layout] = []
    for combo in itertools.product(*choices):
        needs: list[PoolNeed] = []
        notes: list[str] = []
        lora: dict[str, str] = {}
        for note, item in combo:
            notes.append(note)
            if isinstance(item, str):
                lora[item] = note
            else:
                needs.extend(item)
        needs = [_with_lora(need, requirements, profiles, lora) for need in needs]
        name = "; ".join(notes)
        layouts.append(Layout(f"L{len(layouts) + 1}", name, tuple(needs)))
    return layouts


def _variants(
    requirements: Requirements, req: WorkloadReq, profiles: dict[str, TrafficProfile]
) -> list[tuple[str, list[PoolNeed] | str]]:
    profile = profiles[req.name]
    models, _ = allowed_models(req)
    out: list[tuple[str, list[PoolNeed] | str]] = []
    if req.models.lora_on is not None:
        out.append((f"{req.name} as LoRA adapters on {req.models.lora_on}", req.name))
    whole = PoolNeed(
        name=req.name,
        role="utility" if req.kind == "utility" else "standard",
        streams=(Stream(profile, profile.shapes),),
        models=models,
        slos={req.name: req.slo},
        degraded_slos={req.name: req.degraded_slo},
        quantiles={req.name: 0.95},
        min_replicas=_min_replicas(req),
        max_model_len=_max_model_len(profile, profile.max_prompt_tokens),
    )
    own = "on its own pool" if req.models.lora_on else "one pool"
    out.append((f"{req.name} {own}", [whole]))
    if req.kind in UNSPLIT_KINDS:
        return out
    prompt = profile.shapes.prompt
    p50, p95 = float(np.median(prompt)), float(np.quantile(prompt, 0.95))
    if req.slo.long_prompt_tokens is not None:
        # The requirements define the long prompts (and their own TTFT): split there only.
        thresholds = [req.slo.long_prompt_tokens]
    elif p95 < LONG_TAIL_MIN_P95_TOKENS or p95 < LONG_TAIL_MIN_RATIO * p50:
        return out
    else:
        thresholds = [_round_up(float(np.quantile(prompt, q))) for q in SPLIT_QUANTILES]
    for threshold in thresholds:
        long = prompt > threshold
        if not long.any():
            continue
        # NOTE: by count and by tokens the long pool's share differ by far (a quarter of the
        # requests can carry half the prompt tokens); the description says both.
        requests = float(np.mean(long))
        tokens = float(prompt[long].sum() / prompt.sum())
        out.append(
            (
                f"{req.name} prompts above {threshold:,} tokens ({requests:.0%} of requests, "
                f"{tokens:.0%} of prompt tokens) on a long-context pool",
                _split(req, profile, models, threshold),
            )
        )
    return out


def _split(
    req: WorkloadReq, profile: TrafficProfile, models: tuple[str, ...], threshold: int
) -> list[PoolNeed]:
    shapes = profile.shapes
    short = shapes.prompt <= threshold
    share = float(np.mean(short))
    parts: list[PoolNeed] = []
    for name, role, mask, part_share, limit, budget in (
        (req.name, "standard", short, share, threshold, STANDARD_EXCEED),
        (f"{req.name}-long", "long", ~short, 1.0 - share, profile.max_prompt_tokens, LONG_EXCEED),
    ):
        slo, degraded = req.slo, req.degraded_slo
        quantile = min(max(1.0 - budget / part_share, 0.5), 0.995)
        if req.slo.has_long_ttft:
            # NOTE: each part is its own commitment (p95 TTFT of the short prompts, of the long
            # ones), so each keeps its p95 under its targets; the mixture's other p95s then
            # hold too (each part has at most 5% above a target, so the mixture has).
            quantile = 0.95
            if role == "long":
                slo, degraded = _long_slos(req)
        parts.append(
            PoolNeed(
                name=name,
                role=role,
                streams=(Stream(profile, shapes.select(mask), part_share),),
                models=models,
                slos={req.name: slo},
                degraded_slos={req.name: degraded},
                quantiles={req.name: quantile},
                min_replicas=_min_replicas(req),
                max_model_len=_max_model_len(profile, limit),
                long_prompt_tokens=threshold if role == "standard" else None,
                prompt_range=(0, threshold) if role == "standard" else (threshold, 1 << 40),
            )
        )
    return parts


def _long_slos(req: WorkloadReq) -> tuple[Slo, Slo | None]:
    """The SLO and degraded SLO the long-context pool holds the workload's long prompts to."""
    long_ttft = req.slo.long_ttft_p95_ms
    assert long_ttft is not None, "a workload stating long_ttft_p95_ms"
    degraded = req.degraded_slo
    if degraded is not None:
        # As the simulator judges them (`WorkloadReq.judged_slo`): the degraded long target,
        # else the normal one, even where the degraded SLO states no TTFT of its own.
        degraded = degraded.for_long_prompts(degraded.long_ttft_p95_ms or long_ttft)
    return req.slo.for_long_prompts(long_ttft), degraded


def _with_lora(
    need: PoolNeed,
    requirements: Requirements,
    profiles: dict[str, TrafficProfile],
    lora: dict[str, str],
) -> PoolNeed:
    """Add the workloads served as LoRA adapters on this pool's workload."""
    guests = [
        requirements.workload(name)
        for name in lora
        if requirements.workload(name).models.lora_on in need.slos and need.role != "long"
    ]
    if not guests:
        return need
    streams = list(need.streams)
    slos, degraded, quantiles = dict(need.slos), dict(need.degraded_slos), dict(need.quantiles)
    max_len = need.max_model_len
    for guest in guests:
        profile = profiles[guest.name]
        streams.append(Stream(profile, profile.shapes))
        slos[guest.name] = guest.slo
        degraded[guest.name] = guest.degraded_slo
        quantiles[guest.name] = 0.95
        max_len = max(max_len, _max_model_len(profile, profile.max_prompt_tokens))
    hosts = [requirements.workload(w) for w in need.slos]
    # NOTE: `replace`, not a new PoolNeed: the host's other fields (a split's prompt range,
    # which the sensitivity re-forecast reads) stay as they were.
    return replace(
        need,
        streams=tuple(streams),
        slos=slos,
        degraded_slos=degraded,
        quantiles=quantiles,
        min_replicas=_min_replicas(*hosts, *guests),
        max_model_len=max_len,
        lora_adapters=tuple(g.name for g in guests),
    )


def fallback_need(
    req: WorkloadReq,
    profile: TrafficProfile,
    lost: Stream,
    replicas: int,
    quantile: float,
    slo: Slo,
) -> PoolNeed | None:
    """A pool for the workload's fallback model, sized for one lost replica of a pool of
    `replicas` serving `lost`, the workload's part there: that part's prompts (all of them on
    one pool; the long ones from a long-context pool) at its share over the replicas, held to
    `slo` (the lost pool's degraded SLO for the workload, or its normal one) at `quantile`, the
    pool's for the workload."""
    if req.models.fallback is None:
        return None
    model = get_model(req.models.fallback)
    scaled = profile.scaled(load_factor=lost.share / replicas)
    return PoolNeed(
        name=f"{req.name}-fallback",
        role="fallback",
        streams=(Stream(scaled, lost.shapes),),
        models=(model.name,),
        slos={req.name: slo},
        degraded_slos={req.name: None},
        quantiles={req.name: quantile},
        min_replicas=1,
        max_model_len=_max_model_len(profile, profile.max_prompt_tokens),
    )
