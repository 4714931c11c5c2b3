"""Verification in the fleet simulator: the very router and engine code that serves traffic.

A stack is run against the requirements' workloads (each from its own seeded generator, mixed in
time, clients naming each workload's model) with the production routing policy, for a few
simulated minutes. Requests arriving during the warm-up (empty caches, sessions ramping) are
left out; the rest give vLLM bench's p95s per workload, compared with the targets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from inhouse.errors import SpecError
from inhouse.fleet import (
    MAX_SIMULATED_REQUESTS,
    FleetResult,
    RequestRecord,
    TooManyRequestsError,
    simulate_stack,
)
from inhouse.plan.mix import MixedWorkload, workload_of
from inhouse.plan.p95_interval import BLOCK_S, p95_intervals
from inhouse.plan.requirements import Requirements
from inhouse.plan.signals import observed_signals
from inhouse.plan.traffic import make_workload
from inhouse.plan.workload_req import Slo
from inhouse.spec.gateway import DEFAULT_TIERS
from inhouse.spec.stack import StackSpec
from inhouse.workload import Arrivals, Lengths

WARMUP_FRACTION = 0.2
MAX_WARMUP_S = 30.0


def warmup_for(duration_s: float) -> float:
    """The warm-up left out of a run of `duration_s` seconds of arrivals: its first 20%, at
    most 30 s. One rule for the planner's checks, `bench --plan`'s verdict and the report's
    measured p95s, so a simulated and a measured p95 count the same requests."""
    return min(MAX_WARMUP_S, WARMUP_FRACTION * max(duration_s, 0.0))


METRIC_KEYS = {
    "ttft": "p95_ttft_ms",
    "itl": "p95_itl_ms",
    "tpot": "p95_tpot_ms",
    "e2e": "p95_e2el_ms",
}
# With long prompts of their own (`slo.long_prompt_tokens`): TTFT by prompt length.
SHORT_TTFT_KEY = "p95_ttft_short_ms"
LONG_TTFT_KEY = "p95_ttft_long_ms"
# Their end-to-end latency: what the long pool's drain waits for (`stackgen.with_plan_facts`).
LONG_E2E_KEY = "p95_e2el_long_ms"


@dataclass(frozen=True, slots=True)
class SimCheck:
    """One simulated run: per workload, its p95s (ms), counts and pass/fail per target."""

    multiple: float
    down: dict[str, int]
    duration_s: float
    workloads: dict[str, dict[str, Any]]
    shed: tuple[str, ...] = ()
    # The re-plan triggers' signals as this run shows them (`inhouse.plan.signals`).
    signals: dict[str, dict[str, dict[str, float]]] = dataclasses.field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(bool(w["pass"]) for w in self.workloads.values())


def tier_priority(tier: str) -> int:
    """vLLM's `priority` of a gateway tier (the gateway's default tiers)."""
    return DEFAULT_TIERS[tier].priority


def mixed_workload(
    requirements: Requirements,
    model_names: dict[str, str],
    *,
    prompt_p95_factor: float = 1.0,
    burstiness_factor: float = 1.0,
    shed: frozenset[str] = frozenset(),
) -> MixedWorkload:
    """The requirements' workloads as one, each sending `model_names[workload]` at its tier's
    priority; the workloads in `shed` send nothing (the gateway refuses them)."""
    kept = [req for req in requirements.workloads if req.name not in shed]
    return MixedWorkload(
        tuple(
            (
                req.name,
                make_workload(
                    req,
                    model_names[req.name],
                    prompt_p95_factor=prompt_p95_factor,
                    burstiness_factor=burstiness_factor,
                ),
            )
            for req in kept
        ),
        priorities=tuple((req.name, tier_priority(req.tier)) for req in kept),
    )


def run_check(
    stack: StackSpec,
    requirements: Requirements,
    model_names: dict[str, str],
    *,
    multiple: float = 1.0,
    down: dict[str, int] | None = None,
    degraded: bool = False,
    duration_s: float | None = None,
    shed: frozenset[str] = frozenset(),
) -> SimCheck:
    """A simulated run at `multiple` x peak with `down` replicas lost; `shed` workloads are
    refused at the gateway (their traffic is not sent, and they are not judged)."""
    planning = requirements.planning
    duration = duration_s or planning.verify_duration_s
    workload = mixed_workload(requirements, model_names, shed=shed)
    try:
        result = simulate_stack(
            stack,
            workload,
            policy=planning.routing_policy,
            duration_s=duration,
            seed=planning.seed,
            rate_scale=multiple,
            down_replicas=down,
            max_requests=MAX_SIMULATED_REQUESTS,
        )
    except TooManyRequestsError as exc:
        # NOTE: the planner estimates each check before simulating; a closed loop can still
        # run faster than its forecast.
        raise SpecError(
            f"{requirements.name}: the simulator check at {multiple:g}x peak: {exc}. Lower "
            "planning.load_multiples, verify_duration_s or stress_duration_s, or plan with "
            "--no-verify."
        ) from None
    warmup_s = warmup_for(duration)
    out: dict[str, dict[str, Any]] = {}
    for req in requirements.workloads:
        if req.name in shed:
            continue
        out[req.name] = summarize(result, req.name, warmup_s, req.judged_slo(degraded=degraded))
    signals = observed_signals(stack, result, warmup_s, duration)
    return SimCheck(multiple, dict(down or {}), duration, out, tuple(sorted(shed)), signals)


def summarize(result: FleetResult, workload: str, warmup_s: float, slo: Slo) -> dict[str, Any]:
    """p95s (ms) of one workload's requests after the warm-up, with pass/fail per target."""
    mine = [r for r in result.records if workload_of(r.request_id) == workload]
    counted = [r for r in mine if r.arrival_s >= warmup_s]
    done = [r for r in counted if r.ok]
    long_tokens = slo.long_prompt_tokens if slo.has_long_ttft else None
    by_length = {k: _p95(v) for k, v in _ttft_by_length(done, long_tokens).items()}
    metrics = {**_p95s(result, done), **by_length}
    if long_tokens is not None:
        metrics[LONG_E2E_KEY] = _p95(
            [1000.0 * r.e2el_s for r in done if r.num_prompt_tokens > long_tokens]
        )
    prompt = sum(r.num_prompt_tokens for r in done)
    targets = dict(slo.targets())
    if long_tokens is not None:
        assert slo.long_ttft_p95_ms is not None
        targets["long_ttft"] = slo.long_ttft_p95_ms
    checks: dict[str, dict[str, Any]] = {}
    for metric, target in targets.items():
        key = check_key(metric, long_tokens)
        value = metrics[key]
        checks[metric] = {"target_ms": target, "p95_ms": value, "pass": value <= target}
        if key != METRIC_KEYS.get(metric):
            checks[metric]["p95_key"] = key
    failed = len(counted) - len(done)
    return {
        **metrics,
        "p95_interval_ms": _intervals(result, done, warmup_s, long_tokens),
        "completed": len(done),
        "failed": failed,
        "prefix_cache_hit_rate": sum(r.num_cached_tokens for r in done) / prompt if prompt else 0.0,
        "theoretical_hit_rate": (
            sum(r.num_ideal_cached_tokens for r in done) / prompt if prompt else 0.0
        ),
        "routes": _routes(done),
        "checks": checks,
        "pass": all(bool(c["pass"]) for c in checks.values()) and failed == 0 and bool(done),
    }


