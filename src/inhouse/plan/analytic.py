"""The analytic pool model: p95 latencies of one replica under a share of a pool's traffic.

It reuses the engine's step-time model (`perf.StepModel`) and reasons about the steady state of
vLLM's continuous batching with chunked prefill (shared/reference/perf-model.md §6):

* **Decode.** `B` sequences decode together; a decode-only step takes `t_dec(B)` (weights, KV of
  every context, overheads). By Little's law `B = λ·E[O]·t̄`, where `t̄` is the mean step time.
* **Prefill.** A request's uncached prompt `U` runs in chunks of `C − B` tokens (the token budget
  `max_num_batched_tokens` less the decode tokens); each chunk step takes longer than a decode
  step by `Δ`. The replica spends `ρ_p = λ·E[ΣΔ]` of its time on that extra, so
  `t̄ = t_dec(B) / (1 − ρ_p)`. `B` is solved by fixed point (t_dec is linear in B).
* **Queueing.** Prefill is an FCFS server working through `C − B` tokens per chunk step, so a
  request's service is `U·t_chunk/(C − B)`. The router sends each request to the least-loaded
  replica, so the pool's `c` replicas queue like one M/G/c: a request waits with Erlang C's
  probability, and then on average `E[S]/(c(1 − ρ))·(ca² + cs²)/2` (Allen–Cunneen), with the
  arrivals' CV² (1 for Poisson and for many sessions) and an exponential tail (`dist.Dist`).
* **Latencies.** TTFT = API overhead + wait + the request's own chunk steps; TPOT = the decode
  step at the batch's p95 (`B + 1.645·√B`) plus the prefill extras that fall in the request's
  decode time (`_tpot`); ITL atoms: decode steps and chunk steps, the latter a fraction
  `f` of all steps; E2E = TTFT + (O − 1)·t̄.
* **KV.** In-flight requests `N = λ·E[E2E]` each hold their uncached prompt and half their output
  (p95 of a compound Poisson sum); the prefix-cache working set (system prompts, session
  histories, open documents) must fit beside them, else the hit rate falls in proportion.
* **Sessions.** Agent traffic is a closed loop: `λ = sessions / (E[E2E] + think time)`, solved in
  the same fixed point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from inhouse.engine.build import Replica
from inhouse.perf.step import StepShape
from inhouse.plan.dist import Dist, erlang_c
from inhouse.plan.lora_share import lora_step_scale
from inhouse.plan.traffic import Shapes, TrafficProfile

Z95 = 1.6448536269514722
__all__ = [
    "MAX_KV_UTILIZATION",
    "PoolForecast",
    "PoolModel",
    "Stream",
    "StreamForecast",
    "erlang_c",
]

ITERATIONS = 10
SESSION_ITERATIONS = 16
# Session scale bracket width (relative) at which the search stops.
SESSION_TOLERANCE = 0.01
# Exponent of each step toward the session rate the latency implies (1 would jump there).
SESSION_DAMPING = 0.5
# Floor of a session's cycle (think time plus latency) in the closed-loop rate.
MIN_CYCLE_S = 0.05
# Chunk sizes at which the step model is read; others are interpolated. NOTE: 16, not 8: a
# step's linear layers turn from weight-bound to compute-bound at a few hundred tokens, a kink
# that coarser points interpolate across (a 500-token prefill was off by 1.2%).
CHUNK_SIZES = 16
# vLLM's KV-cache utilization the seeds keep below in steady state.
MAX_KV_UTILIZATION = 0.9


@dataclass(frozen=True, slots=True)
class Stream:
    """The part of one workload a pool serves: `shapes` (a subset of the profile's, e.g. the
    prompts above a length threshold) and `share`, the fraction of the workload's requests."""

    profile: TrafficProfile
    shapes: Shapes
    share: float = 1.0

    @property
    def name(self) -> str:
        return self.profile.name


@dataclass(frozen=True, slots=True)
class StreamForecast:
    """One stream on one replica: its rate, latency distributions and token rates."""

    rate_per_s: float
    ttft: Dist
    itl: Dist
    tpot: Dist
    e2e: Dist
    input_tokens_per_s: float
    output_tokens_per_s: float
    cached_tokens_per_s: float
    prefill_busy: float  # share of the replica's time its prefill takes
    decode_busy: float  # share of the replica's time its decode takes

    def p95_ms(self, metric: str, q: float = 0.95) -> float:
        dist: Dist = getattr(self, metric)
        return 1000.0 * dist.quantile(q)


