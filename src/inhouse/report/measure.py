"""Measured figures: what the bench runs and the drills saw, each citing its file and path.

Run-level figures (throughput, gauges, hit rates) come straight from `result.json` (the worst
over several runs of a workload, so a commitment is never quoted from the luckiest run).
Latency p95s are computed here from `requests.jsonl`, as the planner's check computes its own:
over the requests scheduled after the run's warm-up (its first 20%, at most 30 s:
`plan.verify.warmup_for` on the run's `workload.duration_s`, else on its arrivals' span), so the
measured p95 set beside the simulated one counts the same requests. They cite the file with
the selection and statistic used:

* TTFT warm: p95 `ttft_ms` of successful requests with `cached_tokens > 0` (the prefix cache
  held part of the prompt); TTFT cold: those with `cached_tokens == 0`; a request whose server
  reported no `cached_tokens` is neither. Pooled over the runs. A p95 needs at least
  `MIN_SAMPLES` requests; fewer, and the row is reported as not measured, saying why: the
  stack's failure (`Gap.FAILED`) where the runs sent enough requests of the kind and too many
  failed, else too few sent (`Gap.MISSING`). One run that sent enough of the kind and too few
  of them succeeded leaves the p95 unknown (`Gap.FAILED`, naming it), as below, whatever the
  other runs gave: their successes would flatter it.
* ITL, TPOT, e2e: vLLM's definitions (pooled chunk gaps; `(e2el - ttft) / (N_out - 1)` per
  request; `e2el_ms`), the worst run's p95. A run that sent enough requests and too few of
  them succeeded leaves the worst run's p95 unknown (`Gap.FAILED`, naming it), whatever the
  other runs gave; one-token answers give no ITL or TPOT sample, and the reading says so.
* Sessions held: the run's concurrent sessions (`workload.params.sessions`) and the share of
  sessions with a failed request, over the whole run (a failure in the warm-up is one a user
  saw).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

import numpy as np

from inhouse.plan.verify import warmup_for
from inhouse.report.figures import Figure, Kind, Source, Unit
from inhouse.report.inputs import BenchRun, Drills, PathPart

MIN_SAMPLES = 20


class Gap(Enum):
    """What kind of reason a reading without a figure has, for what the report says next."""

    MISSING = "missing"  # no run, or too few requests sent: more of the bench would measure it
    # the runs' requests failed (all, or enough that too few succeeded for a figure though
    # enough were sent): the stack's to fix, not the bench's
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Reading:
    """A measured figure, or why there is none (`why`, of kind `gap` where it is one of
    `Gap`'s; None for any other, e.g. a lighter load or a server setting) and what would
    measure it (`how`), and how many samples it rests on."""

    figure: Figure | None
    why: str = ""
    samples: int | None = None
    how: str = ""
    note: str = ""  # what the reader must know of a figure that is there
    gap: Gap | None = None


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


NO_RUN = "no bench run of this workload"


def _none(runs: Sequence[BenchRun]) -> Reading:
    """Why the runs give no latency: none (missing), none that served a request (failed), or
    a file without it (no gap: some requests succeeded)."""
    if not runs:
        return Reading(None, NO_RUN, gap=Gap.MISSING)
    if not any(r.get("success") for run in runs for r in run.requests):
        # NOTE: no count here: the text stands as is in the public version, which prints no
        # exact measured figure.
        return Reading(
            None, "no request succeeded: every request of the runs failed", gap=Gap.FAILED
        )
    return Reading(None, "not in result.json")


def _too_few(what: str, *, failed: bool, where: str = "") -> Reading:
    """Too few successful requests `what` for a p95 (`where`: in which runs, when not all): the
    stack's (`failed`: the runs sent at least `MIN_SAMPLES` of them, too many failed), else the
    bench's (too few were sent)."""
    why = f"fewer than the {MIN_SAMPLES} successful requests {what} a p95 needs{where}"
    if failed:
        # NOTE: no count here, as in `_none`: the public version prints the reason as is.
        return Reading(
            None,
            f"{why}: enough were sent, too many of them failed (the stack's to fix, not the "
            "bench's: see the runs' errors)",
            gap=Gap.FAILED,
        )
    return Reading(None, why, gap=Gap.MISSING)


AFTER_WARMUP = "scheduled after the run's warm-up (its first 20%, at most 30 s)"
NO_CACHE_REPORT = (
    "the server reported no cached_tokens, so no request tells warm from cold (vLLM: "
    "--enable-prompt-tokens-details, which `inhouse render` sets)"
)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _sched(run: BenchRun) -> list[float]:
    """The rows' scheduled times (`t_sched_s`), where recorded."""
    return [t for r in run.requests if (t := _number(r.get("t_sched_s"))) is not None]


def run_warmup_s(run: BenchRun, sched: Sequence[float] | None = None) -> float:
    """The run's warm-up, as the planner's check takes its own: of the run's recorded length
    (`workload.duration_s`), else of its scheduled arrivals' span (`sched`, when the caller
    has it)."""
    duration = _number(run.result.get("workload", "duration_s"))
    if duration is None:
        sched = _sched(run) if sched is None else sched
        duration = max(sched) - min(sched) if sched else 0.0
    return warmup_for(duration)


def counted_rows(run: BenchRun) -> list[Mapping[str, Any]]:
    """The run's rows scheduled after its warm-up (`run_warmup_s`), as the planner's check
    counts them."""
    sched = _sched(run)
    if not sched:
        return list(run.requests)
    start = min(sched)
    warmup = run_warmup_s(run, sched)
    return [
        r for r in run.requests if (t := _number(r.get("t_sched_s"))) is None or t - start >= warmup
    ]


def _short(num_sent: int, num_done: int) -> Gap | None:
    """Why `num_done` successful requests of `num_sent` give no p95: None where they give one
    (at least `MIN_SAMPLES`); the stack's failure (`Gap.FAILED`) where at least that many were
    sent and at least half of them failed; else the bench's (`Gap.MISSING`): too few sent, or a
    run a failure or two short, which more of the bench would measure. NOTE: the share, not the
    count: one failure in 20 had read as the stack's failure and hidden the other runs' figure,
    while 80 in 100 (20 successes) gave a figure."""
    if num_done >= MIN_SAMPLES:
        return None
    failed_most = num_sent >= MIN_SAMPLES and num_sent - num_done >= num_done
    return Gap.FAILED if failed_most else Gap.MISSING


def _p95(runs: Sequence[BenchRun], keep: Callable[[float], bool], what: str) -> Reading:
    """The pooled p95 TTFT of the successful requests after the warm-up whose cached tokens
    (`_cached`) `keep` takes. A run that sent at least `MIN_SAMPLES` of them and had fewer
    successes (`_short`) leaves it unknown, as it does the worst run's p95 (`worst_p95`)."""
    values: list[float] = []
    files: list[str] = []
    num_sent = 0  # the requests of this kind after the warm-up, failed ones included
    failed: dict[str, int] = {}  # a run that sent enough of this kind, too few succeeded
    for run in runs:
        rows = counted_rows(run)
        picked = [float(r["ttft_ms"]) for r in rows if r.get("success") and keep(_cached(r))]
        sent = len(picked) + sum(1 for r in rows if not r.get("success") and keep(_meant_cached(r)))
        num_sent += sent
        if _short(sent, len(picked)) is Gap.FAILED:
            failed[run.name] = len(picked)
        if picked:
            values += picked
            files.append(run.requests_file)
    if len(values) < MIN_SAMPLES or failed:
        kind = f"with {what}, after the warm-up,"
        none = _none(runs)
        if none.gap is None and _no_cache_report(runs):
            none = Reading(None, NO_CACHE_REPORT)
        elif none.gap is None and failed:  # NOTE: as in `worst_p95`, one run's failure
            others = len(values) - sum(failed.values())
            return _failed_runs(
                failed, kind, "the p95 over the runs", others_measured=others >= MIN_SAMPLES
            )
        elif none.gap is None:  # requests succeeded, too few of them matched
            none = _too_few(kind, failed=_short(num_sent, len(values)) is Gap.FAILED)
        # The count rides in `samples` (the internal version prints it; the public one, which
        # prints no exact measured figure, does not).
        return replace(none, samples=len(values))
    value = float(np.percentile(np.asarray(values), 95))
    path = f"p95 of ttft_ms over successful rows where {what}, {AFTER_WARMUP}"
    source = Source(" + ".join(files), path)
    return Reading(Figure(value, "ms", "measured", source), samples=len(values))


def _no_cache_report(runs: Sequence[BenchRun]) -> bool:
    return all(r.get("cached_tokens") is None for run in runs for r in run.requests)


def ttft_warm(runs: Sequence[BenchRun]) -> Reading:
    return _p95(runs, lambda cached: cached > 0, "cached_tokens > 0")


def ttft_cold(runs: Sequence[BenchRun]) -> Reading:
    return _p95(runs, lambda cached: cached == 0, "cached_tokens == 0")


def _cached(row: Mapping[str, Any]) -> float:
    """The row's cached tokens; -1 where the server did not say (neither warm nor cold)."""
    value = _number(row.get("cached_tokens"))
    return -1.0 if value is None else value


def _meant_cached(row: Mapping[str, Any]) -> float:
    """The cached tokens a failed row would have had: the server's count where it gave one,
    else what an infinite cache would have held (`ideal_cached_tokens`); -1 where neither is
    known. NOTE: a failed request gets no usage back, so this is how a run that failed tells
    whether it sent enough warm or cold requests. None held means cold for certain (the cold
    probe's new prompts); some held, warm as planned (an eviction could have made it cold)."""
    cached = _cached(row)
    if cached >= 0:
        return cached
    ideal = _number(row.get("ideal_cached_tokens"))
    return -1.0 if ideal is None else ideal


# Per metric: the samples one successful row gives (vLLM's definitions), and how they are cited.
SAMPLES: dict[str, tuple[Callable[[Mapping[str, Any]], list[float]], str]] = {
    "ttft": (lambda r: [float(r["ttft_ms"])], "ttft_ms"),
    "itl": (lambda r: [float(g) for g in r.get("itl_ms") or []], "itl_ms gaps, pooled"),
    "tpot": (
        lambda r: (
            [(float(r["e2el_ms"]) - float(r["ttft_ms"])) / (int(r["output_len"]) - 1)]
            if int(r.get("output_len") or 0) > 1
            else []
        ),
        "(e2el_ms - ttft_ms) / (output_len - 1) where output_len > 1",
    ),
    "e2e": (lambda r: [float(r["e2el_ms"])], "e2el_ms"),
}


# Why a metric has no sample where requests succeeded (TTFT and e2e have one in each; NOTE:
# one-token answers have no gap after their first token), and what would measure it.
NO_SAMPLE = {
    "itl": "no successful request after the warm-up had a second token streamed (every itl_ms "
    "is empty): there is no inter-token gap to measure",
    "tpot": "no successful request after the warm-up had a second token (every output_len is "
    "1 or less): there is no inter-token gap to measure",
}
NO_SAMPLE_HOW = "answers longer than one token would measure it"


def worst_p95(runs: Sequence[BenchRun], metric: str) -> Reading:
    """The worst run's p95 of `metric` (a `SAMPLES` key) over its successful requests after
    the warm-up. A run with fewer than `MIN_SAMPLES` gives none; where it sent that many and too
    many failed, the worst run's p95 is unknown whatever the others gave (theirs would flatter
    it). Without a figure, `samples` is the successes of the run that fell short (the fewest)."""
    sample, what = SAMPLES[metric]
    best: Reading | None = None
    failed: dict[str, int] = {}  # a run that sent enough, too few succeeded: its successes
    short: list[int] = []  # the successes of each run that sent too few
    unsampled = False  # a run had enough successes, none with a sample of `metric`
    for run in runs:
        rows = counted_rows(run)
        done = [r for r in rows if r.get("success")]
        values = [v for r in done for v in sample(r)]
        gap = _short(len(rows), len(done))
        if gap is Gap.FAILED:
            failed[run.name] = len(done)
        elif gap is Gap.MISSING:
            short.append(len(done))
        elif not values:
            unsampled = True
        else:
            value = float(np.percentile(np.asarray(values), 95))
            path = f"p95 of {what} over successful rows {AFTER_WARMUP}"
            if best is None or best.figure is None or value > best.figure.value:
                figure = Figure(value, "ms", "measured", Source(run.requests_file, path))
                best = Reading(figure, samples=len(done))
    none = _none(runs)
    if none.gap is not None:  # no run, or no request of any succeeded
        return none
    if failed:
        return _failed_runs(
            failed, "after the warm-up", "the worst run's p95", others_measured=best is not None
        )
    if best is not None:
        return best
    if unsampled:
        return Reading(None, NO_SAMPLE[metric], how=NO_SAMPLE_HOW)
    return replace(_too_few("after the warm-up", failed=False), samples=min(short, default=None))


def _failed_runs(
    failed: Mapping[str, int], what: str, unknown: str, *, others_measured: bool
) -> Reading:
    """No p95 (`unknown`, what the row would quote) where the runs in `failed` (name: their
    successful requests `what`) sent enough requests and too many failed, whatever the other
    runs gave (`others_measured`: they alone would give a figure, which would flatter it)."""
    reading = _too_few(what, failed=True, where=f" in {', '.join(failed)}")
    rest = f"; {unknown} is not known, the other runs' would flatter it"
    why = reading.why + (rest if others_measured else "")
    return replace(reading, why=why, samples=min(failed.values()))


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
