"""Section 4's table: workload | metric | target | alarm at | measured | source.

The rows are the seeds' (chat TTFT warm and cold, ITL, concurrent sessions held; utility e2e and
throughput; KV use steady and in bursts; prefix hit rate) for the plan's own workloads, plus the
degraded-mode row. Targets come from `plan.json` (the requirements' SLOs, traffic and the
planned hit rate), alarms from the rendered alerts where one exists (else the requirement's
alarm, saying no alert watches it), measured values from the bench runs and drills. A row with
nothing measured says why: a row without a measured number is a wish, and the summaries count
those rows (`tally`), the stack's failures (the runs sent enough requests, too many failed)
apart from the measurements still to take.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from inhouse.plan import analytic
from inhouse.report import measure
from inhouse.report.figures import Figure, Source
from inhouse.report.inputs import BenchRun, ReportInputs
from inhouse.report.load import at_peak
from inhouse.report.measure import Gap, Reading
from inhouse.report.rendered import Alert, alert_threshold, find_alert

SESSION_DROP_ALARM = 0.02  # the seeds' "drops > 2%"
THROUGHPUT_ALARM = 0.9  # the seeds' "< 900" of 1000 req/min
KV_BURST_TARGET = 0.95
METRIC = {"ttft": "p95 TTFT", "itl": "p95 ITL", "tpot": "p95 TPOT", "e2e": "p95 e2e"}
BENCH_KEY = {
    "ttft": "p95_ttft_ms",
    "itl": "p95_itl_ms",
    "tpot": "p95_tpot_ms",
    "e2e": "p95_e2el_ms",
}
# What measures a row the runs given did not: the command, as docs/report.md gives it.
KILL_REPLICA_HOW = (
    "the kill-replica drill measures it: `inhouse drill run kill-replica --stack "
    "PLAN_DIR/stack.yaml --out DRILLS`, then `inhouse report --drills DRILLS`"
)
# NOTE: "the kill-replica drill measures p95 TTFT only" is what tests/report/test_reference_run
# tells a row that no run of the documented sequence measures by.
NO_DRILL_MEASURES = (
    "no drill measures it: the kill-replica drill measures p95 TTFT only "
    "(`inhouse drill run kill-replica`)"
)


def cold_probe_how(workload: str, probed: bool) -> str:
    """How to measure a workload's cold-prefix TTFT: its probe, or a longer one."""
    if probed:
        return (
            f"the cold-prefix probe ({workload}-cold) served too few after its warm-up: run it "
            "longer, or with more sessions (COLD_SESSIONS)"
        )
    return (
        "the cold-prefix probe measures it: `inhouse bench --target GATEWAY ... $(python "
        f"scripts/plan_bench_args.py PLAN_DIR/plan.json {workload} --cold) --out "
        f"BENCH/{workload}-cold` (it sets `--label {workload}-cold`) alongside the {workload} "
        "run, then `inhouse report --bench` with its directory"
    )


ALERT = {
    "ttft": "InhouseTTFTP95OverSLO",
    "itl": "InhouseITLP95OverSLO",
    "e2e": "InhouseE2EP95OverSLO",
}


@dataclass(frozen=True, slots=True)
class Bound:
    """`< 800 ms`, `> 70%`: a figure and the side it must stay on ("<" means below)."""

    op: str
    figure: Figure | None
    note: str = ""


@dataclass(frozen=True, slots=True)
class SloRow:
    workload: str
    metric: str
    target: Bound
    alarm: Bound
    measured: Reading
    # A rate measured from n requests resolves the target to one request in n: a run at the
    # offered rate reads it within that much either way.
    tolerance: float = 0.0

    @property
    def verdict(self) -> bool | None:
        value, target = self.measured.figure, self.target.figure
        if value is None or target is None:
            return None
        if self.target.op == "<":
            return value.value < target.value
        return value.value >= target.value * (1.0 - self.tolerance)


