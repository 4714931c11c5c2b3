"""Benchmark metrics with `vllm bench serve`'s names and semantics, plus named extensions.

Definitions (shared/reference/bench-metrics.md §8, checked against the code of the vLLM 0.32
`vllm/benchmarks/serve.py` and `lib/endpoint_request_func.py` installed here):

* t_send is taken just before the request is written; t_sched is when the workload meant it to
  arrive. TTFT = first SSE `data:` message with non-empty `choices` − t_send (the chat role chunk
  counts, as in vLLM). E2EL = last message with non-empty `choices` − t_send (NOTE: vLLM 0.32
  stops the clock at the last token chunk on both paths; §8 says the chat usage chunk counts —
  the two differ by the microseconds between those chunks).
* ITL: one sample per gap between consecutive `choices` messages, pooled over successful
  requests; never split per token. TPOT = (E2EL − TTFT) / (N_out − 1) per request with
  N_out > 1, every request weighted equally.
* N_out = `usage.completion_tokens`; without usage, the number of chunks that carried output
  (text, reasoning or tool calls: not the role chunk; we carry no tokenizer; flagged in
  `output_tokens_source`). N_in = the server's `usage.prompt_tokens` when reported, else the
  workload's prompt length — what vLLM 0.32 does (NOTE: §8 says client-side; both totals are
  reported beside it).
* Statistics: mean, median, std (ddof 0) and `numpy.percentile` (linear), in ms; an empty list
  counts as `[0]`, as vLLM's `np.mean(x or 0)`. Keys `mean_ttft_ms`, `p99_ttft_ms`, ...
* duration: just before the first dispatch to the end of the last request. Goodput: successful
  requests meeting every SLO given (TPOT counted 0 when N_out <= 1), per second.
* Peak metrics: token chunks and running requests in 1-second buckets (vLLM's algorithm; the
  bucket counts chunks, not tokens).

Extensions, never under vLLM's names: `ttft_sched` / `e2el_sched` (anchored at t_sched: no
coordinated omission), `client_queue_time` (t_send − t_sched), `ttft_content` (first chunk
with content), `itl_per_token` (from continuous usage stats), client- and server-side prefix
cache hit rates against the workload's theoretical best, and goodput at the SLOs with AIPerf's
`good_request_fraction` (failures in the denominator).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

MS = 1000.0
DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0)
VLLM_METRICS = ("ttft", "tpot", "itl", "e2el")
EXTENSION_METRICS = ("ttft_sched", "e2el_sched", "client_queue_time", "ttft_content")


@dataclass(slots=True)
class Outcome:
    """What the client saw of one request. Times are `perf_counter` seconds."""

    index: int
    t_sched: float
    t_send: float = 0.0
    success: bool = False
    error: str = ""
    status: int = 0
    ttft_s: float = 0.0
    ttft_content_s: float | None = None
    latency_s: float = 0.0
    itl_s: list[float] = field(default_factory=list)
    num_chunks: int = 0  # messages with non-empty `choices` (TTFT's, then one per ITL gap)
    num_token_chunks: int = 0  # those carrying output: text, reasoning or tool calls
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    per_token_itl_s: list[float] | None = None
    text: str | None = None
    t_done: float = 0.0  # when the response was complete
    server_times_s: list[float] | None = None  # calibration: the server's "t" in each chunk


@dataclass(slots=True)
class RequestResult:
    """An outcome joined with what the workload said about the request."""

    outcome: Outcome
    request_id: str
    num_prompt_tokens: int  # the workload's (client-side) prompt length
    num_ideal_cached_tokens: int = 0
    expected_output_len: int = 0
    session_key: str | None = None

    @property
    def success(self) -> bool:
        return self.outcome.success

    @property
    def output_len(self) -> int:
        """N_out: server usage, else the number of chunks that carried output (a role-only,
        empty or finish-only chunk is no token; vLLM re-tokenizes the text instead)."""
        o = self.outcome
        if o.completion_tokens:
            return o.completion_tokens
        return o.num_token_chunks

    @property
    def input_len(self) -> int:
        """N_in as vLLM 0.32 counts it: server usage when reported, else the client's."""
        o = self.outcome
        return o.prompt_tokens if o.prompt_tokens is not None else self.num_prompt_tokens

    @property
    def tpot_s(self) -> float:
        """Per-request TPOT; 0 for N_out <= 1 (as vLLM's goodput counts it)."""
        n = self.output_len
        if n <= 1:
            return 0.0
        return (self.outcome.latency_s - self.outcome.ttft_s) / (n - 1)

    @property
    def mean_itl_s(self) -> float:
        itl = self.outcome.itl_s
        return sum(itl) / len(itl) if itl else 0.0

    @property
    def queue_s(self) -> float:
        return self.outcome.t_send - self.outcome.t_sched


