"""SGLang's `--scheduler-recv-interval` (`EngineConfig.recv_interval`): after a decode step the
scheduler takes new requests only at every interval-th step; after a prefill step, or idle, at
once. Each case fails with the interval ignored (every step receives)."""

from __future__ import annotations

import pytest

from inhouse.engine import EngineCore, Request
from inhouse.hashing import hash_spans


def request(name: str, prompt: int, output: int, at: float) -> Request:
    return Request(name, prompt, output, at, hash_spans([(hash(name) % 1000, prompt)], 16))


def sglang(make_engine, interval: int) -> EngineCore:
    return make_engine(mixed_batches=False, recv_interval=interval)


def first_step_of(engine: EngineCore, late: Request, now: float) -> int:
    """Step one step at a time until `late` is scheduled; the index of that step."""
    for _ in range(100):
        result = engine.step(now, max_steps=1)
        assert result is not None and result.batch is not None
        now = result.end_s
        if any(r is late for r, _ in result.batch.scheduled):
            return result.first_step
    raise AssertionError("the late request was never scheduled")


@pytest.mark.parametrize(("interval", "expected"), [(1, 2), (5, 6), (30, 31)])
def test_a_request_ready_after_a_decode_step_waits_for_the_receiving_step(
    make_engine, interval: int, expected: int
) -> None:
    engine = sglang(make_engine, interval)
    engine.add_request(request("long", 64, 200, 0.0))
    prefill = engine.step(0.0, max_steps=1)  # step 0: idle, so received at once
    assert prefill is not None and prefill.batch is not None and prefill.batch.num_decodes == 0
    decode = engine.step(prefill.end_s, max_steps=1)  # step 1: receives (after a prefill)
    assert decode is not None and decode.batch is not None and decode.batch.num_decodes == 1
    late = request("late", 64, 5, decode.end_s)
    engine.add_request(late)
    # Steps 2 .. interval count 1 .. interval - 1; step interval + 1 receives.
    assert first_step_of(engine, late, decode.end_s) == expected


def test_after_a_prefill_step_the_next_step_receives_at_once(make_engine) -> None:
    engine = sglang(make_engine, 30)
    engine.add_request(request("long", 64, 200, 0.0))
    prefill = engine.step(0.0, max_steps=1)
    assert prefill is not None
    late = request("late", 64, 5, prefill.end_s)
    engine.add_request(late)
    assert first_step_of(engine, late, prefill.end_s) == 1


def test_an_idle_engine_receives_at_once(make_engine) -> None:
    engine = sglang(make_engine, 30)
    first = request("first", 64, 3, 0.0)
    engine.add_request(first)
    now = 0.0
    while engine.has_unfinished:
        result = engine.step(now, max_steps=1)
        assert result is not None
        now = result.end_s
    late = request("late", 64, 3, now + 1.0)
    engine.add_request(late)
    assert engine.step(now + 1.0, max_steps=1) is not None
    assert late.num_computed_tokens > 0


def test_a_jump_runs_past_the_ready_time_to_the_receiving_step(make_engine) -> None:
    """With an interval, a jump no longer stops where a pending request becomes ready but
    before the step that takes it in, and the request's first token comes when a
    step-by-step run gives it."""
    times = []
    for max_steps in (1, 1 << 30):
        engine = make_engine(mixed_batches=False, recv_interval=8, request_overhead_s=0.05)
        engine.add_request(request("long", 64, 400, 0.0))
        late = request("late", 64, 5, 0.02)
        now, added = 0.0, False
        while engine.has_unfinished or not added:
            if not added and now >= late.arrival_s:
                engine.add_request(late)
                added = True
            horizon = late.arrival_s if not added else float("inf")
            result = engine.step(now, horizon_s=horizon, max_steps=max_steps)
            now = result.end_s if result is not None else horizon
        times.append((late.first_token_s, engine.token_times(late), engine.stats.num_steps))
    (step_first, step_tokens, step_count), (jump_first, jump_tokens, jump_count) = times
    assert jump_first == pytest.approx(step_first, rel=1e-12)
    assert jump_tokens == pytest.approx(step_tokens, rel=1e-12)
    assert jump_count == step_count