@dataclass(frozen=True, slots=True)
class Tally:
    """Section 4's rows as the summaries count them. A row without a measured number is
    either `failed` (`Gap.FAILED`: the runs sent enough requests and too many of them failed,
    the stack's to fix; more of the bench would fail as well) or `unmeasured` (a measurement
    still to take: too few requests or no run, `Gap.MISSING`, or another reason the row
    names, e.g. a lighter load or no drill that measures it)."""

    measured: tuple[SloRow, ...]
    failed: tuple[SloRow, ...]
    unmeasured: tuple[SloRow, ...]
    missed: tuple[SloRow, ...]  # measured, outside its target
    unjudged: tuple[SloRow, ...]  # measured, no target to judge it by


def tally(rows: list[SloRow]) -> Tally:
    measured = tuple(r for r in rows if r.measured.figure is not None)
    without = [r for r in rows if r.measured.figure is None]
    return Tally(
        measured,
        tuple(r for r in without if r.measured.gap is Gap.FAILED),
        tuple(r for r in without if r.measured.gap is not Gap.FAILED),
        tuple(r for r in measured if r.verdict is False),
        tuple(r for r in measured if r.verdict is None),
    )


def row_names(rows: tuple[SloRow, ...]) -> str:
    """`chat p95 ITL; utility p95 e2e`: the rows as the summaries name them."""
    return "; ".join(f"{r.workload} {r.metric}" for r in rows)


def _at_peak_reading(
    inputs: ReportInputs,
    runs: list[BenchRun],
    read: Callable[..., Reading],
    *args: Any,
    **kwargs: Any,
) -> Reading:
    """`read(runs at peak, *args, **kwargs)`, or why no run counts."""
    kept, why = at_peak(inputs, runs)
    return Reading(None, why) if why else read(kept, *args, **kwargs)


def _client_note(reading: Reading, runs: list[BenchRun]) -> Reading:
    """`reading`, noting the runs behind its figure whose client was a bottleneck (result.json
    `client_bottleneck`): their latencies and rates include client delay, a miss may be the
    client's."""
    figure = reading.figure
    if figure is None:
        return reading
    names = [run.name for run in measure.client_bottlenecked(figure, runs)]
    if not names:
        return reading
    note = (
        f"the client was a bottleneck in {', '.join(names)}, whose figures include client "
        "delay: see the bench report"
    )
    note = f"{reading.note}; {note}" if reading.note else note
    return replace(reading, note=note)


def _pool_of(inputs: ReportInputs, workload: str) -> str | None:
    for pool in inputs.plan.get("pools") or []:
        if workload in (pool.get("serves") or []):
            return str(pool["name"])
    return None


def _alarm(inputs: ReportInputs, alerts: list[Alert], workload: str, metric: str) -> Bound:
    """The rendered alert on this workload's pool, else the requirement's alarm."""
    alert = find_alert(alerts, ALERT.get(metric, ""), _pool_of(inputs, workload), workload)
    figure = alert_threshold(alert, "ms")
    if figure is not None and alert is not None:
        return Bound(">", figure, alert.name)
    stated = inputs.plan.figure(
        "slo_check", "targets", workload, metric, "alarm_ms", kind="target", unit="ms"
    )
    return Bound(">", stated, "no rendered alert watches this")


def latency_rows(inputs: ReportInputs, alerts: list[Alert], workload: str) -> list[SloRow]:
    runs = inputs.runs_for(workload)
    targets = inputs.plan.get("slo_check", "targets", workload) or {}
    kind = inputs.plan.get("workloads", workload, "kind")
    rows = []
    for metric in targets:
        target = inputs.plan.figure(
            "slo_check", "targets", workload, metric, "target_ms", kind="target", unit="ms"
        )
        alarm = _alarm(inputs, alerts, workload, metric)
        if metric == "ttft" and kind == "agent":
            warm = _client_note(_at_peak_reading(inputs, runs, measure.ttft_warm), runs)
            rows.append(SloRow(workload, "p95 TTFT warm", Bound("<", target), alarm, warm))
            rows.append(_cold_row(inputs, workload))
            continue
        reading = _client_note(_at_peak_reading(inputs, runs, measure.worst_p95, metric), runs)
        rows.append(SloRow(workload, METRIC[metric], Bound("<", target), alarm, reading))
    return rows