@dataclass(frozen=True, slots=True)
class PoolForecast:
    """One replica of a pool at `load` (the fraction of the pool's peak traffic it gets)."""

    load: float
    stable: bool
    why_unstable: str
    streams: dict[str, StreamForecast]
    batch: float
    batch_p95: float
    decode_step_ms: float
    chunk_step_ms: float
    mean_step_ms: float
    chunk_tokens: int
    mixed_step_fraction: float
    prefill_utilization: float
    compute_utilization: float
    kv_tokens: int
    kv_p95_tokens: float
    working_set_tokens: float
    cache_fit: float
    max_num_seqs: int

    @property
    def utilization(self) -> float:
        return max(self.prefill_utilization, self.compute_utilization)

    @property
    def kv_utilization(self) -> float:
        return self.kv_p95_tokens / self.kv_tokens


@dataclass(slots=True)
class _State:
    """One pass of the fixed point: scalars and per-sample arrays."""

    rates: list[float]
    weights: np.ndarray
    cached: np.ndarray
    own_s: np.ndarray  # each request's own prefill steps
    extra_s: np.ndarray  # what those steps add over decode steps
    num_chunks: np.ndarray
    e2e_s: np.ndarray  # deterministic part of E2E
    ttft_s: np.ndarray  # deterministic part of TTFT
    unstable: str
    batch: float
    t_dec: float
    slope: float
    chunk_full: float
    chunk_tokens: int
    mean_step: float
    rho_p: float
    rho_q: float
    compute_util: float
    wait_prob: float
    wait_mean: float
    kv_p95: float
    working_set: float
    fit: float


