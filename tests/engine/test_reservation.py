"""SGLang's admission: KV held back for running requests' future tokens, and retraction."""

from __future__ import annotations

import math

import pytest

from inhouse.engine import Request
from inhouse.engine.reservation import (
    CLIP_MAX_NEW_TOKENS,
    INIT_NEW_TOKEN_RATIO,
    MIN_NEW_TOKEN_RATIO,
    TokenReservation,
    future_tokens,
)
from inhouse.perf.lora import LoraCost

from .test_engine_core import run_to_completion


def sglang(make_engine, **overrides: object):
    values: dict[str, object] = {
        "mixed_batches": False,
        "reserve_new_tokens": True,
        "max_num_batched_tokens": 4096,
    }
    values.update(overrides)
    return make_engine(**values)


def test_future_tokens_are_clipped_as_sglang_estimates_them() -> None:
    assert future_tokens(Request("a", 10, 100_000, 0.0)) == CLIP_MAX_NEW_TOKENS
    assert future_tokens(Request("b", 10, 50, 0.0)) == 50


def test_the_held_back_share_decays_to_its_floor_and_resets_on_retraction() -> None:
    reservation = TokenReservation()
    assert reservation.new_token_ratio == INIT_NEW_TOKEN_RATIO
    reservation.on_decode_steps(10_000)
    assert reservation.new_token_ratio == MIN_NEW_TOKEN_RATIO
    running = [Request("a", 10, 1000, 0.0)]
    running[0].num_output_tokens = 480
    reservation.on_retract(running)
    assert reservation.new_token_ratio == pytest.approx((480 + 20) / 1000)


def test_admission_holds_kv_for_futures_that_vllm_would_admit(make_engine) -> None:
    """100 blocks of 16 = 1600 tokens. Each request: 100 prompt + 1000 future tokens. vLLM
    admits all four prompts at once; SGLang admits one, whose future it must keep room for."""
    vllm = make_engine(num_gpu_blocks=100, max_num_batched_tokens=4096)
    held = sglang(make_engine, num_gpu_blocks=100)
    for engine in (vllm, held):
        for i in range(4):
            engine.add_request(Request(f"r{i}", 100, 1000, 0.0))
    assert len(vllm.step(0.0).batch.scheduled) == 4  # type: ignore[union-attr]
    assert len(held.step(0.0).batch.scheduled) == 1  # type: ignore[union-attr]


def test_retraction_frees_kv_and_every_request_still_finishes(make_engine) -> None:
    engine = sglang(make_engine, num_gpu_blocks=200)
    requests = [Request(f"r{i}", 200, 1500, 0.001 * i) for i in range(6)]
    for request in requests:
        engine.add_request(request)
    run_to_completion(engine)
    assert all(r.num_output_tokens == 1500 for r in requests)
    assert engine.scheduler.num_preemptions > 0


def test_a_recomputed_request_longer_than_the_budget_still_runs(make_engine) -> None:
    """Without chunked prefill, a preempted request's prompt plus output can exceed the
    prefill budget; it must still be re-admitted (alone), not wait forever."""
    engine = make_engine(
        mixed_batches=False,
        num_gpu_blocks=100,
        max_num_batched_tokens=600,
        enable_chunked_prefill=False,
    )
    requests = [Request(f"r{i}", 500, 900, 0.0) for i in range(2)]
    for request in requests:
        engine.add_request(request)
    run_to_completion(engine)
    assert engine.scheduler.num_preemptions > 0
    assert all(r.is_finished and r.num_output_tokens == 900 for r in requests)


@pytest.mark.parametrize(("n", "isl", "osl"), [(40, 300, 600), (24, 128, 2000)])
def test_jumps_under_reservation_give_exactly_the_step_by_step_times(
    make_engine, n: int, isl: int, osl: int
) -> None:
    def run(max_steps: int) -> tuple[list[list[float]], int]:
        engine = sglang(make_engine, num_gpu_blocks=1500)
        requests = [Request(f"r{i}", isl, osl, 0.001 * i) for i in range(n)]
        for request in requests:
            engine.add_request(request)
        run_to_completion(engine, max_steps=max_steps)
        return [engine.token_times(r) for r in requests], engine.scheduler.num_preemptions

    stepwise, jumped = run(1), run(1 << 30)
    assert stepwise[1] == jumped[1]
    for a, b in zip(stepwise[0], jumped[0], strict=True):
        assert b == pytest.approx(a, rel=1e-12, abs=1e-12)


def test_a_jump_under_reservation_looks_past_a_waiting_adapter_that_cannot_run(
    make_engine,
) -> None:
    """One LoRA slot, held by "b"; "a" waits for it (and for KV under the reservation). A
    request without an adapter that arrives at 0.5 s is admitted past "a" at the next step
    (`_admit` defers "a"), but the jump asked only whether "a" could be admitted and ran on
    to "b"'s end: its first token came at 1.6 s instead of 0.51 s."""
    firsts = []
    for max_steps in (1, 1 << 30):
        engine = sglang(make_engine, num_gpu_blocks=16, lora=LoraCost(2, 1, 16, 1e8, 0.003))
        late = Request("late", 16, 1, 0.5)
        engine.add_request(Request("b", 16, 200, 0.0, lora="b"))
        engine.add_request(Request("a", 16, 100, 0.0, lora="a"))
        now, added = 0.0, False
        while engine.has_unfinished or not added:
            if now >= late.arrival_s and not added:
                added = engine.add_request(late) is None
            horizon = math.inf if added else late.arrival_s
            result = engine.step(now, horizon_s=horizon, max_steps=max_steps)
            now = result.end_s if result is not None else horizon
        firsts.append(late.first_token_s)
    assert firsts[0] is not None and firsts[0] < 0.52
    assert firsts[1] == pytest.approx(firsts[0], rel=1e-12)
