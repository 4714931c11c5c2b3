"""The closed-loop benchmark model: the protocol as an input."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from inhouse.engine.build import Replica, ReplicaSpec, build_replica
from inhouse.errors import SpecError
from inhouse.predict import (
    AIPERF_SILICON,
    VLLM_BENCH,
    BenchmarkProtocol,
    ClosedLoop,
    run_closed_loop,
    wave_weights,
)
from inhouse.spec.knobs import VLLM_SERVE_DEFAULTS

REPLICA = build_replica(ReplicaSpec("Llama-3.1-8B", "h100_sxm", 1, "bf16", "vllm"))


def test_the_first_wave_weighs_less_in_a_longer_run() -> None:
    """All clients start at once, so the first wave queues for prefill; measuring 20 waves
    instead of 10 halves its weight in the mean."""
    short = run_closed_loop(REPLICA, 2048, 64, 32, protocol=VLLM_BENCH, sampled_waves=None)
    long = run_closed_loop(REPLICA, 2048, 64, 32, protocol=AIPERF_SILICON, sampled_waves=None)
    assert long.mean_ttft_ms < short.mean_ttft_ms
    assert long.num_requests == 2 * short.num_requests


def test_a_warmup_without_a_drain_is_left_out_of_the_means() -> None:
    cold = BenchmarkProtocol(waves=4)
    warm = replace(cold, warmup_requests=32, warmup_drains=False)
    a = run_closed_loop(REPLICA, 2048, 64, 32, protocol=cold, sampled_waves=None)
    b = run_closed_loop(REPLICA, 2048, 64, 32, protocol=warm, sampled_waves=None)
    assert b.num_requests == a.num_requests + 32
    assert b.mean_ttft_ms < a.mean_ttft_ms  # the queued first wave is the warm-up


def test_length_spread_is_seeded_and_changes_the_run() -> None:
    spread = BenchmarkProtocol(waves=4, isl_std=300, osl_std=20, seed=3)
    a = run_closed_loop(REPLICA, 1024, 64, 16, protocol=spread)
    b = run_closed_loop(REPLICA, 1024, 64, 16, protocol=spread)
    fixed = run_closed_loop(REPLICA, 1024, 64, 16, protocol=BenchmarkProtocol(waves=4))
    assert (a.mean_ttft_ms, a.mean_tpot_ms) == (b.mean_ttft_ms, b.mean_tpot_ms)
    assert a.mean_ttft_ms != fixed.mean_ttft_ms


def test_client_think_time_de_phases_a_locked_closed_loop() -> None:
    locked = BenchmarkProtocol(waves=8)
    thinking = replace(locked, think_time_s=1.0)
    a = run_closed_loop(REPLICA, 4096, 256, 8, protocol=locked, sampled_waves=None)
    b = run_closed_loop(REPLICA, 4096, 256, 8, protocol=thinking, sampled_waves=None)
    assert b.mean_ttft_ms < a.mean_ttft_ms


def _measured_sends(replica: Replica, protocol: BenchmarkProtocol, concurrency: int) -> list[float]:
    head = protocol.head(concurrency)
    loop = ClosedLoop(replica, 1024, 128, concurrency, protocol, head + 3 * concurrency)
    return [r.arrival_s for r in loop.run()[head:]]


def test_a_dephased_start_spreads_the_clients_over_a_request_cycle() -> None:
    """Locked, the 8 clients send each wave within a few decode steps of each other, for
    ever; de-phased, every wave's sends spread over most of a request cycle."""
    locked = BenchmarkProtocol(waves=3)
    sends = _measured_sends(REPLICA, locked, 8)
    assert sends[:8] == [0.0] * 8
    cycle_s = min(sends[8:16])  # one request, prefill and 128 tokens
    for wave in range(1, 3):
        times = sends[8 * wave : 8 * (wave + 1)]
        assert max(times) - min(times) < 0.1 * cycle_s
    dephased = _measured_sends(REPLICA, replace(locked, dephased_start=True), 8)
    for wave in range(3):
        times = dephased[8 * wave : 8 * (wave + 1)]
        assert max(times) - min(times) > 0.5 * cycle_s


def test_a_dephased_start_is_left_out_of_the_means_and_seeded() -> None:
    dephased = BenchmarkProtocol(waves=4, dephased_start=True, seed=1)
    a = run_closed_loop(REPLICA, 2048, 64, 16, protocol=dephased)
    b = run_closed_loop(REPLICA, 2048, 64, 16, protocol=dephased)
    other = run_closed_loop(REPLICA, 2048, 64, 16, protocol=replace(dephased, seed=2))
    assert (a.mean_ttft_ms, a.mean_tpot_ms) == (b.mean_ttft_ms, b.mean_tpot_ms)
    assert a.mean_ttft_ms != other.mean_ttft_ms
    assert a.num_requests == 4 * 16 + 16  # the de-phasing requests, then the measured
    locked = run_closed_loop(
        REPLICA, 2048, 64, 16, protocol=replace(dephased, dephased_start=False)
    )
    assert a.mean_ttft_ms < locked.mean_ttft_ms  # no burst of 16 prompts is measured


