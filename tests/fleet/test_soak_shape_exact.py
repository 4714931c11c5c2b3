"""The fleet's fast path (deferred decode jumps, reused plans) against stepping one step at a
time, on the virtual soak's own shape: the CRM example's agent sessions and LoRA utility calls
mixed at their tiers' priorities, on the demo stack's 70B replica, at a randomly drawn load.

The reference drives one engine with `step(max_steps=1)` and feeds completions back to the same
closed-loop workload as the fleet does, so every arrival, token time and cache hit must agree.
"""

from __future__ import annotations

import math
import random

import pytest

from inhouse.drill.soak_virtual import CRM_EXAMPLE, load_requirements, model_names
from inhouse.engine import Request
from inhouse.engine.build import build_replica
from inhouse.fleet import Fleet, replica_spec_for_pool
from inhouse.launch.demo import demo_stack
from inhouse.openai_errors import rejection_message
from inhouse.plan.mix import MixedWorkload
from inhouse.plan.verify import mixed_workload
from inhouse.spec.stack import StackSpec
from inhouse.workload import WorkRequest

DURATION_S = 40.0


def _step_by_step(
    stack: StackSpec, workload: MixedWorkload, seed: int, share: float, refused: dict[str, str]
) -> dict[str, Request]:
    """Every request the engine took, by id; the ones it refused go to `refused` (id: reason)."""
    pool = stack.pools[0]
    engine = build_replica(replica_spec_for_pool(pool)).new_engine()
    run = workload.start(block_size=pool.knobs.block_size, seed=seed, duration_s=DURATION_S,
                         rate_scale=share)  # fmt: skip
    works: dict[str, WorkRequest] = {}
    requests: dict[str, Request] = {}
    now = 0.0
    while True:
        while run.next_arrival_s() <= now:
            work = run.pop_arrival()
            lora = work.model if work.model in pool.lora_adapters else None
            request = Request(work.request_id, work.num_prompt_tokens, work.output_len,
                              work.arrival_s, block_hashes=work.block_hashes,
                              priority=work.priority, lora=lora)  # fmt: skip
            reason = engine.add_request(request)
            if reason is not None:  # longer than the KV cache: refused at arrival, as the fleet
                refused[work.request_id] = rejection_message(reason)
                run.on_complete(work, work.arrival_s, ok=False)
                continue
            works[work.request_id], requests[work.request_id] = work, request
        step = engine.step(now, max_steps=1)
        if step is not None:
            now = step.end_s
            for request in step.finished:
                assert request.finish_s is not None
                run.on_complete(works[request.request_id], request.finish_s)
            continue
        ready = engine.next_ready_s()
        now = min(math.inf if ready is None else ready, run.next_arrival_s())
        if now == math.inf:
            return requests


# NOTE: seeds 5 and 16 caught a long prompt's wait holding back a short one ready sooner.
@pytest.mark.parametrize("seed", [None, 5, 16])
def test_the_soaks_shape_gives_the_step_by_step_timings(seed: int | None) -> None:
    if seed is None:  # a fresh shape each run; a failure names its seed
        seed = random.Random().randrange(1 << 16)
    share = random.Random(seed).uniform(0.02, 0.08)  # one replica of the two at 60% would drown
    stack = demo_stack(1)
    requirements = load_requirements(CRM_EXAMPLE)
    workload = mixed_workload(requirements, model_names(requirements, stack))
    fleet = Fleet(stack, workload, policy="round_robin", duration_s=DURATION_S, seed=seed,
                  rate_scale=share, down_replicas={})  # fmt: skip
    result = fleet.run()
    refused: dict[str, str] = {}
    reference = _step_by_step(stack, workload, seed, share, refused)
    engine = fleet.replicas[0].engine
    assert result.num_engine_calls < engine.stats.num_steps / 2, "the fast path never jumped"
    assert {r.request_id for r in result.records} == set(reference) | set(refused), f"seed {seed}"
    kinds = {r.request_id.split("/")[0] for r in result.records}
    assert kinds == {"chat", "utility"}, f"seed {seed}: the mix lost a part"
    for record in result.records:
        if record.request_id in refused:
            assert record.error == refused[record.request_id], f"seed {seed}"
            continue
        expected = reference[record.request_id]
        assert record.ok, f"seed {seed}: {record.request_id} failed: {record.error}"
        assert record.first_token_s == pytest.approx(expected.first_token_s, abs=1e-9), seed
        assert record.finish_s == pytest.approx(expected.finish_s, abs=1e-9), seed
        assert record.num_output_tokens == expected.num_output_tokens
        assert record.num_cached_tokens == expected.num_cached_tokens
        assert record.num_preemptions == expected.num_preemptions
        assert list(record.token_runs) == expected.token_runs, f"seed {seed}"
