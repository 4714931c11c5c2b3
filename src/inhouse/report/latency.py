"""Latency p95s, computed from `requests.jsonl` as the planner's check computes its own: over the
requests scheduled after the run's warm-up (its first 20%, at most 30 s:
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

`measure.py` re-exports the names the report's other modules use.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from inhouse.plan.verify import warmup_for
from inhouse.report.figures import Figure, Source
from inhouse.report.inputs import BenchRun
from inhouse.report.reading import MIN_SAMPLES, Gap, Reading, _none, _number


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
