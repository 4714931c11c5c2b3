"""What each bench run drove, against its workload's planned peak (section 1).

The SLOs are stated at the peak (the seeds': p95 TTFT under 800 ms *at 100 concurrent
sessions*, p95 e2e under 2 s *at 1,000 requests a minute*): a run at a lighter load commits
nothing there. Agent runs are weighed by their sessions (`workload.params.sessions`), runs of a
rate workload by the rate they offered (`workload.rate` x `workload.rate_scale`). A run that
does not record its load (a `--concurrency` run, an older result.json) is not judged; cold
probes are light by design and always count.
"""

from __future__ import annotations

from dataclasses import dataclass

from inhouse.report.figures import Figure, Source
from inhouse.report.inputs import BenchRun, ReportInputs

LIGHTER = "a figure at a lighter load commits nothing at peak"
# `--rate` is written with 8 decimals (scripts/plan_bench_args.py): 16.66666667 is the planned
# 16.666666666666668 req/s, not a lighter load.
RATE_RESOLUTION = 1e-6


@dataclass(frozen=True, slots=True)
class RunLoad:
    driven: Figure
    peak: Figure
    sessions: bool  # agent sessions; else a rate in req/min

    @property
    def below_peak(self) -> bool:
        if self.sessions:
            return self.driven.value < self.peak.value
        return self.driven.value < self.peak.value * (1.0 - RATE_RESOLUTION)

    @property
    def shortfall(self) -> str:
        what = "fewer sessions" if self.sessions else "a lower rate"
        return f"the run drove {what} than the planned peak (section 1): {LIGHTER}"


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def run_load(inputs: ReportInputs, run: BenchRun) -> RunLoad | None:
    """The load `run` drove and its workload's peak, where both are known."""
    workload = run.workload(inputs.workload_names)
    if workload is None:
        return None
    traffic = ("workloads", workload, "traffic")
    result = run.result
    if inputs.plan.get(*traffic, "peak_sessions") is not None:
        peak = inputs.plan.figure(*traffic, "peak_sessions", kind="workload", unit="count")
        sessions = result.get("workload", "params", "sessions")
        if peak is None or sessions is None or not str(sessions).isdigit():
            return None
        source = Source(result.name, "workload.params.sessions")
        return RunLoad(Figure(float(str(sessions)), "count", "workload", source), peak, True)
    peak = inputs.plan.figure(*traffic, "peak_per_s", kind="workload", unit="rate", scale=60.0)
    rate = _number(result.get("workload", "rate"))
    scale = _number(result.get("workload", "rate_scale"))
    if peak is None or rate is None:
        return None
    source = Source(result.name, "workload.rate x workload.rate_scale x 60")
    driven = Figure(rate * (1.0 if scale is None else scale) * 60.0, "rate", "workload", source)
    return RunLoad(driven, peak, False)


def shortfall(inputs: ReportInputs, run: BenchRun) -> str | None:
    """Why `run` does not count at peak, or None where it does (or cannot be judged)."""
    if run.is_cold_probe:
        return None
    load = run_load(inputs, run)
    return load.shortfall if load is not None and load.below_peak else None


def at_peak(inputs: ReportInputs, runs: list[BenchRun]) -> tuple[list[BenchRun], str]:
    """The runs that drove the planned peak, and, when there were runs but none did, why none
    counts."""
    kept = [run for run in runs if shortfall(inputs, run) is None]
    if runs and not kept:
        return [], str(shortfall(inputs, runs[0]))
    return kept, ""
