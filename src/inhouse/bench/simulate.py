"""`--simulate STACK.yaml`: the same workload through the fleet simulator, same report.

The simulator's per-request records become the outcomes a client would have seen with no
client in the way (sent exactly at arrival), so `metrics.summarize` computes every figure with
the very code that summarizes a live run. The arrival process is the workload's own with the
load flags folded in (`config.build_workload`): the same distribution as the live run's, not
the same sample path.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from inhouse.bench.config import BenchSpec, build_workload
from inhouse.bench.driver import BenchRun
from inhouse.bench.metrics import Outcome, RequestResult
from inhouse.errors import SpecError
from inhouse.fleet import FleetResult
from inhouse.fleet.volume import refuse_a_run_too_large, simulate_within_limits
from inhouse.spec.load import load_stack


def simulation_duration_s(spec: BenchSpec) -> float:
    if spec.duration_s is not None:
        return spec.duration_s
    if spec.num_requests is not None:
        if spec.rate is None or math.isinf(spec.rate):
            raise SpecError(
                "--simulate runs for a duration: give --duration S (or --rate with "
                "--num-requests N, which lasts N/rate seconds)"
            )
        return spec.num_requests / spec.rate
    duration = spec.effective_duration_s
    assert duration is not None
    return duration


def run_simulated(spec: BenchSpec, stack_path: Path, policy: str | None = None) -> BenchRun:
    if spec.arrival_mode == "closed":
        raise SpecError(
            f"--simulate cannot keep {spec.workload!r} at a fixed concurrency (the simulator "
            "runs open-loop workloads at their rate); use --rate R"
        )
    if spec.base_name == "fixed" and spec.rate is not None:
        raise SpecError("--simulate runs `fixed` as a closed loop: use --concurrency C")
    stack = load_stack(stack_path)
    workload = build_workload(spec)
    duration_s = simulation_duration_s(spec)
    refuse_a_run_too_large(workload, duration_s, spec.rate_scale)
    fleet = simulate_within_limits(
        stack,
        workload,
        duration_s=duration_s,
        rate_scale=spec.rate_scale,
        fix="shorten --duration or lower --rate-scale",
        policy=policy,
        seed=spec.seed,
    )
    results = records_to_results(fleet)
    finish = [r.outcome.t_done for r in results if r.outcome.t_done]
    summary = fleet.summary(spec.slo)
    simulated: dict[str, Any] = {
        "stack": stack.name,
        "stack_path": str(stack_path),
        "policy": policy,
        "pools": summary.get("pools"),
        "num_preemptions": summary.get("num_preemptions"),
        "replica_load_max_over_mean": summary.get("replica_load_max_over_mean"),
    }
    ideal = [r.num_ideal_cached_tokens for r in results]
    prompt = [r.num_prompt_tokens for r in results]
    meta = {
        "model_id": stack.pools[0].client_model_name,
        "target": f"simulate:{stack_path}",
        "workload_name": getattr(workload, "name", spec.workload),
    }
    return BenchRun(
        spec,
        results,
        max(finish, default=0.0),
        meta,
        theoretical_hit_rate_all=sum(ideal) / sum(prompt) if sum(prompt) else None,
        simulated=simulated,
        requested_rate=spec.rate,
    )


def records_to_results(fleet: FleetResult) -> list[RequestResult]:
    out = []
    for index, record in enumerate(fleet.records):
        outcome = Outcome(index, record.arrival_s, t_send=record.arrival_s)
        if record.ok:
            assert record.first_token_s is not None and record.finish_s is not None
            outcome.success = True
            outcome.status = 200
            outcome.ttft_s = record.first_token_s - record.arrival_s
            outcome.latency_s = record.finish_s - record.arrival_s
            outcome.itl_s = [float(g) for g in fleet.itl_s([record])]
            outcome.num_chunks = outcome.num_token_chunks = record.num_output_tokens
            outcome.completion_tokens = record.num_output_tokens
            outcome.prompt_tokens = record.num_prompt_tokens
            outcome.cached_tokens = record.num_cached_tokens
            outcome.ttft_content_s = outcome.ttft_s
            outcome.t_done = record.finish_s
        else:
            outcome.error = record.error or "failed"
        out.append(
            RequestResult(
                outcome,
                record.request_id,
                record.num_prompt_tokens,
                record.num_ideal_cached_tokens,
                record.num_output_tokens,
                record.session_key,
            )
        )
    return out