def percentile_key(p: float) -> str:
    """vLLM's `p{P}` word: the integer when integral (`99`), else as printed (`99.9`)."""
    return str(int(p)) if int(p) == p else str(p)


def stats_ms(
    name: str, values_s: Sequence[float] | np.ndarray, percentiles: Sequence[float]
) -> dict[str, float]:
    """mean/median/std/pXX of `values_s` (seconds) in ms under vLLM's key names."""
    data = np.asarray(values_s, dtype=np.float64)
    if data.size == 0:
        data = np.zeros(1)
    out = {
        f"mean_{name}_ms": float(np.mean(data) * MS),
        f"median_{name}_ms": float(np.median(data) * MS),
        f"std_{name}_ms": float(np.std(data) * MS),
    }
    for p in percentiles:
        out[f"p{percentile_key(p)}_{name}_ms"] = float(np.percentile(data, p) * MS)
    return out


def meets_slo(result: RequestResult, slo: Mapping[str, float]) -> bool:
    """Every SLO given holds (`value <= bound`, bounds in ms). `itl_ms` bounds the request's
    mean chunk gap; `tpot_ms` its TPOT (0 when N_out <= 1)."""
    o = result.outcome
    for key, bound_ms in slo.items():
        if key == "ttft_ms":
            value = o.ttft_s
        elif key == "tpot_ms":
            value = result.tpot_s
        elif key == "itl_ms":
            value = result.mean_itl_s
        elif key == "e2el_ms":
            value = o.latency_s
        else:
            raise AssertionError(f"unknown SLO key {key!r}")
        if value * MS > bound_ms:
            return False
    return True


def peak_metrics(results: Iterable[RequestResult]) -> tuple[float, int]:
    """vLLM's `max_output_tokens_per_s` (token chunks in the busiest 1-s bucket) and
    `max_concurrent_requests` (the most requests running in any 1-s bucket)."""
    done = [r.outcome for r in results if r.success]
    if not done:
        return 0.0, 0
    start = min(o.t_send for o in done)
    end = max(o.t_send + o.latency_s for o in done)
    num_buckets = int(np.ceil(end - start)) + 1
    tokens = np.zeros(num_buckets)
    running = np.zeros(num_buckets)
    for o in done:
        t = o.t_send + o.ttft_s
        times = [t]
        for gap in o.itl_s:
            t += gap
            times.append(t)
        for moment in times:
            bucket = int(moment - start)
            if 0 <= bucket < num_buckets:
                tokens[bucket] += 1
        first = int(o.t_send - start)
        last = int(o.t_send + o.latency_s - start)
        for second in range(first, last + 1):
            running[second] += 1
    return float(np.max(tokens)), int(np.max(running))


def summarize(
    results: Sequence[RequestResult],
    duration_s: float,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    slo: Mapping[str, float] | None = None,
) -> dict[str, object]:
    """vLLM's result keys, then the extensions, for one run."""
    slo = dict(slo or {})
    done = [r for r in results if r.success]
    num_failed = len(results) - len(done)
    total_in = sum(r.input_len for r in done)
    total_out = sum(r.output_len for r in done)
    per_s = (lambda x: x / duration_s) if duration_s > 0 else (lambda x: 0.0)
    num_good = sum(1 for r in done if meets_slo(r, slo)) if slo else 0
    peak_tokens, peak_running = peak_metrics(done)
    out: dict[str, object] = {
        "duration": duration_s,
        "completed": len(done),
        "failed": num_failed,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_s(len(done)),
        "request_goodput": per_s(num_good) if slo else None,
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out),
        "max_output_tokens_per_s": peak_tokens,
        "max_concurrent_requests": peak_running,
    }
    itl = [gap for r in done for gap in r.outcome.itl_s]
    out.update(stats_ms("ttft", [r.outcome.ttft_s for r in done], percentiles))
    out.update(stats_ms("tpot", [r.tpot_s for r in done if r.output_len > 1], percentiles))
    out.update(stats_ms("itl", itl, percentiles))
    out.update(stats_ms("e2el", [r.outcome.latency_s for r in done], percentiles))
    out.update(_extensions(results, done, percentiles))
    out["good_request_fraction"] = num_good / len(results) if slo and results else None
    out["total_input_tokens_client"] = sum(r.num_prompt_tokens for r in done)
    server_in = [r.outcome.prompt_tokens for r in done if r.outcome.prompt_tokens is not None]
    out["total_input_tokens_server"] = sum(server_in) if server_in else None
    no_usage = sum(1 for r in done if not r.outcome.completion_tokens)
    out["output_tokens_source"] = "usage" if not no_usage else f"chunks ({no_usage} requests)"
    out.update(hit_rates(done))
    return out


