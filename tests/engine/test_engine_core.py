from __future__ import annotations

import math

import pytest

from inhouse.engine import EngineCore, Request, Status
from inhouse.hashing import hash_spans
from inhouse.openai_errors import rejection_message


def run_to_completion(engine: EngineCore, now: float = 0.0, max_steps: int = 1 << 30) -> float:
    while engine.has_unfinished:
        result = engine.step(now, max_steps=max_steps)
        if result is None:
            ready = engine.next_ready_s()
            assert ready is not None
            now = ready
            continue
        now = result.end_s
    return now


def prompt(span: int, tokens: int) -> list[int]:
    return hash_spans([(span, tokens)], 16)


def test_a_single_request_prefills_then_decodes_one_token_per_step(make_engine) -> None:
    engine = make_engine()
    request = Request("a", 100, 5, 0.0, prompt(1, 100))
    assert engine.add_request(request) is None
    run_to_completion(engine)
    assert request.status is Status.FINISHED
    assert request.num_output_tokens == 5
    times = engine.token_times(request)
    assert len(times) == 5
    assert times[0] == request.first_token_s
    assert times[-1] == request.finish_s
    assert engine.stats.num_steps == 5


def test_second_request_sharing_a_4096_token_prefix_computes_only_its_new_blocks(
    make_engine,
) -> None:
    engine = make_engine()
    shared = [(1, 4096)]
    first = Request("a", 4096 + 100, 1, 0.0, hash_spans([*shared, (2, 100)], 16))
    engine.add_request(first)
    now = run_to_completion(engine)
    second = Request("b", 4096 + 200, 1, now, hash_spans([*shared, (3, 200)], 16))
    engine.add_request(second)
    result = engine.step(now)
    assert result is not None and result.batch is not None
    assert second.num_cached_tokens == 4096
    assert result.batch.num_tokens == 200
    assert result.batch.ctx_tokens == 4096
    assert engine.scheduler.kv.num_hit_tokens == 4096


def test_prefix_caching_off_recomputes_everything(make_engine) -> None:
    engine = make_engine(enable_prefix_caching=False)
    hashes = hash_spans([(1, 4096)], 16)
    engine.add_request(Request("a", 4096, 1, 0.0, hashes))
    now = run_to_completion(engine)
    second = Request("b", 4096, 1, now, hashes)
    engine.add_request(second)
    result = engine.step(now)
    assert result is not None and result.batch is not None
    assert second.num_cached_tokens == 0
    assert result.batch.num_tokens == 4096


def test_full_prompt_hit_still_computes_the_last_token(make_engine) -> None:
    engine = make_engine()
    hashes = hash_spans([(1, 320)], 16)
    engine.add_request(Request("a", 320, 1, 0.0, hashes))
    now = run_to_completion(engine)
    again = Request("b", 320, 1, now, hashes)
    engine.add_request(again)
    result = engine.step(now)
    assert result is not None and result.batch is not None
    assert again.num_cached_tokens == 304  # 19 of 20 blocks; the last block is recomputed
    assert result.batch.num_tokens == 16


def test_long_prompt_is_chunked_under_the_token_budget(make_engine) -> None:
    engine = make_engine(max_num_batched_tokens=1000)
    request = Request("a", 2500, 2, 0.0)
    engine.add_request(request)
    sizes = []
    now = 0.0
    while request.first_token_s is None:
        result = engine.step(now)
        assert result is not None and result.batch is not None
        sizes.append(result.batch.num_tokens)
        now = result.end_s
    assert sizes == [1000, 1000, 500]


def test_too_few_kv_blocks_preempt_and_everything_still_finishes(make_engine) -> None:
    engine = make_engine(num_gpu_blocks=64, max_num_seqs=8)  # 1024 tokens of KV
    requests = [Request(f"r{i}", 200, 200, 0.0) for i in range(6)]
    for request in requests:
        assert engine.add_request(request) is None
    run_to_completion(engine)
    assert all(r.status is Status.FINISHED for r in requests)
    assert all(r.num_output_tokens == 200 for r in requests)
    assert engine.scheduler.num_preemptions > 0
    assert sum(r.num_preemptions for r in requests) == engine.scheduler.num_preemptions
    assert engine.scheduler.kv.num_free_blocks == 64


def test_fcfs_preempts_the_latest_arrival(make_engine) -> None:
    engine = make_engine(num_gpu_blocks=40, max_num_seqs=8, scheduling_policy="fcfs")  # 640 tokens
    first = Request("first", 200, 200, 0.0)
    second = Request("second", 200, 200, 0.001)
    engine.add_request(first)
    engine.add_request(second)
    run_to_completion(engine)
    assert first.num_preemptions == 0
    assert second.num_preemptions >= 1


def test_priority_arrival_overtakes_queued_low_priority_requests(make_engine) -> None:
    engine = make_engine(max_num_seqs=1, scheduling_policy="priority")
    running = Request("running", 100, 50, 0.0, priority=5)
    engine.add_request(running)
    result = engine.step(0.0)
    assert result is not None
    low = [Request(f"low{i}", 100, 5, 0.01 + i * 0.001, priority=5) for i in range(3)]
    high = Request("high", 100, 5, 0.02, priority=0)
    for request in [*low, high]:
        engine.add_request(request)
    run_to_completion(engine, result.end_s)
    order = sorted([*low, high], key=lambda r: r.first_scheduled_s or math.inf)
    assert order[0] is high
    assert [r.request_id for r in order[1:]] == ["low0", "low1", "low2"]