def _cold_row(inputs: ReportInputs, workload: str) -> SloRow:
    runs = inputs.runs_for(workload, cold=None)
    path = ("commitments", workload, "ttft_cold")
    target = inputs.plan.figure(*path, "target_ms", kind="target", unit="ms")
    alarm = inputs.plan.figure(*path, "alarm_ms", kind="target", unit="ms")
    note = "" if target else "requirements state no slo.ttft_cold_p95_ms"
    return SloRow(
        workload,
        "p95 TTFT cold",
        Bound("<", target, note),
        Bound(">", alarm, "bench check: vLLM's TTFT histogram does not tell cold from warm"),
        _client_note(
            _with_how(
                _at_peak_reading(inputs, runs, measure.ttft_cold),
                cold_probe_how(workload, any(run.is_cold_probe for run in runs)),
            ),
            runs,
        ),
    )


def _with_how(reading: Reading, how: str) -> Reading:
    """`reading`, its why followed by what would measure the row, where the runs were missing
    or too few (not where they failed: that is the stack's to fix, not the bench's)."""
    if reading.figure is not None or reading.gap is not Gap.MISSING:
        return reading
    return replace(reading, how=how)


def traffic_rows(inputs: ReportInputs, workload: str) -> list[SloRow]:
    runs = inputs.runs_for(workload)
    w = ("workloads", workload, "traffic")
    if inputs.plan.get(*w, "peak_sessions") is not None:
        # The worst run at the planned peak (ten sessions without a failure say nothing of a
        # hundred: `report.load`).
        dropped = _at_peak_reading(inputs, runs, lambda kept: measure.sessions_held(kept)[1])
        drop = Figure(SESSION_DROP_ALARM, "pct", "target", Source("seeds' SLO table", "drops > 2%"))
        return [
            SloRow(
                workload,
                "concurrent sessions held: share with a failure",
                Bound("<", drop, "of the sessions, at section 1's planned peak"),
                Bound(">", drop),
                dropped,
            )
        ]
    peak = inputs.plan.figure(*w, "peak_per_s", kind="workload", unit="rate", scale=60.0)
    if peak is None:
        return []
    alarm = Figure(
        peak.value * THROUGHPUT_ALARM,
        "rate",
        "workload",
        Source(peak.source.file, f"{peak.source.path} x 60 x {THROUGHPUT_ALARM}"),
    )
    target = Figure(
        peak.value, "rate", "workload", Source(peak.source.file, f"{peak.source.path} x 60")
    )
    reading = _client_note(_at_peak_reading(inputs, runs, measure.completion_rate), runs)
    tolerance = 1.0 / reading.samples if reading.samples else 0.0
    return [
        SloRow(
            workload,
            "throughput (req/min)",
            Bound("≥", target, "offered at peak; one request in n is the resolution"),
            Bound("<", alarm),
            reading,
            tolerance,
        )
    ]