class PoolModel:
    """The analytic model of one replica configuration serving some streams."""

    def __init__(
        self, replica: Replica, streams: Sequence[Stream], time_scale: float = 1.0
    ) -> None:
        assert streams, "a pool serves at least one stream"
        self.replica = replica
        self.streams = list(streams)
        self.time_scale = time_scale
        config = replica.config
        self.budget = config.max_num_batched_tokens
        self.max_num_seqs = config.max_num_seqs
        self.kv_tokens = replica.memory.kv_tokens
        step = replica.step_model
        # Cost of one attention query-key pair, compute-bound: read off the step model.
        one = step.step_time(StepShape(1, 1, 1, 0, 10**9))
        two = step.step_time(StepShape(1, 1, 1, 0, 2 * 10**9))
        self.pair_s = (two - one) / 10**9 * time_scale
        self.prompt = np.concatenate([s.shapes.prompt for s in streams])
        self.cached = np.concatenate([s.shapes.cached for s in streams])
        self.output = np.concatenate([s.shapes.output for s in streams])
        self.sizes = [len(s.shapes.prompt) for s in streams]
        self.overhead_s = config.request_overhead_s + config.prompt_token_overhead_s * self.prompt
        self.has_sessions = any(s.profile.is_sessions for s in streams)
        self.cv2 = [1.0 if s.profile.is_sessions else s.profile.arrival_cv2 for s in streams]
        self.step_scale = time_scale * lora_step_scale(replica, self.streams)  # LoRA kernels

    # -- step times ----------------------------------------------------------------------

    def _step(self, shape: StepShape) -> float:
        return self.replica.step_model.step_time(shape) * self.step_scale

    def decode_s(self, batch: float, ctx: float) -> tuple[float, float]:
        """`(t_dec(batch), d t_dec / d batch)` for sequences of mean context `ctx`."""
        step = self.replica.step_model
        lo = max(1, math.floor(batch))
        base_lo, per_ctx = step.decode_coefficients(lo)
        base_hi, _ = step.decode_coefficients(lo + 1)
        slope = (base_hi - base_lo + per_ctx * ctx) * self.step_scale
        value = (base_lo + per_ctx * ctx * lo) * self.step_scale + slope * (batch - lo)
        return max(value, 0.0), slope

    def prefill_s(
        self, uncached: np.ndarray, history: np.ndarray, batch: int, ctx_total: float
    ) -> tuple[np.ndarray, np.ndarray, float, int]:
        """Each request's own chunk steps beside `batch` decodes (of `ctx_total` context):
        `(seconds, number of chunks, one full-chunk step, chunk tokens)`.

        A prompt of `U` uncached tokens runs `n = U // c` full chunks of `c = C − batch` tokens
        and one of the rest `r`. A chunk step's time comes from the step model for its size
        (interpolated between a few sizes); attention to earlier chunks and to the cached
        history adds `pairs · t_pair`, with `pairs = c²·n(n−1)/2 + r·n·c + U·history`.
        """
        chunk = max(self.budget - batch, 1)
        sizes = np.array(
            sorted({round(chunk ** (i / (CHUNK_SIZES - 1))) for i in range(CHUNK_SIZES)})
        )
        times = [
            self._step(
                StepShape(
                    batch + 1,
                    batch + int(n),
                    batch + 1,
                    int(ctx_total),
                    int(ctx_total + batch + n * (n + 1) / 2),
                )
            )
            for n in sizes
        ]
        num_full = np.floor(uncached / chunk)
        rest = uncached - num_full * chunk
        rest_s = np.where(rest > 0, np.interp(rest, sizes, times), 0.0)
        pairs = chunk * chunk * num_full * (num_full - 1) / 2 + rest * num_full * chunk
        pairs += uncached * history
        seconds = num_full * times[-1] + rest_s + self.pair_s * pairs
        return seconds, num_full + (rest > 0), times[-1], chunk

    # -- the fixed point -----------------------------------------------------------------

    def forecast(self, load: float, servers: int = 1) -> PoolForecast:
        """The steady state of one replica carrying `load` times the pool's peak traffic, one
        of `servers` replicas sharing the queue.

        Open-loop rates are fixed, so the batch and cache fit iterate to their fixed point.
        Session rates depend on the latency they cause: their common scale moves geometrically
        toward the one the latency implies (and halves while the replica is overloaded).
        """
        if not self.has_sessions:
            rates = [self._rate(s, load, 1.0) for s in self.streams]
            settled, _, _ = self._settle(load, rates, 1.0, 1.0, servers)
            return self._forecast(load, settled)
        low, high = 0.0, 1.0  # session scales known too low / too high
        scale, batch, fit = 0.5, 1.0, 1.0
        stable: _State | None = None
        state: _State | None = None
        for _ in range(SESSION_ITERATIONS):
            rates = [self._rate(s, load, scale) for s in self.streams]
            state, settled_batch, settled_fit = self._settle(load, rates, batch, fit, servers)
            ratio = 0.5
            if not state.unstable:
                batch, fit = settled_batch, settled_fit
                means = self._stream_means(state.e2e_s + state.wait_mean)
                ratio = min(
                    self._rate(s, load, 1.0, e) / r
                    for s, e, r in zip(self.streams, means, rates, strict=True)
                    if s.profile.is_sessions
                )
            if ratio >= 1.0:
                low, stable = scale, state
            else:
                high = scale
            # Step toward the implied scale, kept inside the bracket (bisection as fallback).
            proposal = scale * ratio**SESSION_DAMPING
            scale = proposal if low < proposal < high else 0.5 * (low + high)
            if high - low < SESSION_TOLERANCE * high:
                break
        assert state is not None
        if stable is not None and (state.unstable or low > 0):
            state = stable
        return self._forecast(load, state)

    def _settle(
        self, load: float, rates: list[float], batch: float, fit: float, servers: int
    ) -> tuple[_State, float, float]:
        """The batch and cache-fit fixed point at fixed rates (warm-started)."""
        state = self._solve(load, rates, batch, fit, servers)
        for _ in range(ITERATIONS):
            if state.unstable:
                break
            new_fit = 0.5 * (fit + state.fit)
            converged = abs(state.batch - batch) <= 0.01 * max(batch, 1.0)
            converged = converged and abs(new_fit - fit) <= 0.01
            batch, fit = state.batch, new_fit
            if converged:
                break
            state = self._solve(load, rates, batch, fit, servers)
        return state, batch, fit

    def _rate(self, stream: Stream, load: float, scale: float, e2e_s: float = 0.0) -> float:
        """Requests per second per replica: open loop at its share of the peak rate; sessions
        at `scale` times their ceiling (no latency at all), or as implied by a mean latency."""
        profile = stream.profile
        if not profile.is_sessions:
            return load * profile.peak_rate_per_s * stream.share
        think_s = max(profile.think_time_s, MIN_CYCLE_S)
        return scale * load * profile.peak_sessions / (think_s + e2e_s)

    def _stream_means(self, values: np.ndarray) -> list[float]:
        out, start = [], 0
        for size in self.sizes:
            out.append(float(values[start : start + size].mean()))
            start += size
        return out

    def _solve(
        self, load: float, rates: list[float], batch: float, fit: float, servers: int
    ) -> _State:
        weights = np.concatenate(
            [np.full(n, r / n) for n, r in zip(self.sizes, rates, strict=True)]
        )
        total_rate = max(float(weights.sum()), 1e-12)
        prompt, output = self.prompt, self.output
        cached = self.cached * fit
        uncached = np.maximum(prompt - cached, 1.0)
        out_rate = float(np.dot(weights, output))
        ctx = float(np.dot(weights, output * (prompt + output / 2)) / max(out_rate, 1e-12))

        int_batch = max(1, math.ceil(batch))
        t_dec, slope = self.decode_s(batch, ctx)
        own, num_chunks, chunk_full, chunk_tokens = self.prefill_s(
            uncached, prompt - uncached, int_batch, int_batch * ctx
        )
        extra = np.maximum(own - num_chunks * t_dec, 0.0)
        rho_p = float(np.dot(weights, extra))
        service = uncached * chunk_full / chunk_tokens
        rho_q = float(np.dot(weights, service))
        compute_util = rho_p + out_rate * slope

        unstable = ""
        if int_batch >= self.budget:
            unstable = "decodes fill the whole token budget: no room left for prefill"
        elif max(rho_q, rho_p) >= 1.0:
            unstable = f"prefill alone needs {max(rho_q, rho_p):.0%} of the replica"
        elif compute_util >= 1.0:
            unstable = f"prefill plus decode need {compute_util:.0%} of the replica"
        mean_step = t_dec
        wait_mean = 0.0
        wait_prob = 0.0
        if not unstable:
            k = out_rate / (1.0 - rho_p)
            batch = max(k * (t_dec - slope * batch) / (1.0 - k * slope), 0.0)
            t_dec, slope = self.decode_s(batch, ctx)
            mean_step = t_dec / (1.0 - rho_p)
            mean_service = rho_q / total_rate
            var_service = float(np.dot(weights, (service - mean_service) ** 2)) / total_rate
            cs2 = var_service / max(mean_service**2, 1e-18)
            ca2 = sum(r * c for r, c in zip(rates, self.cv2, strict=True)) / total_rate
            wait_prob = erlang_c(servers, rho_q)
            wait_mean = wait_prob * mean_service / (servers * (1.0 - rho_q)) * (ca2 + cs2) / 2.0
        ttft = self.overhead_s + own
        e2e = ttft + np.maximum(output - 1, 0) * mean_step

        in_flight = float(np.dot(weights, e2e)) + total_rate * wait_mean
        held = uncached + output / 2
        m1 = float(np.dot(weights, held)) / total_rate
        m2 = float(np.dot(weights, held**2)) / total_rate
        kv_mean = in_flight * m1
        kv_p95 = kv_mean + Z95 * math.sqrt(max(in_flight * m2, 0.0))
        working_set = self._working_set(load)
        new_fit = 1.0
        if working_set > 0:
            new_fit = min(1.0, max(0.0, (self.kv_tokens - kv_mean) / working_set))
        return _State(
            rates=rates,
            weights=weights,
            cached=cached,
            own_s=own,
            extra_s=extra,
            num_chunks=num_chunks,
            e2e_s=e2e,
            ttft_s=ttft,
            unstable=unstable,
            batch=batch,
            t_dec=t_dec,
            slope=slope,
            chunk_full=chunk_full,
            chunk_tokens=chunk_tokens,
            mean_step=mean_step,
            rho_p=rho_p,
            rho_q=rho_q,
            compute_util=compute_util,
            wait_prob=wait_prob,
            wait_mean=wait_mean,
            kv_p95=kv_p95 + working_set * new_fit,
            working_set=working_set,
            fit=new_fit,
        )

    def _forecast(self, load: float, st: _State) -> PoolForecast:
        """Latency distributions from a solved state."""
        weights = st.weights
        prompt = self.prompt
        batch_p95 = st.batch + Z95 * math.sqrt(st.batch)
        ctx = 0.0
        out_rate = float(np.dot(weights, self.output))
        if out_rate > 0:
            ctx = float(np.dot(weights, self.output * (prompt + self.output / 2)) / out_rate)
        t_dec_hi, _ = self.decode_s(batch_p95, ctx)
        chunk_rate = float(np.dot(weights, st.num_chunks))
        mixed = min(chunk_rate * st.mean_step, 1.0)
        # ITL: decode steps, and each request's chunk steps longer by its mean extra.
        itl = Dist.atoms(
            np.concatenate(([t_dec_hi], t_dec_hi + st.extra_s / st.num_chunks)),
            np.concatenate(
                ([1.0 - mixed], mixed * weights * st.num_chunks / max(chunk_rate, 1e-12))
            ),
        )
        tpot = self._tpot(st, t_dec_hi)
        wait_prob = st.wait_prob
        wait_tail = st.wait_mean / wait_prob if wait_prob > 0 else 0.0
        streams: dict[str, StreamForecast] = {}
        start = 0
        for stream, size, rate in zip(self.streams, self.sizes, st.rates, strict=True):
            sl = slice(start, start + size)
            start += size
            w = weights[sl]
            streams[stream.name] = StreamForecast(
                rate_per_s=rate,
                ttft=Dist.atoms(st.ttft_s[sl], None, wait_prob, wait_tail),
                itl=itl,
                tpot=tpot[stream.name],
                e2e=Dist.atoms(st.e2e_s[sl], None, wait_prob, wait_tail),
                input_tokens_per_s=float(np.dot(w, prompt[sl])),
                output_tokens_per_s=float(np.dot(w, self.output[sl])),
                cached_tokens_per_s=float(np.dot(w, st.cached[sl])),
                prefill_busy=float(np.dot(w, st.extra_s[sl])),
                decode_busy=float(np.dot(w, self.output[sl])) * st.slope,
            )
        return PoolForecast(
            load=load,
            stable=not st.unstable,
            why_unstable=st.unstable,
            streams=streams,
            batch=st.batch,
            batch_p95=batch_p95,
            decode_step_ms=1000.0 * st.t_dec,
            chunk_step_ms=1000.0 * st.chunk_full,
            mean_step_ms=1000.0 * st.mean_step,
            chunk_tokens=st.chunk_tokens,
            mixed_step_fraction=mixed,
            prefill_utilization=st.rho_q,
            compute_utilization=st.compute_util,
            kv_tokens=self.kv_tokens,
            kv_p95_tokens=st.kv_p95,
            working_set_tokens=st.working_set,
            cache_fit=st.fit,
            max_num_seqs=self.max_num_seqs,
        )

    def _tpot(self, st: _State, t_dec: float) -> dict[str, Dist]:
        """Per-request TPOT: decode steps plus the prefill extras that land in the request's
        decode time `T = (O − 1)·t̄`. Prefills start at rate λ, each adding its extra `X`: a
        compound Poisson sum with mean `λ·T·E[X]` and variance `λ·T·E[X²]`, spread over the
        request's `O − 1` gaps (normal approximation)."""
        rate = float(st.weights.sum())
        mean_x2 = float(np.dot(st.weights, st.extra_s**2)) / max(rate, 1e-12)
        gaps = np.maximum(self.output - 1.0, 1.0)
        mean = t_dec + st.rho_p * st.mean_step
        spread = np.sqrt(rate * st.mean_step * mean_x2 / gaps)
        out: dict[str, Dist] = {}
        start = 0
        for stream, size in zip(self.streams, self.sizes, strict=True):
            sl = slice(start, start + size)
            start += size
            decoding = self.output[sl] > 1
            spreads = spread[sl][decoding] if decoding.any() else spread[sl]
            # Spreads differ by output length only: 8 bins per factor e of length suffice.
            binned = np.exp(np.round(np.log(np.maximum(spreads, 1e-12)) * 8.0) / 8.0)
            unique, counts = np.unique(binned, return_counts=True)
            out[stream.name] = Dist.atoms(
                np.full(len(unique), mean), counts, spread_s=np.maximum(unique, 1e-9)
            )
        return out

    def _working_set(self, load: float) -> float:
        total = 0.0
        for stream in self.streams:
            p = stream.profile
            total += p.working_set_shared_tokens
            total += p.working_set_per_session_tokens * p.peak_sessions * load
            total += p.working_set_spread_tokens * stream.share * min(load, 1.0)
        return total