def test_fcfs_keeps_arrival_order(make_engine) -> None:
    engine = make_engine(max_num_seqs=1, scheduling_policy="fcfs")
    requests = [Request(f"r{i}", 50, 3, i * 0.001, priority=10 - i) for i in range(4)]
    for request in requests:
        engine.add_request(request)
    run_to_completion(engine)
    firsts = [r.first_scheduled_s for r in requests]
    assert firsts == sorted(firsts)


def test_prompt_over_max_model_len_is_rejected_with_vllms_message(make_engine) -> None:
    engine = make_engine(max_model_len=1000)
    reason = engine.add_request(Request("a", 1001, 1, 0.0))
    assert reason is not None
    assert "maximum context length is 1000 tokens" in rejection_message(reason)
    assert not engine.has_unfinished


def test_request_larger_than_the_whole_cache_is_rejected(make_engine) -> None:
    engine = make_engine(num_gpu_blocks=10)
    reason = engine.add_request(Request("a", 150, 20, 0.0))
    assert reason is not None and "KV cache" in rejection_message(reason)


def test_request_overhead_delays_scheduling(make_engine) -> None:
    engine = make_engine(request_overhead_s=0.05)
    request = Request("a", 10, 2, 0.0)
    engine.add_request(request)
    assert engine.step(0.0) is None
    assert engine.next_ready_s() == 0.05
    run_to_completion(engine)
    assert request.first_scheduled_s == 0.05


def test_jumping_over_decode_steps_gives_exactly_the_step_by_step_times(make_engine) -> None:
    def run(max_steps: int) -> list[list[float]]:
        engine = make_engine()
        requests = [Request(f"r{i}", 300 + 50 * i, 40 + 7 * i, 0.002 * i) for i in range(5)]
        for request in requests:
            engine.add_request(request)
        run_to_completion(engine, max_steps=max_steps)
        return [engine.token_times(r) for r in requests]

    stepwise = run(1)
    jumped = run(1 << 30)
    for a, b in zip(stepwise, jumped, strict=True):
        assert len(a) == len(b)
        assert b == pytest.approx(a, rel=1e-12, abs=1e-12)


def test_jumps_never_cross_the_horizon(make_engine) -> None:
    engine = make_engine()
    engine.add_request(Request("a", 100, 500, 0.0))
    first = engine.step(0.0)
    assert first is not None
    horizon = first.end_s + 0.1
    result = engine.step(first.end_s, horizon_s=horizon)
    assert result is not None and result.num_steps > 1
    starts = [
        first.end_s,
        *engine.timeline[result.first_step : result.first_step + result.num_steps - 1],
    ]
    assert all(s < horizon for s in starts)
    assert result.end_s >= horizon or result.num_steps == 499


def test_abort_frees_blocks(make_engine) -> None:
    engine = make_engine(num_gpu_blocks=100)
    request = Request("a", 500, 100, 0.0)
    engine.add_request(request)
    engine.step(0.0)
    assert engine.scheduler.kv.num_free_blocks < 100
    assert engine.abort_request(request, 1.0)
    assert engine.scheduler.kv.num_free_blocks == 100
    assert not engine.has_unfinished


def test_host_tier_reloads_an_evicted_prefix_instead_of_recomputing(make_engine) -> None:
    engine = make_engine(num_gpu_blocks=300, num_host_blocks=1000)
    doc = hash_spans([(1, 4000)], 16)
    engine.add_request(Request("a", 4000, 1, 0.0, doc))
    now = run_to_completion(engine)
    engine.add_request(Request("flush", 4000, 1, now, hash_spans([(2, 4000)], 16)))
    now = run_to_completion(engine, now)
    again = Request("b", 4000, 1, now, doc)
    engine.add_request(again)
    result = engine.step(now)
    assert result is not None and result.batch is not None
    assert again.num_cached_tokens == 3984
    assert again.num_host_loaded_tokens > 0
    assert result.batch.host_load_tokens == again.num_host_loaded_tokens


def test_same_inputs_give_identical_records(make_engine) -> None:
    def run() -> list[tuple[float | None, float | None]]:
        engine = make_engine(num_gpu_blocks=200)
        requests = [Request(f"r{i}", 100 + i * 37, 20 + i, i * 0.003) for i in range(12)]
        for request in requests:
            engine.add_request(request)
        run_to_completion(engine)
        return [(r.first_token_s, r.finish_s) for r in requests]

    assert run() == run()


def test_unmixed_batches_run_prefill_and_decode_apart(make_engine) -> None:
    engine = make_engine(mixed_batches=False)
    decoding = Request("decoding", 100, 50, 0.0)
    engine.add_request(decoding)
    first = engine.step(0.0, max_steps=1)
    assert first is not None
    newcomer = Request("new", 300, 5, first.end_s)
    engine.add_request(newcomer)
    second = engine.step(first.end_s, max_steps=1)
    assert second is not None and second.batch is not None
    assert [r.request_id for r, _ in second.batch.scheduled] == ["new"]
    third = engine.step(second.end_s, max_steps=1)
    assert third is not None and third.batch is not None
    assert sorted(r.request_id for r, _ in third.batch.scheduled) == ["decoding", "new"]
    assert third.batch.num_tokens == 2


def test_mixed_batches_put_prefill_and_decode_in_one_step(make_engine) -> None:
    engine = make_engine()
    engine.add_request(Request("decoding", 100, 50, 0.0))
    first = engine.step(0.0, max_steps=1)
    assert first is not None
    engine.add_request(Request("new", 300, 5, first.end_s))
    second = engine.step(first.end_s, max_steps=1)
    assert second is not None and second.batch is not None
    assert sorted(r.request_id for r, _ in second.batch.scheduled) == ["decoding", "new"]
    assert second.batch.num_tokens == 301