def metric_words(metric: str) -> str:
    """A judged metric in the planner's messages: `long_ttft` is the long prompts' TTFT."""
    return "ttft (long prompts)" if metric == "long_ttft" else metric


def check_key(metric: str, long_tokens: int | None) -> str:
    """The summary key a check of `metric` reads: with long prompts of their own, TTFT is
    judged over the others (`p95_ttft_short_ms`) and `long_ttft` over the long ones."""
    if metric == "long_ttft":
        return LONG_TTFT_KEY
    if metric == "ttft" and long_tokens is not None:
        return SHORT_TTFT_KEY
    return METRIC_KEYS[metric]


def checked_key(item: Mapping[str, Any], metric: str) -> str:
    """The summary key a `checks[metric]` item was read from: its `p95_key` where it has one
    (`check_key`), else the metric's own."""
    return str(item.get("p95_key") or METRIC_KEYS[metric])


def _p95(values: list[float] | np.ndarray) -> float:
    data = np.asarray(values, dtype=np.float64)
    return float(np.percentile(data, 95)) if data.size else float("nan")


def _ttft_by_length(records: list[RequestRecord], long_tokens: int | None) -> dict[str, np.ndarray]:
    """TTFTs (ms) of the prompts up to `long_tokens` and of the longer ones (the router's
    length rule: longer than `long_prompt_tokens` goes to the long pool); none without it."""
    if long_tokens is None:
        return {}
    ms = 1000.0
    return {
        SHORT_TTFT_KEY: ms
        * np.array([r.ttft_s for r in records if r.num_prompt_tokens <= long_tokens]),
        LONG_TTFT_KEY: ms
        * np.array([r.ttft_s for r in records if r.num_prompt_tokens > long_tokens]),
    }


