"""A candidate as a stack file (schema v1): what `inhouse up`, `simulate` and `render` run.

Clients name a workload's model by the workload's name: a primary pool is served as the
workload's name, a workload served as LoRA adapters is the adapter's name, and the long-context
and fallback pools are reached through the length rule and the fallback rule, never by name.
"""

from __future__ import annotations

import math

from inhouse.plan.requirements import Requirements
from inhouse.plan.search import Candidate, offers_by_gpu
from inhouse.plan.sizing import Sized
from inhouse.plan.traffic import TrafficProfile
from inhouse.plan.verify import LONG_E2E_KEY, SimCheck
from inhouse.plan.workload_req import Slo
from inhouse.spec.catalog import get_model
from inhouse.spec.observability import ObservabilitySpec
from inhouse.spec.stack import (
    NodeSpec,
    PoolSlo,
    PoolSpec,
    RoutingSpec,
    StackSpec,
)
from inhouse.spec.triggers import Trigger
from inhouse.spec.workloads import PlannedP95, WorkloadSlo, WorkloadSpec

MIN_MAX_NUM_SEQS = 32
MAX_MAX_NUM_SEQS = 512


def max_num_seqs(pool: Sized) -> int:
    """Room for twice the p95 batch at peak, as a power of two within [32, 512]."""
    want = max(2.0 * pool.forecast.batch_p95, MIN_MAX_NUM_SEQS)
    return int(min(MAX_MAX_NUM_SEQS, 2 ** math.ceil(math.log2(want))))


def pool_slo(pool: Sized, requirements: Requirements) -> PoolSlo:
    """The pool's SLO: the strictest target per metric of the workloads it serves. TPOT targets
    become ITL targets (render alerts on the ITL histogram; a request's TPOT is its mean ITL).
    Render alerts per workload (`workload_specs`) when the stack names its workloads; this is
    what a reader of the pool sees, and what alerts a pool when the workloads are removed. No
    prefix-hit floor: the plan's `prefix_hit_rate` trigger is that alert."""
    values: dict[str, float] = {}
    availability = 0.0
    for name in pool.need.slos:
        req = requirements.workload(name)
        slo: Slo = (req.degraded_slo or req.slo) if pool.need.role == "fallback" else req.slo
        if pool.need.role == "long":
            slo = pool.need.slos[name]  # the long prompts' own TTFT, where they have one
        availability = max(availability, slo.availability)
        values = _strictest(values, slo)
    return PoolSlo(availability=availability, prefix_hit_rate_min=None, **values)


def _strictest(values: dict[str, float], slo: Slo) -> dict[str, float]:
    out = dict(values)
    for metric, target in slo.targets().items():
        key = "itl" if metric == "tpot" else metric
        if target < out.get(f"{key}_p95_ms", math.inf):
            out[f"{key}_p95_ms"] = target
            out[f"{key}_alarm_ms"] = slo.alarm_ms(metric)
    return out


def workload_specs(requirements: Requirements, check: SimCheck | None) -> tuple[WorkloadSpec, ...]:
    """Each workload's own SLO (the client names it by the workload's name) and what the
    simulator measured for it at 1x peak."""
    out = []
    for req in requirements.workloads:
        # NOTE: long prompts with a TTFT of their own keep both targets: render alerts each
        # pool's share of the workload's first tokens at the target of the prompts it serves,
        # and a series of all of them (one pool) at the long one.
        targets = _strictest({}, req.slo)
        if req.slo.has_long_ttft:
            assert req.slo.long_ttft_p95_ms is not None, "has_long_ttft"
            targets["long_ttft_p95_ms"] = req.slo.long_ttft_p95_ms
            targets["long_ttft_alarm_ms"] = req.slo.long_alarm_ms()
        slo = WorkloadSlo(availability=req.slo.availability, **targets)
        planned = PlannedP95()
        if check is not None and req.name in check.workloads:
            row = check.workloads[req.name]
            planned = PlannedP95(
                ttft_ms=_finite(row.get("p95_ttft_ms")),
                itl_ms=_finite(row.get("p95_itl_ms")),
                e2e_ms=_finite(row.get("p95_e2el_ms")),
                long_e2e_ms=_finite(row.get(LONG_E2E_KEY)),
            )
        out.append(WorkloadSpec(name=req.name, model=req.name, slo=slo, planned_p95=planned))
    return tuple(out)


def _finite(value: object) -> float | None:
    if not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return round(float(value), 1)


def with_plan_facts(
    stack: StackSpec, workloads: tuple[WorkloadSpec, ...], triggers: tuple[Trigger, ...]
) -> StackSpec:
    """The stack with its workloads and re-plan triggers, which `inhouse render` alerts on,
    and each pool's drain (`knobs.shutdown_timeout_s`) at least the p95 e2e the plan
    simulated for the requests it serves (`StackSpec.planned_e2e_ms`: on a long pool, the long
    prompts'): a replica told to stop finishes what it has in flight."""
    data = stack.model_dump()
    data["workloads"], data["triggers"] = workloads, triggers
    planned = StackSpec.model_validate(data)
    for pool in data["pools"]:
        e2e = planned.planned_e2e_ms(planned.pool(pool["name"]))
        if e2e is not None:
            knobs = pool["knobs"]
            knobs["shutdown_timeout_s"] = max(knobs["shutdown_timeout_s"], math.ceil(e2e / 1000))
    return StackSpec.model_validate(data)


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
                model=get_model(choice.model).served_hf_id,
                served_model_name=need.name,
                lora_adapters=need.lora_adapters,
                role=need.role,  # type: ignore[arg-type]
                backend=planning.backend,
                gpu=choice.gpu,
                quant=choice.quant,
                tp=choice.tp,
                replicas=pool.replicas,
                knobs=choice.knobs(max_num_seqs(pool)),
                routing=RoutingSpec(policy=planning.routing_policy),
                long_prompt_tokens=need.long_prompt_tokens,
                long_pool=long_of.get(need.name) if need.long_prompt_tokens else None,
                fallback=candidate.fallbacks.get(need.name),
                gpu_ids=gpu_ids,
                slo=pool_slo(pool, requirements),
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