def cluster_rows(inputs: ReportInputs, alerts: list[Alert]) -> list[SloRow]:
    runs = [r for r in inputs.benches if not r.is_cold_probe]
    kv = {
        stat: _at_peak_reading(inputs, runs, measure.gauge, "kv_cache_usage_perc", stat)
        for stat in ("p50", "max")
    }
    planner = Source("plan/analytic.py", "MAX_KV_UTILIZATION (the planner's KV cap)")
    kv_alert = find_alert(alerts, "InhouseKVCacheFull")
    kv_alarm = Bound(">", alert_threshold(kv_alert), kv_alert.name if kv_alert else "no alert")
    rows = [
        SloRow(
            "cluster",
            "KV use, steady (p50)",
            # The planner's own cap, read where it sizes with it (one copy of the figure).
            Bound("<", Figure(analytic.MAX_KV_UTILIZATION, "pct", "target", planner)),
            kv_alarm,
            kv["p50"],
        ),
        SloRow(
            "cluster",
            "KV use, bursts (max)",
            Bound(
                "<",
                Figure(KV_BURST_TARGET, "pct", "target", Source("seeds' SLO table", "<95% burst")),
            ),
            kv_alarm,
            kv["max"],
        ),
    ]
    for workload in inputs.workload_names:
        if inputs.plan.get("workloads", workload, "kind") != "agent":
            continue
        target, note = _hit_rate_floor(inputs, workload)
        alert = find_alert(alerts, "InhousePrefixHitRateLow", _pool_of(inputs, workload))
        rows.append(
            SloRow(
                workload,
                "prefix-cache hit rate",
                Bound("≥", target, note),
                Bound("<", alert_threshold(alert), alert.name if alert else "no alert"),
                _at_peak_reading(
                    inputs, inputs.runs_for(workload), measure.prefix_hit_rate, inputs.benches
                ),
            )
        )
    return rows


def _hit_rate_floor(inputs: ReportInputs, workload: str) -> tuple[Figure | None, str]:
    """The hit rate below which the plan's first SLO breaks (its sensitivity run), else the
    planned rate itself."""
    planned = inputs.plan.figure(
        "workloads", workload, "planned_prefix_hit_rate", kind="workload", unit="pct"
    )
    for i, s in enumerate(inputs.plan.get("sensitivity") or []):
        size = s.get("breaks_at_size")
        if s.get("name") == "prefix_hit_halved" and planned is not None and size is not None:
            source = Source(
                inputs.plan.name,
                f"sensitivity[{i}].breaks_at_size x workloads.{workload}.planned_prefix_hit_rate",
            )
            floor = Figure(planned.value * float(size), "pct", "workload", source)
            return floor, "below it the plan's first SLO breaks"
    return planned, "the plan's assumption"


def degraded_rows(inputs: ReportInputs) -> list[SloRow]:
    """Each degraded-mode commitment (plan.json `degraded[].degraded_slo`): TTFT measured by
    the kill-replica drill, any other metric stated but not measured (the drill measures TTFT
    only; section 5 gives the planner's simulation)."""
    rows = []
    for index, d in enumerate(inputs.plan.get("degraded") or []):
        for workload, stated in (d.get("degraded_slo") or {}).items():
            for metric in METRIC:
                if not stated or metric not in stated:
                    continue
                path = ("degraded", index, "degraded_slo", workload, metric)
                if metric == "ttft":
                    reading, _ = measure.drill_check(
                        inputs.drills, "kill-replica", "degraded", "ttft"
                    )
                    drilled = inputs.drills is not None and inputs.drills.run("kill-replica")
                    if reading.figure is None and not drilled:
                        reading = replace(reading, samples=None, how=KILL_REPLICA_HOW)
                else:
                    reading = Reading(
                        None, f"{NO_DRILL_MEASURES}; section 5 gives the planner's simulation"
                    )
                rows.append(
                    SloRow(
                        workload,
                        f"{METRIC[metric]}, one {d['pool']} replica lost",
                        Bound(
                            "<", inputs.plan.figure(*path, "target_ms", kind="target", unit="ms")
                        ),
                        Bound(">", inputs.plan.figure(*path, "alarm_ms", kind="target", unit="ms")),
                        reading,
                    )
                )
    return rows


def slo_rows(inputs: ReportInputs, alerts: list[Alert]) -> list[SloRow]:
    rows: list[SloRow] = []
    for workload in inputs.workload_names:
        rows += latency_rows(inputs, alerts, workload)
        rows += traffic_rows(inputs, workload)
    rows += cluster_rows(inputs, alerts)
    rows += degraded_rows(inputs)
    return rows
