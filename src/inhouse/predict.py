"""Closed-loop benchmark prediction: the engine core run in virtual time for a fixed shape.

`concurrency` clients each send a request of exactly `isl` prompt tokens (random, so nothing is
shared in the prefix cache) and `osl` output tokens, and send the next one the moment the last
finishes — the shape of `vllm bench serve --max-concurrency C` with a random dataset. Mean TTFT and
mean TPOT follow vLLM's definitions: TTFT from send to first token, TPOT the mean gap after it,
`(e2e - ttft) / (osl - 1)` per request, averaged over all requests, the first wave included.

NOTE: every client sends its first request at time 0, as `vllm bench serve` does, so the first wave
queues for prefill. After it, each client pauses once, client *i* for *i/C* of a fraction (the
engine's fitted `closed_loop_spread`) of the time all clients take to finish one request each, so
the steady state is de-phased. A jitter-free closed loop would otherwise lock into waves that
arrive together and wait for each other's prefill — a state that real runs leave (the calibration
file's TTFTs at concurrency 64 are 3x below the locked state) because timing noise in the client
and API server spreads them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inhouse.engine.build import Replica
from inhouse.engine.request import Request
from inhouse.perf.step import StepShape


@dataclass(frozen=True, slots=True)
class ClosedLoopResult:
    mean_ttft_ms: float
    mean_tpot_ms: float
    num_requests: int
    duration_s: float
    num_steps: int
    num_preemptions: int
    output_throughput: float  # tokens/s


def default_num_requests(concurrency: int) -> int:
    """Ten waves: a common benchmark length (`--num-prompts` = 10 x `--max-concurrency`)."""
    return 10 * concurrency


# Waves simulated before the steady state is taken as stationary (see `run_closed_loop`).
SAMPLED_WAVES = 4


def run_closed_loop(
    replica: Replica,
    isl: int,
    osl: int,
    concurrency: int,
    num_requests: int | None = None,
    sampled_waves: int | None = SAMPLED_WAVES,
) -> ClosedLoopResult:
    """Predict a closed-loop run of `num_requests` requests; all clients start at 0.

    The first wave, the de-phasing second wave and two steady waves are simulated
    (`SAMPLED_WAVES`); the steady state is stationary, so a longer run's means count the first
    two waves as simulated and every later request at the sampled steady-state mean.
    `sampled_waves=None` simulates every request.
    """
    assert isl > 0 and osl > 0 and concurrency > 0, "isl, osl and concurrency must be positive"
    requested = num_requests or default_num_requests(concurrency)
    total = requested if sampled_waves is None else min(requested, sampled_waves * concurrency)
    engine = replica.new_engine()
    sent = 0
    done: list[Request] = []
    spread_s = replica.constants.closed_loop_spread * closed_loop_cycle_s(
        replica, isl, osl, concurrency
    )
    client_of: dict[str, int] = {}

    def send(client: int, at_s: float) -> None:
        nonlocal sent
        request = Request(f"r{sent}", isl, osl, at_s, tag=sent)
        reason = engine.add_request(request)
        assert reason is None, reason
        client_of[request.request_id] = client
        sent += 1

    for client in range(min(concurrency, total)):
        send(client, 0.0)
    now = 0.0
    while engine.has_unfinished:
        ready = engine.next_ready_s()
        result = engine.step(now, horizon_s=ready if ready is not None else math.inf)
        if result is None:
            assert ready is not None and ready > now, "engine stalled with work queued"
            now = ready
            continue
        now = result.end_s
        for request in result.finished:
            done.append(request)
            if sent < total:
                client = client_of.pop(request.request_id)
                pause_s = spread_s * client / concurrency if sent < 2 * concurrency else 0.0
                send(client, now + pause_s)

    done.sort(key=lambda r: r.tag)  # type: ignore[arg-type, return-value]
    ttfts = [r.first_token_s - r.arrival_s for r in done]  # type: ignore[operator]
    tpots = [
        (r.finish_s - r.first_token_s) / (osl - 1) if osl > 1 else 0.0  # type: ignore[operator]
        for r in done
    ]
    mean_ttft = _wave_weighted_mean(ttfts, concurrency, requested)
    mean_tpot = _wave_weighted_mean(tpots, concurrency, requested)
    return ClosedLoopResult(
        mean_ttft_ms=1000 * mean_ttft,
        mean_tpot_ms=1000 * mean_tpot,
        num_requests=len(done),
        duration_s=now,
        num_steps=engine.stats.num_steps,
        num_preemptions=engine.scheduler.num_preemptions,
        output_throughput=len(done) * osl / now,
    )


def closed_loop_cycle_s(replica: Replica, isl: int, osl: int, concurrency: int) -> float:
    """Rough time for every client to finish one request in steady state: each prompt's
    prefill once, plus `osl` decode steps of the whole batch."""
    step = replica.step_model
    prefill_s = step.step_time(StepShape(1, isl, 1, 0, isl * (isl + 1) // 2))
    base_s, per_ctx_s = step.decode_coefficients(concurrency)
    decode_s = base_s + per_ctx_s * concurrency * (isl + osl / 2)
    return concurrency * prefill_s + osl * decode_s


def _wave_weighted_mean(values: list[float], concurrency: int, requested: int) -> float:
    """Mean over `requested` requests, `values` in send order: the first wave and the
    de-phasing second wave as simulated, every later request at the sampled steady-state mean."""
    head = 2 * concurrency
    if len(values) >= requested or len(values) <= head:
        return sum(values) / len(values)
    steady = values[head:]
    steady_mean = sum(steady) / len(steady)
    return (sum(values[:head]) + (requested - head) * steady_mean) / requested
