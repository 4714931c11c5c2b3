"""A candidate as a stack file (schema v1): what `inhouse up`, `simulate` and `render` run.

Clients name a workload's model by the workload's name: a primary pool is served as the
workload's name, a workload served as LoRA adapters is the adapter's name, and the long-context
and fallback pools are reached through the length rule and the fallback rule, never by name.
"""

from __future__ import annotations

import math

from inhouse.plan.requirements import Requirements, Slo
from inhouse.plan.search import Candidate, offers_by_gpu
from inhouse.plan.sizing import Sized
from inhouse.plan.traffic import TrafficProfile
from inhouse.spec.catalog import get_model
from inhouse.spec.observability import ObservabilitySpec
from inhouse.spec.stack import (
    EngineKnobs,
    NodeSpec,
    PoolSlo,
    PoolSpec,
    RoutingSpec,
    StackSpec,
)

MIN_MAX_NUM_SEQS = 32
MAX_MAX_NUM_SEQS = 512
# An alarm on the prefix-cache hit rate fires below this share of the planned rate.
HIT_RATE_ALARM_FRACTION = 0.7


def max_num_seqs(pool: Sized) -> int:
    """Room for twice the p95 batch at peak, as a power of two within [32, 512]."""
    want = max(2.0 * pool.forecast.batch_p95, MIN_MAX_NUM_SEQS)
    return int(min(MAX_MAX_NUM_SEQS, 2 ** math.ceil(math.log2(want))))


def pool_slo(
    pool: Sized, requirements: Requirements, profiles: dict[str, TrafficProfile]
) -> PoolSlo:
    """The pool's alerting SLO: the strictest target per metric of the workloads it serves.
    TPOT targets become ITL targets (render alerts on the ITL histogram; a request's TPOT is its
    mean ITL)."""
    values: dict[str, float] = {}
    availability = 0.0
    hit_min: float | None = None
    for name in pool.need.slos:
        req = requirements.workload(name)
        slo: Slo = (req.degraded_slo or req.slo) if pool.need.role == "fallback" else req.slo
        availability = max(availability, slo.availability)
        for metric, target in slo.targets().items():
            key = "itl" if metric == "tpot" else metric
            if target < values.get(f"{key}_p95_ms", math.inf):
                values[f"{key}_p95_ms"] = target
                values[f"{key}_alarm_ms"] = slo.alarm_ms(metric)
        expected = profiles[name].expected_hit_rate
        if expected >= 0.3 and pool.need.role != "fallback":
            floor = round(HIT_RATE_ALARM_FRACTION * expected, 2)
            hit_min = floor if hit_min is None else min(hit_min, floor)
    return PoolSlo(availability=availability, prefix_hit_rate_min=hit_min, **values)


def build_stack(
    candidate: Candidate, requirements: Requirements, profiles: dict[str, TrafficProfile]
) -> StackSpec:
    planning = requirements.planning
    single_node = sum(candidate.nodes.values()) == 1
    long_of = {
        p.need.name: f"{p.need.name}-long" for p in candidate.pools if p.need.long_prompt_tokens
    }
    pools = []
    for pool in candidate.pools:
        need = pool.need
        choice = pool.choice
        gpu_ids: tuple[tuple[int, ...], ...] = ()
        if single_node:
            gpu_ids = tuple(ids for _, ids in candidate.placement.get(need.name, []))
        pools.append(
            PoolSpec(
                name=need.name,
                model=get_model(choice.model).hf_id,
                served_model_name=need.name,
                lora_adapters=need.lora_adapters,
                role=need.role,  # type: ignore[arg-type]
                backend=planning.backend,
                gpu=choice.gpu,
                quant=choice.quant,
                tp=choice.tp,
                replicas=pool.replicas,
                knobs=EngineKnobs(
                    max_num_seqs=max_num_seqs(pool),
                    max_num_batched_tokens=choice.max_num_batched_tokens,
                    max_model_len=choice.max_model_len,
                    kv_cache_dtype=choice.kv_dtype,
                ),
                routing=RoutingSpec(policy=planning.routing_policy),
                long_prompt_tokens=need.long_prompt_tokens,
                long_pool=long_of.get(need.name) if need.long_prompt_tokens else None,
                fallback=candidate.fallbacks.get(need.name),
                gpu_ids=gpu_ids,
                slo=pool_slo(pool, requirements, profiles),
            )
        )
    nodes = tuple(
        NodeSpec(gpu=gpu, gpus_per_node=_gpus_per_node(requirements, gpu), count=count)
        for gpu, count in candidate.nodes.items()
    )
    # The plan's all-in $/hour goes with the stack: the cost dashboards divide it over tokens.
    observability = ObservabilitySpec(usd_per_hour=round(candidate.usd_per_hour, 4) or None)
    return StackSpec(
        name=requirements.name,
        engine="simulated",
        nodes=nodes,
        pools=tuple(pools),
        observability=observability,
    )


def _gpus_per_node(requirements: Requirements, gpu: str) -> int:
    return offers_by_gpu(requirements)[gpu].gpus_per_node
