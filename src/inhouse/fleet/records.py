"""Per-request records of a fleet run and their summary under vLLM bench's metric names.

Definitions follow `vllm bench serve` (shared/reference/bench-metrics.md §8): TTFT from arrival
to first token; TPOT `(e2el - ttft) / (n_out - 1)` per request with more than one output token;
ITL every gap between consecutive tokens, pooled over requests; E2EL from arrival to the last
token; mean, median, std (ddof 0) and percentiles by numpy's linear interpolation, in ms.
`duration` runs from the first arrival to the last completion.

Additions beside vLLM's keys: `prefix_cache_hit_rate` (cached prompt tokens over prompt tokens,
completed requests), `theoretical_hit_rate` (what an infinite cache would have hit, same
requests), `replica_load_max_over_mean` (time-averaged in-flight requests per replica — by
Little's law the sum of their latencies over the duration — max over mean, within a pool; the
worst pool overall), `num_preemptions`, `goodput` (req/s meeting every SLO given) and
`good_request_fraction` (failed requests count against it), and per-pool breakdowns with
per-replica figures.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from inhouse.errors import SpecError

PERCENTILES = (50, 90, 95, 99)
# SLO keys `--slo` accepts. `itl_ms` bounds a request's mean inter-token latency (its TPOT when
# every chunk carries one token, as here).
SLO_KEYS = ("ttft_ms", "tpot_ms", "itl_ms", "e2el_ms")


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What happened to one request. Times in seconds of virtual time; `error` set (and
    timings None) for a request no pool or engine accepted."""

    request_id: str
    pool: str | None
    replica: int | None
    route: str
    arrival_s: float
    first_token_s: float | None
    finish_s: float | None
    num_prompt_tokens: int
    num_output_tokens: int
    num_cached_tokens: int
    num_ideal_cached_tokens: int
    num_preemptions: int = 0
    session_key: str | None = None
    error: str | None = None
    token_runs: tuple[int, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None and self.finish_s is not None

    @property
    def ttft_s(self) -> float:
        assert self.first_token_s is not None, "a failed request has no TTFT"
        return self.first_token_s - self.arrival_s

    @property
    def e2el_s(self) -> float:
        assert self.finish_s is not None, "a failed request has no E2EL"
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> float:
        if self.num_output_tokens <= 1:
            return 0.0
        assert self.finish_s is not None and self.first_token_s is not None
        return (self.finish_s - self.first_token_s) / (self.num_output_tokens - 1)


@dataclass(slots=True)
class FleetResult:
    """Records of one simulated run, plus what summarizing them needs."""

    records: list[RequestRecord]
    policies: dict[str, str]  # pool -> policy name
    replicas: dict[str, int]  # pool -> number of replicas
    down: dict[str, int]  # pool -> replicas down
    timelines: dict[tuple[str, int], array[float]] = field(default_factory=dict)  # step ends
    busy_s: dict[tuple[str, int], float] = field(default_factory=dict)
    num_engine_steps: int = 0
    num_engine_calls: int = 0
    end_s: float = 0.0

    @property
    def completed(self) -> list[RequestRecord]:
        return [r for r in self.records if r.ok]

    def itl_s(self, records: Sequence[RequestRecord]) -> np.ndarray:
        """Every inter-token gap of these requests, pooled (seconds)."""
        chunks: list[np.ndarray] = []
        arrays: dict[tuple[str, int], np.ndarray] = {}
        for record in records:
            runs = record.token_runs
            if record.pool is None or record.replica is None or len(runs) < 2:
                continue
            key = (record.pool, record.replica)
            timeline = arrays.get(key)
            if timeline is None:
                timeline = np.frombuffer(self.timelines[key], dtype=np.float64)
                arrays[key] = timeline
            if len(runs) == 2:
                chunks.append(np.diff(timeline[runs[0] : runs[1]]))
            else:
                steps = np.concatenate(
                    [np.arange(runs[i], runs[i + 1]) for i in range(0, len(runs), 2)]
                )
                chunks.append(np.diff(timeline[steps]))
        return np.concatenate(chunks) if chunks else np.zeros(0)

    def summary(self, slo: Mapping[str, float] | None = None) -> dict[str, object]:
        """vLLM bench keys plus the fleet's own, overall and per pool (`pools`)."""
        slo = check_slo(slo)
        out = self._metrics(self.records, slo)
        pools: dict[str, object] = {}
        ratios = []
        for pool, num in self.replicas.items():
            records = [r for r in self.records if r.pool == pool]
            metrics = self._metrics(records, slo)
            figures = self._replica_figures(pool, num, records)
            ratio = _max_over_mean([fig["load"] for fig in figures])
            metrics["policy"] = self.policies[pool]
            metrics["replicas"] = figures
            metrics["replica_load_max_over_mean"] = ratio
            if ratio is not None:
                ratios.append(ratio)
            pools[pool] = metrics
        out["replica_load_max_over_mean"] = max(ratios) if ratios else None
        out["pools"] = pools
        return out

    def _duration_s(self, records: Sequence[RequestRecord]) -> float:
        done = [r.finish_s for r in records if r.finish_s is not None]
        if not done:
            return 0.0
        return max(done) - min(r.arrival_s for r in records)

    def _metrics(
        self, records: Sequence[RequestRecord], slo: Mapping[str, float]
    ) -> dict[str, object]:
        done = [r for r in records if r.ok]
        duration = self._duration_s(self.records)
        prompt = sum(r.num_prompt_tokens for r in done)
        output = sum(r.num_output_tokens for r in done)
        out: dict[str, object] = {
            "duration": duration,
            "completed": len(done),
            "failed": len(records) - len(done),
            "total_input_tokens": prompt,
            "total_output_tokens": output,
            "request_throughput": len(done) / duration if duration else 0.0,
            "output_throughput": output / duration if duration else 0.0,
            "total_token_throughput": (prompt + output) / duration if duration else 0.0,
        }
        ms = 1000.0
        out.update(_stats("ttft", [ms * r.ttft_s for r in done]))
        out.update(_stats("tpot", [ms * r.tpot_s for r in done if r.num_output_tokens > 1]))
        out.update(_stats("itl", ms * self.itl_s(done)))
        out.update(_stats("e2el", [ms * r.e2el_s for r in done]))
        out["prefix_cache_hit_rate"] = _ratio(sum(r.num_cached_tokens for r in done), prompt)
        out["theoretical_hit_rate"] = _ratio(sum(r.num_ideal_cached_tokens for r in done), prompt)
        out["num_preemptions"] = sum(r.num_preemptions for r in done)
        good = sum(1 for r in done if _meets(r, slo))
        out["goodput"] = good / duration if duration and slo else None
        out["good_request_fraction"] = good / len(records) if records and slo else None
        return out

    def _replica_figures(
        self, pool: str, num: int, records: Sequence[RequestRecord]
    ) -> list[dict[str, float]]:
        duration = self._duration_s(self.records)
        down = self.down.get(pool, 0)
        figures = []
        for index in range(num - down):
            mine = [r for r in records if r.replica == index and r.ok]
            prompt = sum(r.num_prompt_tokens for r in mine)
            figures.append(
                {
                    "replica": index,
                    "requests": len(mine),
                    "load": sum(r.e2el_s for r in mine) / duration if duration else 0.0,
                    "prefix_cache_hit_rate": _ratio(sum(r.num_cached_tokens for r in mine), prompt),
                    "busy_s": self.busy_s.get((pool, index), 0.0),
                }
            )
        return figures


def check_slo(slo: Mapping[str, float] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in (slo or {}).items():
        if key not in SLO_KEYS:
            raise SpecError(f"SLO {key!r} is unknown; use {', '.join(SLO_KEYS)} (in ms)")
        if not value > 0:
            raise SpecError(f"SLO {key}={value} must be a positive number of milliseconds")
        out[key] = float(value)
    return out


def _meets(record: RequestRecord, slo: Mapping[str, float]) -> bool:
    ms = 1000.0
    limits = {
        "ttft_ms": ms * record.ttft_s,
        "tpot_ms": ms * record.tpot_s,
        "itl_ms": ms * record.tpot_s,
        "e2el_ms": ms * record.e2el_s,
    }
    return all(limits[key] <= bound for key, bound in slo.items())


def _stats(metric: str, values: Sequence[float] | np.ndarray) -> dict[str, float]:
    data = np.asarray(values, dtype=np.float64)
    if data.size == 0:
        data = np.zeros(1)
    out = {
        f"mean_{metric}_ms": float(np.mean(data)),
        f"median_{metric}_ms": float(np.median(data)),
        f"std_{metric}_ms": float(np.std(data)),
    }
    for p, value in zip(PERCENTILES, np.percentile(data, PERCENTILES), strict=True):
        out[f"p{p}_{metric}_ms"] = float(value)
    return out


def _ratio(part: float, whole: float) -> float:
    return part / whole if whole else 0.0


def _max_over_mean(loads: Sequence[float]) -> float | None:
    if not loads:
        return None
    mean = sum(loads) / len(loads)
    return max(loads) / mean if mean > 0 else None
