from __future__ import annotations

import math

import pytest

from inhouse.engine import Request
from inhouse.engine.build import build_replica
from inhouse.errors import SpecError
from inhouse.fleet import replica_spec_for_pool, simulate_stack
from inhouse.spec.stack import StackSpec, parse_stack
from inhouse.workload import (
    AgentWorkload,
    Arrivals,
    FixedWorkload,
    Lengths,
    LongContextWorkload,
    SharedPrefixWorkload,
)

from ..workload.conftest import drive


def stack(replicas: int = 2, **pool: object) -> StackSpec:
    spec = {"name": "p", "model": "Llama-3.1-8B", "replicas": replicas, **pool}
    return parse_stack({"version": 1, "name": "t", "pools": [spec]})


def test_same_seed_same_records_other_seed_other_records() -> None:
    def records(seed: int):
        result = simulate_stack(
            stack(), AgentWorkload(sessions=6), policy="cache_aware", duration_s=40, seed=seed
        )
        return result.records

    first = records(3)
    assert len(first) > 20
    assert first == records(3)
    assert first != records(4)


def test_deferred_decode_jumps_match_stepping_one_step_at_a_time() -> None:
    workload = SharedPrefixWorkload(
        arrivals=Arrivals("poisson", rate_per_s=4.0), num_groups=3, prefix_tokens=2000
    )
    one = stack(replicas=1)
    result = simulate_stack(one, workload, policy="round_robin", duration_s=30, seed=1)
    # the same requests, fed to one engine stepped without any jump
    requests = drive(workload.start(block_size=16, seed=1, duration_s=30))
    engine = build_replica(replica_spec_for_pool(one.pools[0])).new_engine()
    engine_requests = {}
    pending = sorted(requests, key=lambda r: r.arrival_s)
    now = 0.0
    while pending or engine.has_unfinished:
        while pending and pending[0].arrival_s <= now:
            work = pending.pop(0)
            request = Request(
                work.request_id,
                work.num_prompt_tokens,
                work.output_len,
                work.arrival_s,
                block_hashes=work.block_hashes,
            )
            assert engine.add_request(request) is None
            engine_requests[work.request_id] = request
        step = engine.step(now, max_steps=1)
        if step is not None:
            now = step.end_s
            continue
        ready = engine.next_ready_s()
        now = min(
            ready if ready is not None else math.inf, pending[0].arrival_s if pending else math.inf
        )
    assert result.num_engine_steps == engine.stats.num_steps
    assert result.num_engine_calls < engine.stats.num_steps / 3
    assert len(result.records) == len(requests) > 100
    for record in result.records:
        reference = engine_requests[record.request_id]
        assert record.first_token_s == pytest.approx(reference.first_token_s, abs=1e-9)
        assert record.finish_s == pytest.approx(reference.finish_s, abs=1e-9)
        assert record.num_cached_tokens == reference.num_cached_tokens


def test_prompts_above_the_length_rule_run_on_the_long_pool() -> None:
    spec = parse_stack(
        {
            "version": 1,
            "name": "t",
            "pools": [
                {
                    "name": "standard",
                    "model": "Llama-3.1-8B",
                    "long_prompt_tokens": 8000,
                    "long_pool": "long",
                    "knobs": {"max_model_len": 16384},
                },
                {
                    "name": "long",
                    "model": "Llama-3.1-8B",
                    "role": "long",
                    "served_model_name": "long-8b",
                },
            ],
        }
    )
    workload = LongContextWorkload(
        arrivals=Arrivals("poisson", rate_per_s=2.0), prompt=Lengths(8000, 30000, 1000, 30000)
    )
    result = simulate_stack(spec, workload, duration_s=20)
    pools = {(r.pool, r.num_prompt_tokens > 8000) for r in result.records}
    assert pools == {("standard", False), ("long", True)}
    assert all(r.ok for r in result.records)
    assert all(r.route.startswith("long_prompt/") for r in result.records if r.pool == "long")


def test_down_replicas_get_nothing_and_a_down_pool_falls_back() -> None:
    result = simulate_stack(
        stack(replicas=4),
        FixedWorkload(concurrency=8, output_tokens=16),
        duration_s=5,
        down_replicas={"p": 2},
    )
    assert {r.replica for r in result.records} == {0, 1}
    assert len(result.summary()["pools"]["p"]["replicas"]) == 2  # type: ignore[index]
    spec = parse_stack(
        {
            "version": 1,
            "name": "t",
            "pools": [
                {"name": "main", "model": "Llama-3.1-8B", "replicas": 2, "fallback": "small"},
                {"name": "small", "model": "Llama-3.2-1B", "role": "fallback"},
            ],
        }
    )
    result = simulate_stack(
        spec, FixedWorkload(concurrency=2, output_tokens=8), duration_s=2, down_replicas={"main": 2}
    )
    assert {(r.pool, r.route) for r in result.records} == {("small", "fallback_down/load")}
    with pytest.raises(SpecError, match="down_replicas: 'nope' is not a pool"):
        simulate_stack(spec, FixedWorkload(), duration_s=1, down_replicas={"nope": 1})


def test_requests_too_long_for_the_engine_fail_with_vllms_message() -> None:
    result = simulate_stack(
        stack(replicas=1, knobs={"max_model_len": 2048}),
        FixedWorkload(concurrency=2, input_tokens=4000, output_tokens=10),
        duration_s=5,
    )
    assert len(result.records) == 2
    assert all(r.error and "maximum context length is 2048" in r.error for r in result.records)
    summary = result.summary()
    assert (summary["completed"], summary["failed"]) == (0, 2)


def test_cache_aware_beats_round_robin_on_agent_sessions() -> None:
    workload = AgentWorkload(
        sessions=16, system_prompt_tokens=1000, tool_output=Lengths(2000, 4000)
    )
    rates = {}
    for policy in ("round_robin", "cache_aware"):
        summary = simulate_stack(
            stack(replicas=4), workload, policy=policy, duration_s=60
        ).summary()
        rates[policy] = summary["prefix_cache_hit_rate"]
        assert summary["prefix_cache_hit_rate"] <= summary["theoretical_hit_rate"]  # type: ignore[operator]
    assert rates["cache_aware"] > 1.3 * rates["round_robin"]  # type: ignore[operator]


def test_utility_calls_with_a_small_token_budget_all_get_a_first_token() -> None:
    # The CRM plan's own Reproduce command crashed here: a prompt whose prefix hit and chunks
    # left one token was jumped over as if decoding and never got its TTFT.
    from inhouse.workload.registry import make_workload

    workload = make_workload(
        "utility",
        {
            "arrivals": "poisson",
            "rate_per_s": 16.0,
            "num_tasks": 3,
            "instruction_tokens": 250,
            "document": "150:950:1:4550",
            "output": "10:40:1:320",
        },
    )
    one = stack(replicas=2, quant="fp8", knobs={"max_num_batched_tokens": 512})
    result = simulate_stack(one, workload, policy="cache_aware", duration_s=30, seed=0)
    assert result.records and all(r.ok and r.first_token_s is not None for r in result.records)
    assert result.summary(None)["p95_ttft_ms"] > 0
