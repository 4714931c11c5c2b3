"""Measured figures: what the bench runs and the drills saw, each citing its file and path.

Run-level figures (throughput, gauges, hit rates) come straight from `result.json` (the worst
over several runs of a workload, so a commitment is never quoted from the luckiest run).
Latency p95s are computed from `requests.jsonl` in `latency.py`, over the requests scheduled
after the run's warm-up, as the planner's check computes its own. Computed here:

* Sessions held: the run's concurrent sessions (`workload.params.sessions`) and the share of
  sessions with a failed request, over the whole run (a failure in the warm-up is one a user
  saw).

`Reading` and `Gap` (`reading.py`) and the latency p95s are re-exported here, where the
report's other modules and the tests import them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from inhouse.report.figures import Figure, Kind, Source, Unit
from inhouse.report.inputs import BenchRun, Drills, PathPart
from inhouse.report.latency import (
    AFTER_WARMUP,
    NO_CACHE_REPORT,
    NO_SAMPLE,
    NO_SAMPLE_HOW,
    SAMPLES,
    counted_rows,
    run_warmup_s,
    ttft_cold,
    ttft_warm,
    worst_p95,
)
from inhouse.report.reading import MIN_SAMPLES, NO_RUN, Gap, Reading, _none, _number

__all__ = [
    "AFTER_WARMUP",
    "MIN_SAMPLES",
    "NO_CACHE_REPORT",
    "NO_RUN",
    "NO_SAMPLE",
    "NO_SAMPLE_HOW",
    "SAMPLES",
    "Gap",
    "Reading",
    "cited_runs",
    "client_bottlenecked",
    "completion_rate",
    "counted_rows",
    "counters_window",
    "drill_check",
    "gauge",
    "parse_observed",
    "prefix_hit_rate",
    "run_warmup_s",
    "sessions_held",
    "shared_counters",
    "ttft_cold",
    "ttft_warm",
    "worst",
    "worst_p95",
]


def worst(
    runs: Sequence[BenchRun],
    *parts: PathPart,
    unit: Unit,
    higher_is_worse: bool = True,
    scale: float = 1.0,
) -> Reading:
    """The worst value of one result.json key over the runs."""
    figures = [
        f
        for run in runs
        if (f := run.result.figure(*parts, kind="measured", unit=unit, scale=scale)) is not None
    ]
    if not figures:
        return _none(runs)
    pick = max if higher_is_worse else min
    return Reading(pick(figures, key=lambda f: f.value))


def sessions_held(runs: Sequence[BenchRun]) -> tuple[Reading, Reading]:
    """Concurrent sessions a run drove, and the share of its sessions that saw a failure: the
    worst run's (the highest share), so the row is never quoted from the luckiest run."""
    worst_pair: tuple[Reading, Reading] | None = None
    empty = False
    for run in runs:
        held = run.result.figure("workload", "params", "sessions", kind="measured", unit="count")
        if held is None:
            sessions = run.result.get("workload", "params", "sessions")
            if sessions is None:
                continue
            held = Figure(
                float(sessions),
                "count",
                "measured",
                Source(run.result.name, "workload.params.sessions (text)"),
            )
        seen: dict[str, bool] = {}
        for row in run.requests:
            key = str(row.get("session"))
            seen[key] = seen.get(key, False) or not row.get("success", False)
        if not seen:
            empty = True
            continue
        failed = sum(seen.values()) / len(seen)
        source = Source(run.requests_file, "share of sessions with a failed request")
        pair = (
            Reading(held),
            Reading(Figure(failed, "pct", "measured", source), samples=len(seen)),
        )
        shown = worst_pair[1].figure if worst_pair else None
        if shown is None or failed > shown.value:
            worst_pair = pair
    if worst_pair is not None:
        return worst_pair
    if not runs:
        return Reading(None, NO_RUN, gap=Gap.MISSING), Reading(None, NO_RUN, gap=Gap.MISSING)
    why = "requests.jsonl is empty" if empty else "runs name no session count"
    return Reading(None, why), Reading(None, why)


def completion_rate(runs: Sequence[BenchRun]) -> Reading:
    """Requests per minute served: successful requests over the span their arrivals were
    scheduled in (`t_sched_s`), the lowest over the runs. At the planned peak a stack that
    serves everything reads the offered rate; failures lower it. (Falling behind without
    failing shows in the latency rows, not here.)"""
    best: Reading | None = None
    for run in runs:
        sched = sorted(
            float(r["t_sched_s"]) for r in run.requests if r.get("t_sched_s") is not None
        )
        ok = sum(1 for r in run.requests if r.get("success"))
        if len(sched) < MIN_SAMPLES or sched[-1] <= sched[0]:
            continue
        # n successes span n - 1 gaps; none served is a rate of 0, not of -1 request.
        rate = max(ok - 1, 0) / (sched[-1] - sched[0]) * 60.0
        source = Source(
            run.requests_file,
            "(successful - 1) / (last - first t_sched_s) x 60",
        )
        reading = Reading(Figure(rate, "rate", "measured", source), samples=len(sched))
        if best is None or best.figure is None or rate < best.figure.value:
            best = reading
    if best is None:
        return Reading(None, NO_RUN if not runs else "too few requests", gap=Gap.MISSING)
    return best


def gauge(runs: Sequence[BenchRun], name: str, stat: str) -> Reading:
    reading = worst(runs, "server_gauges", name, stat, unit="pct")
    if reading.figure is None and runs:
        return Reading(None, "no engine gauges sampled (bench --metrics-url ENGINE/metrics)")
    return reading


