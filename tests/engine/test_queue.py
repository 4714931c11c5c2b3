"""The priority policy's order: (priority, arrival, the order requests reached the scheduler).

A request that goes back to waiting (its LoRA adapter deferred, or preempted) keeps its place
among equals, as vLLM's tie-break by request id keeps it; the push order it once fell back on
moved it behind every equal that had not left, so a jump (no scheduling passes) and the steps it
replaces could order the same requests differently.
"""

from __future__ import annotations

from inhouse.engine import EngineCore, Request
from inhouse.perf.lora import LoraCost

from .test_engine_core import run_to_completion


def ids(requests: object) -> list[str]:
    return [r.request_id for r in requests]  # type: ignore[attr-defined]


def test_deferred_lora_requests_keep_their_order_pass_after_pass(make_engine) -> None:
    # One adapter slot: while "a" runs, both "b" requests are deferred at every admission pass
    # and go back to waiting; they used to come back in reverse, so each pass swapped them.
    engine: EngineCore = make_engine(lora=LoraCost(2, 1, 16, 1e8, 0.0))
    requests = [
        Request("a", 32, 10, 0.0, lora="a"),
        Request("d1", 32, 5, 0.0, lora="b"),
        Request("d2", 32, 5, 0.0, lora="b"),
    ]
    for request in requests:
        engine.add_request(request)
    now = 0.0
    for _ in range(3):
        result = engine.step(now, max_steps=1)
        assert result is not None
        now = result.end_s
        assert ids(engine.scheduler.running) == ["a"]
        assert ids(engine.scheduler.waiting) == ["d1", "d2"]


def test_priority_preempts_the_last_of_equals_and_it_keeps_its_place(make_engine) -> None:
    # 4 blocks of 16 tokens, two running at a time: at their 33rd token both need a third
    # block. Among equal priority and arrival the victim is the last to reach the scheduler
    # (vLLM: the last by request id), and it goes back ahead of "r2", which reached it later.
    engine: EngineCore = make_engine(num_gpu_blocks=4, max_num_seqs=2)
    requests = [Request(f"r{i}", 16, 40, 0.0) for i in range(3)]
    for request in requests:
        assert engine.add_request(request) is None
    now = 0.0
    while True:
        result = engine.step(now, max_steps=1)
        assert result is not None and result.batch is not None
        now = result.end_s
        if result.batch.preempted:
            break
    assert ids(result.batch.preempted) == ["r1"]
    assert ids(engine.scheduler.running) == ["r0"]
    assert ids(engine.scheduler.waiting) == ["r1", "r2"]


def test_one_priority_level_runs_a_burst_with_preemptions_as_fcfs(make_engine) -> None:
    # Six equal requests at once into 1024 tokens of KV. The victim used to be the first
    # admitted (ties fell to the running list's order), which then went behind the others:
    # 11 preemptions where fcfs has 3.
    records = {}
    for policy in ("fcfs", "priority"):
        engine: EngineCore = make_engine(
            num_gpu_blocks=64, max_num_seqs=8, scheduling_policy=policy
        )
        requests = [Request(f"r{i}", 200, 200, 0.0) for i in range(6)]
        for request in requests:
            assert engine.add_request(request) is None
        run_to_completion(engine)
        assert [r.num_preemptions for r in requests] == [0, 0, 1, 1, 0, 1]
        records[policy] = [(r.first_token_s, r.finish_s) for r in requests]
    assert records["priority"] == records["fcfs"]


def test_priority_and_arrival_still_come_before_the_scheduler_order(make_engine) -> None:
    engine: EngineCore = make_engine(max_num_seqs=1)
    requests = [
        Request("late", 16, 5, 0.002, priority=0),
        Request("low", 16, 5, 0.0, priority=1),
        Request("early", 16, 5, 0.001, priority=0),
        Request("first", 16, 5, 0.0, priority=0),
    ]
    for request in requests:
        engine.scheduler.add(request)
    assert ids(engine.scheduler.waiting) == ["first", "early", "late", "low"]