def _p95s(result: FleetResult, done: list[RequestRecord]) -> dict[str, float]:
    ms = 1000.0
    return {
        "p95_ttft_ms": _p95([ms * r.ttft_s for r in done]),
        "p95_itl_ms": _p95(ms * result.itl_s(done)),
        "p95_tpot_ms": _p95([ms * r.tpot_s for r in done if r.num_output_tokens > 1]),
        "p95_e2el_ms": _p95([ms * r.e2el_s for r in done]),
    }


def _intervals(
    result: FleetResult, done: list[RequestRecord], warmup_s: float, long_tokens: int | None
) -> dict[str, list[float] | None]:
    """Each p95's 95% interval (ms; `p95_interval`): a block bootstrap over the requests in
    blocks of `BLOCK_S` seconds by arrival (seed 0: reproducible from the run)."""
    by_block: dict[int, list[RequestRecord]] = {}
    for record in done:
        by_block.setdefault(int((record.arrival_s - warmup_s) // BLOCK_S), []).append(record)
    blocks = [_p95_inputs(result, records, long_tokens) for _, records in sorted(by_block.items())]
    intervals = p95_intervals(blocks)
    out: dict[str, list[float] | None] = {}
    keys = list(METRIC_KEYS.values())
    if long_tokens is not None:
        keys += [SHORT_TTFT_KEY, LONG_TTFT_KEY]
    for key in keys:
        interval = intervals.get(key)
        out[key] = None if interval is None else list(interval)
    return out


def _p95_inputs(
    result: FleetResult, records: list[RequestRecord], long_tokens: int | None
) -> dict[str, np.ndarray]:
    ms = 1000.0
    return {
        **_ttft_by_length(records, long_tokens),
        "p95_ttft_ms": ms * np.array([r.ttft_s for r in records]),
        "p95_itl_ms": ms * result.itl_s(records),
        "p95_tpot_ms": ms * np.array([r.tpot_s for r in records if r.num_output_tokens > 1]),
        "p95_e2el_ms": ms * np.array([r.e2el_s for r in records]),
    }


def _routes(done: list[RequestRecord]) -> dict[str, int]:
    routes: dict[str, int] = {}
    for record in done:
        key = f"{record.pool}:{record.route}"
        routes[key] = routes.get(key, 0) + 1
    return routes


def generator_params(req_workload: Any, model_name: str) -> tuple[str, dict[str, str]]:
    """The plan's generator for one workload as `inhouse simulate -W` / `inhouse bench -p`
    parameters: (workload name, {parameter: text})."""
    generator = make_workload(req_workload, model_name)
    params: dict[str, str] = {}
    for f in dataclasses.fields(generator):  # type: ignore[arg-type]
        value = getattr(generator, f.name)
        if isinstance(value, Arrivals):
            params["arrivals"] = value.kind
            params["rate_per_s"] = f"{value.rate_per_s:.10g}"
            if value.kind == "gamma":
                params["burstiness"] = f"{value.burstiness:.10g}"
        elif isinstance(value, Lengths):
            params[f.name] = f"{value.p50}:{value.p95}:{value.min_tokens}:{value.max_tokens}"
        elif value is not None:
            params[f.name] = f"{value:.10g}" if isinstance(value, float) else str(value)
    return generator.name, params


def simulate_command(
    requirements: Requirements, workload: str, model_name: str, stack_path: str
) -> str:
    """The `inhouse simulate` command that replays one workload of the plan's check on its own
    (the check mixes every workload; it also leaves the warm-up out)."""
    name, params = generator_params(requirements.workload(workload), model_name)
    planning = requirements.planning
    joined = ",".join(f"{k}={v}" for k, v in params.items())
    return (
        f"inhouse simulate --stack {stack_path} --workload {name} "
        f"-W {joined} --policy {planning.routing_policy} "
        f"--duration {planning.verify_duration_s:g} --seed {planning.seed}"
    )


def bench_entry(requirements: Requirements, workload: str, model_name: str) -> dict[str, Any]:
    """What `inhouse bench --plan DIR --workload NAME` drives and judges: the plan's own
    generator for the workload, the model name its clients send, its SLO's p95 targets, and the
    check's duration and warm-up."""
    req = requirements.workload(workload)
    name, params = generator_params(req, model_name)
    duration = requirements.planning.verify_duration_s
    return {
        "workload": name,
        "params": params,
        "model": model_name,
        "slo_p95_ms": req.slo.for_all_prompts().targets(),
        "duration_s": duration,
        "warmup_s": warmup_for(duration),
    }