def cited_runs(figure: Figure, runs: Sequence[BenchRun]) -> list[BenchRun]:
    """The runs whose result.json or requests.jsonl `figure` cites (a pooled figure cites
    each run's file, joined by " + ")."""
    files = set(figure.source.file.split(" + "))
    return [run for run in runs if run.requests_file in files or run.result.name in files]


def client_bottlenecked(figure: Figure, runs: Sequence[BenchRun]) -> list[BenchRun]:
    """The runs behind `figure` (`cited_runs`) whose client was a bottleneck (result.json
    `client_bottleneck`): their latencies and rates include client delay."""
    return [run for run in cited_runs(figure, runs) if run.result.get("client_bottleneck") is True]


def counters_window(run: BenchRun) -> tuple[float, float] | None:
    """When the run read the engines' counters (Unix seconds), where result.json says."""
    window = run.result.get("run", "counters_window_unix_s")
    if not isinstance(window, list) or len(window) != 2:
        return None
    start, end = (_number(t) for t in window)
    return None if start is None or end is None else (start, end)


def shared_counters(run: BenchRun, others: Sequence[BenchRun]) -> str:
    """Why the engines' counters over `run` may hold other traffic than its own, or "" when
    they hold only its own as far as the runs given tell: another run's window overlaps
    its own (the cold probe runs alongside its workload's run, on the same engines), or a
    window is not recorded, so an overlap cannot be ruled out."""
    others = [o for o in others if o is not run]
    if not others:
        return ""
    mine = counters_window(run)
    if mine is None:
        return (
            "its result.json records no counters window (run.counters_window_unix_s), so "
            "another run's traffic on the engines cannot be ruled out"
        )
    windows = [(o.name, counters_window(o)) for o in others]
    overlapping = [n for n, w in windows if w is not None and w[0] < mine[1] and mine[0] < w[1]]
    if overlapping:
        return (
            "the engines' counters over this run also counted the requests of "
            f"{', '.join(overlapping)}, which ran at the same time"
        )
    unknown = [n for n, w in windows if w is None]
    if unknown:
        return (
            f"{', '.join(unknown)} records no counters window (run.counters_window_unix_s), "
            "so its traffic on the engines cannot be ruled out"
        )
    return ""


def prefix_hit_rate(runs: Sequence[BenchRun], every_run: Sequence[BenchRun] = ()) -> Reading:
    """Server-side (the engines' counters) where scraped and the run's own, else what clients
    were told (`cached_tokens`), saying why the counters were set aside; the lowest over the
    runs. `every_run`: all the runs given, whose windows may overlap these."""
    readings = []
    set_aside = ""
    for run in runs:
        shared = shared_counters(run, every_run)
        server = worst([run], "prefix_cache_hit_rate_server", unit="pct", higher_is_worse=False)
        if server.figure is not None and not shared:
            readings.append(server)
            continue
        client = worst([run], "prefix_cache_hit_rate_client", unit="pct", higher_is_worse=False)
        if client.figure is None:
            if server.figure is not None:
                set_aside = f"{shared}, and its clients were told no cached_tokens"
            continue
        note = f"the clients' count: {shared}" if server.figure is not None else ""
        readings.append(Reading(client.figure, note=note))
    if not readings and set_aside:
        return Reading(None, set_aside)
    if not readings:
        return worst(runs, "prefix_cache_hit_rate_client", unit="pct", higher_is_worse=False)
    return min(readings, key=lambda r: r.figure.value if r.figure else 0.0)


_NUMBER = re.compile(r"(-?\d[\d,]*\.?\d*)\s*(ms|s\b|%)?")


def parse_observed(observed: Any) -> tuple[float, str] | None:
    """A drill check's `observed` as (value, unit): a number is taken as is; text is searched
    for its first number with a unit (`1,234 ms`, `1.2 s`, `97%`)."""
    if isinstance(observed, bool):
        return None
    if isinstance(observed, int | float):
        return float(observed), ""
    if isinstance(observed, Mapping):
        for key in ("p95_ttft_ms", "value", "observed"):
            if key in observed:
                return parse_observed(observed[key])
        return None
    match = _NUMBER.search(str(observed))
    if match is None:
        return None
    value = float(match.group(1).replace(",", ""))
    unit = match.group(2) or ""
    if unit == "s":
        return value * 1000.0, "ms"
    return value, unit


def drill_check(
    drills: Drills | None, drill: str, *words: str, kind: Kind = "measured"
) -> tuple[Reading, Mapping[str, Any] | None]:
    """The first check of `drill` whose name holds every word (case-insensitive), as a figure
    in ms (or as given), with the check itself."""
    if drills is None:
        return Reading(None, "no drill evidence given (`inhouse report --drills DIR`)"), None
    run = drills.run(drill)
    if run is None:
        return Reading(None, f"drill {drill} not in {drills.directory}"), None
    for index, check in enumerate(run.evidence.get("checks") or []):
        name = str(check.get("name", "")).lower()
        if all(word.lower() in name for word in words):
            parsed = parse_observed(check.get("observed"))
            if parsed is None:
                return Reading(None, f"check {check.get('name')!r} has no number"), check
            value, unit = parsed
            source = Source(run.evidence.name, f"checks[{index}].observed")
            fig_unit: Unit = "ms" if unit in ("ms", "") else "pct"
            if unit == "%":
                value /= 100.0
            return Reading(Figure(value, fig_unit, kind, source)), check
    return Reading(None, f"drill {drill} has no check naming {' '.join(words)}"), None