def test_the_dephasing_is_the_protocols_not_the_engines() -> None:
    """The same seed gives the same de-phasing requests whatever engine serves them."""
    sglang = build_replica(ReplicaSpec("Llama-3.1-8B", "b200_sxm", 2, "fp8", "sglang"))
    protocol = BenchmarkProtocol(waves=1, dephased_start=True, seed=5)
    heads = []
    for replica in (REPLICA, sglang):
        loop = ClosedLoop(replica, 1024, 128, 8, protocol, 16)
        heads.append([r.output_len for r in loop.run()[:8]])
    assert heads[0] == heads[1]
    assert len(set(heads[0])) > 1 and all(1 <= n <= 128 for n in heads[0])


def test_a_server_cap_queues_requests_at_the_door_with_their_clock_running() -> None:
    open_door = BenchmarkProtocol(waves=3)
    capped = replace(open_door, server_cap=4)
    a = run_closed_loop(REPLICA, 512, 128, 16, protocol=open_door, sampled_waves=None)
    b = run_closed_loop(REPLICA, 512, 128, 16, protocol=capped, sampled_waves=None)
    assert b.mean_ttft_ms > 2 * a.mean_ttft_ms
    assert b.mean_tpot_ms < a.mean_tpot_ms  # a smaller batch decodes faster


def test_wave_weights_sum_to_one_and_stand_in_for_unsimulated_requests() -> None:
    weights = wave_weights(40, 10, 200)
    assert sum(weights) == pytest.approx(1.0)
    assert weights[0] == pytest.approx(1 / 200) and weights[-1] == pytest.approx(180 / 20 / 200)
    assert wave_weights(10, 10, 10) == [0.1] * 10


def test_a_length_range_draws_every_length_uniformly_below_the_shape() -> None:
    """InferenceX's `--random-range-ratio 0.8`: prompts and outputs on [int(0.8 L), L]."""
    protocol = BenchmarkProtocol(waves=6, min_length_ratio=0.8, seed=2)
    loop = ClosedLoop(REPLICA, 1000, 100, 8, protocol, 48)
    done = loop.run()
    isls = {r.num_prompt_tokens for r in done}
    osls = {r.output_len for r in done}
    assert min(isls) >= 800 and max(isls) <= 1000 and len(isls) > 20
    assert min(osls) >= 80 and max(osls) <= 100 and len(osls) > 10


def test_a_length_range_parts_clients_that_start_in_step() -> None:
    """With exact lengths the 8 clients of the first wave's burst stay in step for ever and
    keep queueing for prefill; outputs of different lengths finish at different times, so
    every later wave queues less (the first wave is the same burst)."""
    fixed = BenchmarkProtocol(waves=8)
    ranged = replace(fixed, min_length_ratio=0.8)
    a = ClosedLoop(REPLICA, 4096, 256, 8, fixed, 64).run()
    b = ClosedLoop(REPLICA, 4096, 256, 8, ranged, 64).run()

    def later_ttft(done: list) -> float:
        return sum(r.first_token_s - r.arrival_s for r in done[16:]) / len(done[16:])

    assert later_ttft(b) < 0.8 * later_ttft(a)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"min_length_ratio": 0.0}, "min_length_ratio 0.0"),
        ({"min_length_ratio": 1.5}, "min_length_ratio 1.5"),
        ({"min_length_ratio": float("nan")}, "min_length_ratio nan"),
        ({"min_length_ratio": 0.8, "osl_std": 10.0}, "give one length spread"),
    ],
)
def test_a_length_range_outside_zero_to_one_is_refused_by_name(
    fields: dict[str, float], named: str
) -> None:
    with pytest.raises(SpecError, match=named):
        BenchmarkProtocol(**fields).check()  # type: ignore[arg-type]


def _steps_of(interval: int) -> list[tuple[bool, int]]:
    """(whether the step let requests in, its steps) of every engine call of a closed loop
    whose running batch is full (max_num_seqs 4, 8 clients): nothing can join a decode."""
    knobs = VLLM_SERVE_DEFAULTS.model_copy(update={"max_num_seqs": 4})
    spec = ReplicaSpec("Llama-3.1-8B", "h100_sxm", 1, "bf16", "sglang", knobs,
                       scheduler_recv_interval=interval)  # fmt: skip
    loop = ClosedLoop(build_replica(spec), 512, 64, 8, VLLM_BENCH, 32)
    engine, step = loop.engine, loop.engine.step
    calls: list[tuple[bool, int]] = []

    def recorded(now_s: float, horizon_s: float = math.inf, max_steps: int = 1 << 30):
        ready = engine.next_ready_s()
        result = step(now_s, horizon_s, max_steps)
        if result is not None:
            let_in = ready is not None and ready <= now_s and engine.next_ready_s() != ready
            calls.append((let_in, result.num_steps))
        return result

    engine.step = recorded  # type: ignore[method-assign]
    loop.run()
    return calls


def test_a_step_that_lets_requests_in_runs_alone_and_the_others_still_jump() -> None:
    """A jump's times are a series, a step's a running sum: a step that let requests in
    and jumped (the engine may, when none of them can join) moved the predictions in the
    last bits from before the recv interval (SGLang, 8k prompts, c64). With an interval,
    the steps that take nothing in still jump to the one that does."""
    every = _steps_of(1)
    assert any(let_in for let_in, _ in every)
    assert all(n == 1 for let_in, n in every if let_in)
    thirty = _steps_of(30)
    assert any(n > 1 for _, n in thirty)
    assert all(n == 1 for let_in, n in thirty if let_in)