def _extensions(
    results: Sequence[RequestResult], done: Sequence[RequestResult], percentiles: Sequence[float]
) -> dict[str, object]:
    out: dict[str, object] = {}
    queue = [r.queue_s for r in done]
    out.update(stats_ms("ttft_sched", [r.queue_s + r.outcome.ttft_s for r in done], percentiles))
    out.update(stats_ms("e2el_sched", [r.queue_s + r.outcome.latency_s for r in done], percentiles))
    out.update(stats_ms("client_queue_time", queue, percentiles))
    content = [r.outcome.ttft_content_s for r in done if r.outcome.ttft_content_s is not None]
    out.update(stats_ms("ttft_content", content, percentiles))
    # §8.2: flag the role-chunk artefact when TTFT and first-content differ by > 1 ms on average,
    # each request against itself (one with no content has no such gap).
    gaps = [
        r.outcome.ttft_content_s - r.outcome.ttft_s
        for r in done
        if r.outcome.ttft_content_s is not None
    ]
    out["ttft_role_chunk_artifact"] = bool(gaps) and float(np.mean(gaps)) * MS > 1.0
    # A stream of 3 chunks or more whose chunks all came in one read: a buffering proxy or
    # server; its TTFT is its E2EL and its ITL samples are 0 (the console says so).
    judged = [r.outcome.itl_s for r in done if len(r.outcome.itl_s) >= 2]
    out["num_streams_3plus_chunks"] = len(judged)
    out["num_streams_in_one_read"] = sum(1 for itl in judged if not any(itl))
    per_token = [g for r in done for g in (r.outcome.per_token_itl_s or ())]
    if per_token:
        out.update(stats_ms("itl_per_token", per_token, percentiles))
    return out


def hit_rates(done: Sequence[RequestResult]) -> dict[str, object]:
    """Client-side prefix-cache hit rate from `cached_tokens`, token-weighted, with its
    per-session distribution, against the workload's theoretical best over the same requests."""
    reported = [r for r in done if r.outcome.cached_tokens is not None]
    prompt_tokens = sum(r.input_len for r in reported)
    cached = sum(r.outcome.cached_tokens or 0 for r in reported)
    client = cached / prompt_tokens if reported and prompt_tokens else None
    ideal_whole = sum(r.num_prompt_tokens for r in done)
    ideal = sum(r.num_ideal_cached_tokens for r in done) / ideal_whole if ideal_whole else None
    sessions: dict[str, list[int]] = {}
    for r in reported:
        if r.session_key is not None:
            acc = sessions.setdefault(r.session_key, [0, 0])
            acc[0] += r.outcome.cached_tokens or 0
            acc[1] += r.input_len
    per_session = [c / p for c, p in sessions.values() if p]
    return {
        "prefix_cache_hit_rate_client": client,
        "prefix_cache_hit_rate_client_requests": len(reported),
        "theoretical_hit_rate": ideal,
        "hit_rate_efficiency_client": (client / ideal) if client is not None and ideal else None,
        "prefix_cache_hit_rate_per_session": _quantiles(per_session),
    }


def _quantiles(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    data = np.asarray(values)
    return {
        "sessions": float(data.size),
        "mean": float(np.mean(data)),
        "p10": float(np.percentile(data, 10)),
        "p50": float(np.percentile(data, 50)),
        "p90": float(np.percentile(data, 90)),
    }
