"""Closed-loop benchmark prediction: the engine core run in virtual time for a fixed shape.

`concurrency` clients each send a request of `isl` prompt tokens (random, so nothing is shared
in the prefix cache) and `osl` output tokens, and send the next one the moment the last
finishes: the shape of `vllm bench serve --max-concurrency C`, aiperf or genai-perf
`--concurrency C` with a synthetic dataset. Mean TTFT and mean TPOT follow vLLM's definitions:
TTFT from send to first token, TPOT the mean gap after it, `(e2e - ttft) / (osl - 1)` per
request, averaged over the measured requests.

How the run is driven and measured is an input, `BenchmarkProtocol`: how many requests (or
waves of `concurrency`), a warm-up excluded from the means, the spread of the lengths, a cap
on the requests the server takes at once. Every client sends its first measured request at
time 0 (aiperf and genai-perf wait for the warm-up to drain before measuring), so the first
wave queues for prefill. What de-phases the clients afterwards is the same for every engine:
the API server serves prompts one at a time (`prompt_token_overhead_s` per token), streams
every output token (`output_token_overhead_s`), and lengths that vary finish at different
times. No per-engine "spread" constant is fitted. With fixed lengths that is not enough: the
steps are exact, so clients admitted together finish together and stay in step; a pause
per request shorter than a prefill step (`think_time_s`) does not part them.
`dephased_start` starts them at independent phases instead, the opposite extreme (see
docs/perf-model.md, "The benchmark protocol").
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass

from inhouse.engine.build import Replica
from inhouse.engine.core import StepResult
from inhouse.engine.request import Request
from inhouse.errors import SpecError
from inhouse.openai_errors import rejection_message


@dataclass(frozen=True, slots=True)
class BenchmarkProtocol:
    """How a closed-loop benchmark run is driven and which requests it measures.

    * `num_requests`: measured requests; None means `waves x concurrency`.
    * `warmup_requests`: sent before the measured ones and left out of the means. With
      `warmup_drains` (aiperf, genai-perf) the measurement starts from an idle server, which
      a deterministic model reaches without simulating the warm-up; without it the warm-up
      is the head of one continuous run.
    * `isl_std`, `osl_std`: standard deviation of the prompt and output lengths (normal,
      rounded, at least one token), drawn from `seed`.
    * `min_length_ratio`: below 1, every prompt and output length is instead drawn uniformly
      from the integers `[int(ratio * L), L]` (L the shape's length), independently: the
      `random` dataset of the `benchmark_serving.py` that InferenceX runs with
      `--random-range-ratio 0.8` (newer `vllm bench serve` reads that flag as
      `[L * (1 - r), L * (1 + r)]`, a different spread).
    * `server_cap`: requests the server holds at once (an API-server or gateway limit); the
      rest wait at its door with their clock running. None: no cap beyond the engine's.
    * `think_time_s`: mean pause of a client between receiving a response and sending its
      next request (exponential, drawn from `seed`); outside TTFT. The load generator's own
      send-path latency (a few ms); in the model it does not de-phase a locked loop (see
      `dephased_start`).
    * `dephased_start`: the clients enter the measurement spread over one request cycle, as
      the clients of a long run are, instead of all at once: each client first runs one
      unmeasured request whose output is a uniform share (drawn from `seed`) of `osl`, so
      its first measured send falls at a random point of the cycle. The premise is the
      load generator's: timing variance (send path, HTTP, the server's per-request work)
      accumulates over a run until the clients' phases are independent; the model's steps
      are exact, so jitter shorter than a prefill step collapses back into one step and
      cannot do that itself. The same for every engine; it fits no constant.
    """

    num_requests: int | None = None
    waves: int = 10
    warmup_requests: int = 0
    warmup_drains: bool = True
    isl_std: float = 0.0
    osl_std: float = 0.0
    server_cap: int | None = None
    think_time_s: float = 0.0
    dephased_start: bool = False
    seed: int = 0
    min_length_ratio: float = 1.0

    def measured(self, concurrency: int) -> int:
        return self.num_requests or self.waves * concurrency

    def check(self) -> None:
        """Refuse settings no run can have, naming the input (`--flag` or CSV column)."""
        if self.num_requests is not None and self.num_requests <= 0:
            raise SpecError(
                f"num_requests {self.num_requests}: give at least 1 measured request, or "
                "leave it out for waves x concurrency"
            )
        for name in ("isl_std", "osl_std", "think_time_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise SpecError(f"{name} {value}: a spread or pause is a finite number >= 0")
        ratio = self.min_length_ratio
        if not (math.isfinite(ratio) and 0 < ratio <= 1):
            raise SpecError(
                f"min_length_ratio {ratio}: the shortest length as a share of the shape's, "
                "above 0 and at most 1 (1: every length exact)"
            )
        if ratio < 1 and (self.isl_std or self.osl_std):
            raise SpecError(
                f"min_length_ratio {ratio} with isl_std {self.isl_std}, osl_std "
                f"{self.osl_std}: give one length spread, a uniform range (min_length_ratio "
                "below 1) or a normal one (isl_std, osl_std) with min_length_ratio 1 "
                "(--min-length-ratio 1)"
            )
        if self.server_cap is not None and self.server_cap <= 0:
            raise SpecError(
                f"server_cap {self.server_cap}: a server holds at least 1 request at once; "
                "leave it out for no cap beyond the engine's"
            )

    def head(self, concurrency: int) -> int:
        """Requests simulated before the measured ones: the de-phasing requests, then a
        warm-up that does not drain."""
        dephasing = concurrency if self.dephased_start else 0
        return dephasing + (0 if self.warmup_drains else self.warmup_requests)


# `vllm bench serve --max-concurrency C --num-prompts 10C` with a random dataset: no warm-up.
VLLM_BENCH = BenchmarkProtocol(waves=10)
# NVIDIA aiconfigurator's silicon runs (aiperf `--concurrency C --request-count 20C` with a
# warm-up of C to 2C requests it waits out, fixed lengths): the calibration corpus's protocol.
AIPERF_SILICON = BenchmarkProtocol(waves=20, warmup_requests=1, warmup_drains=True)
# SemiAnalysis InferenceX's sweeps, where most of the corpus comes from (its
# benchmarks/benchmark_lib.sh and workflow template): its fork of vLLM's benchmark_serving.py
# with `--num-prompts 10C --max-concurrency C --request-rate inf --ignore-eos
# --random-range-ratio 0.8 --num-warmups 2C`, a warm-up it waits out, on a fresh server per
# point: ten waves from an idle server, every length uniform on [0.8 L, L].
INFERENCEX_SWEEP = BenchmarkProtocol(waves=10, warmup_drains=True, min_length_ratio=0.8)


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
    return VLLM_BENCH.measured(concurrency)


# The most clients a prediction simulates: past a replica's max_num_seqs (at most a few
# thousand) more clients only queue, and each costs its requests' simulation (c20000: 40 s).
MAX_CONCURRENCY = 65_536
# Waves simulated before the steady state is taken as stationary (see `run_closed_loop`).
SAMPLED_WAVES = 4


def run_closed_loop(
    replica: Replica,
    isl: int,
    osl: int,
    concurrency: int,
    num_requests: int | None = None,
    sampled_waves: int | None = SAMPLED_WAVES,
    protocol: BenchmarkProtocol = VLLM_BENCH,
) -> ClosedLoopResult:
    """Predict a closed-loop run; `num_requests` overrides the protocol's count.

    The first wave, the de-phasing second wave and the waves after it up to `sampled_waves`
    are simulated; the steady state is stationary, so a longer run's means count the first
    two waves as simulated and every later request at the sampled steady-state mean.
    `sampled_waves=None` simulates every request.
    """
    check_shape(isl, osl, concurrency)
    protocol.check()
    requested = num_requests or protocol.measured(concurrency)
    head = protocol.head(concurrency)
    total = requested if sampled_waves is None else min(requested, sampled_waves * concurrency)
    loop = ClosedLoop(replica, isl, osl, concurrency, protocol, head + total)
    done = loop.run()
    measured = done[head:]
    ttfts = [r.first_token_s - r.arrival_s for r in measured]  # type: ignore[operator]
    tpots = [
        (r.finish_s - r.first_token_s) / (r.output_len - 1) if r.output_len > 1 else 0.0  # type: ignore[operator]
        for r in measured
    ]
    engine = loop.engine
    return ClosedLoopResult(
        mean_ttft_ms=1000 * _wave_weighted_mean(ttfts, concurrency, requested),
        mean_tpot_ms=1000 * _wave_weighted_mean(tpots, concurrency, requested),
        num_requests=len(done),
        duration_s=loop.now,
        num_steps=engine.stats.num_steps,
        num_preemptions=engine.scheduler.num_preemptions,
        output_throughput=sum(r.output_len for r in done) / loop.now,
    )


def check_shape(isl: int, osl: int, concurrency: int) -> None:
    """Refuse a benchmark shape no run can have, naming the input."""
    if min(isl, osl, concurrency) <= 0:
        raise SpecError(
            f"isl {isl}, osl {osl}, concurrency {concurrency}: each must be a positive integer"
        )
    if concurrency > MAX_CONCURRENCY:
        raise SpecError(
            f"concurrency {concurrency}: at most {MAX_CONCURRENCY:,} clients. The model "
            "simulates the run's requests; a replica holds at most its max_num_seqs at once, "
            "and the rest only queue (model that with server_cap)"
        )


class ClosedLoop:
    """One closed-loop run: clients, the server's door, and the engine in virtual time.

    Sends wait in a heap so that they reach the engine in time order (its API server is a
    queue), whatever order the clients decide them in.
    """

    def __init__(
        self,
        replica: Replica,
        isl: int,
        osl: int,
        concurrency: int,
        protocol: BenchmarkProtocol,
        total: int,
    ) -> None:
        self.replica = replica
        self.engine = replica.new_engine()
        self.rng = random.Random(protocol.seed)
        self.isl, self.osl = isl, osl
        self.protocol = protocol
        self.concurrency = concurrency
        self.total = total
        self.sent = 0
        self.now = 0.0
        self.in_server = 0
        self.sends: list[tuple[float, int, Request]] = []
        self.door: deque[Request] = deque()
        self.done: list[Request] = []

    def _length(self, mean: int, std: float) -> int:
        ratio = self.protocol.min_length_ratio
        if ratio < 1:
            return self.rng.randint(max(1, int(mean * ratio)), mean)
        if std <= 0:
            return mean
        return max(1, round(self.rng.gauss(mean, std)))

    def schedule_send(self, at_s: float, osl_share: float | None = None) -> None:
        """Send the next request at `at_s`; `osl_share` shortens its output (de-phasing)."""
        p = self.protocol
        isl = self._length(self.isl, p.isl_std)
        osl = self._length(self.osl, p.osl_std)
        if osl_share is not None:
            osl = max(1, math.ceil(osl_share * osl))
        request = Request(f"r{self.sent}", isl, osl, at_s, tag=self.sent)
        heapq.heappush(self.sends, (at_s, self.sent, request))
        self.sent += 1

    def _release_sends(self) -> None:
        cap = self.protocol.server_cap
        while self.sends and self.sends[0][0] <= self.now:
            request = heapq.heappop(self.sends)[2]
            if cap is not None and self.in_server >= cap:
                self.door.append(request)
            else:
                self._admit(request, request.arrival_s)

    def _admit(self, request: Request, now_s: float) -> None:
        # A request held at the door keeps its send time: its TTFT counts the wait.
        sent_s = request.arrival_s
        request.arrival_s = now_s
        reason = self.engine.add_request(request)
        if reason is not None:
            # A prompt (or prompt and output) the replica can never hold: an input error.
            raise SpecError(
                f"isl {request.num_prompt_tokens}, osl {request.output_len}: "
                + rejection_message(reason)
            )
        request.arrival_s = sent_s
        self.in_server += 1

    def run(self) -> list[Request]:
        engine = self.engine
        for _ in range(min(self.concurrency, self.total)):
            share = self.rng.random() if self.protocol.dephased_start else None
            self.schedule_send(0.0, share)
        while self.sends or engine.has_unfinished:
            self._release_sends()
            next_send = self.sends[0][0] if self.sends else math.inf
            # NOTE: a step that lets requests in runs alone, as it did before the recv
            # interval (the same predictions to the last bit: a jump's times are a series, a
            # step's a running sum). Otherwise the engine stops a jump before its scheduler
            # would take a pending request in (`EngineCore`), so only the next send bounds it.
            horizon = self.now if engine.takes_pending_at(self.now) else next_send
            result = engine.step(self.now, horizon_s=horizon)
            if result is None:
                ready = engine.next_ready_s()
                horizon = min(ready if ready is not None else math.inf, next_send)
                assert horizon > self.now and horizon < math.inf, "engine stalled with work"
                self.now = horizon
                continue
            self.now = result.end_s
            self.on_step(result)
            for request in result.finished:
                self._finish(request)
        self.done.sort(key=lambda r: r.tag)  # type: ignore[arg-type, return-value]
        return self.done

    def on_step(self, result: StepResult) -> None:
        """Called after every engine step (or jump), before its finished requests are
        handled; the calibration fit records the run here."""

    def _finish(self, request: Request) -> None:
        self.done.append(request)
        self.in_server -= 1
        finished_s = request.finish_s
        assert finished_s is not None
        if self.door:
            self._admit(self.door.popleft(), max(finished_s, self.now))
        if self.sent < self.total:
            think = self.protocol.think_time_s
            pause = self.rng.expovariate(1.0 / think) if think > 0 else 0.0
            self.schedule_send(finished_s + pause)


def wave_weights(num_values: int, concurrency: int, requested: int) -> list[float]:
    """Weights of simulated requests (in send order) in the mean over `requested`: the first
    wave and the de-phasing second wave as simulated, every later simulated request standing
    for its share of the requests not simulated."""
    head = 2 * concurrency
    if num_values >= requested or num_values <= head:
        return [1.0 / num_values] * num_values
    steady = (requested - head) / (num_values - head) / requested
    return [1.0 / requested] * head + [steady] * (num_values - head)


def _wave_weighted_mean(values: list[float], concurrency: int, requested: int) -> float:
    weights = wave_weights(len(values), concurrency, requested)
    return sum(w * v for w, v in zip(weights, values, strict=True))
