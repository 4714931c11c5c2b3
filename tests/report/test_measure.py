"""Measured figures when a run went wrong: every request failed, or the run drove less than the
planned load. The document must say so, never print a figure that cannot be."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inhouse.report import measure, slo
from inhouse.report.document import build_document
from inhouse.report.inputs import ReportInputs
from inhouse.report.measure import MIN_SAMPLES, Gap, Reading, counted_rows
from inhouse.report.rendered import read_alerts
from inhouse.report.slo import SloRow, slo_rows

from .conftest import make_inputs
from .report_fixtures import rewrite_run, utility_rows, write_bench


def _rows(inputs: ReportInputs) -> dict[str, SloRow]:
    return {f"{r.workload} {r.metric}": r for r in slo_rows(inputs, read_alerts(inputs.render))}


def _all_failed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, "success": False, "ttft_ms": None, "error": "HTTP 503"} for r in rows]


def test_a_run_where_every_request_failed_serves_nothing(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """(successful - 1) / span read -3 req/min with no success; and the latency row said the
    figure was "not in result.json", as if the file were short, not the run."""
    rows = _all_failed(utility_rows(np.random.default_rng(0), 300, 1000 / 60.0))
    run = tmp_path / "utility"
    write_bench(run, "utility", utility_rows(np.random.default_rng(0), 2, 1.0))  # then spoilt
    result = json.loads((run / "result.json").read_text())
    result.update(
        num_prompts=len(rows),
        completed=0,
        failed=len(rows),
        p95_e2el_ms=None,
        workload={"name": "utility", "params": {}},
    )
    (run / "result.json").write_text(json.dumps(result))
    (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    inputs = make_inputs({**report_dirs, "failed": run}, benches=("chat", "failed"))
    got = _rows(inputs)
    throughput = got["utility throughput (req/min)"]
    assert throughput.measured.figure is not None
    assert throughput.measured.figure.value == 0.0 and throughput.verdict is False
    e2e = got["utility p95 e2e"]
    assert e2e.measured.figure is None
    assert e2e.measured.why == "no request succeeded: every request of the runs failed"


def test_a_ttft_row_with_no_success_says_so(report_dirs: dict[str, Path], tmp_path: Path) -> None:
    chat = report_dirs["chat"]
    rows = _all_failed([json.loads(x) for x in (chat / "requests.jsonl").read_text().splitlines()])
    run = rewrite_run(tmp_path / "chat", json.loads((chat / "result.json").read_text()), rows)
    got = _rows(make_inputs({**report_dirs, "failed": run}, benches=("failed",)))
    why = "no request succeeded: every request of the runs failed"
    assert got["chat p95 TTFT warm"].measured.why == why
    assert got["chat p95 TTFT cold"].measured.why == why


def _lighter(source: Path, out: Path, workload: dict[str, Any]) -> Path:
    """The same run, but recorded as driven at a lighter load than the plan's peak."""
    out.mkdir()
    result = json.loads((source / "result.json").read_text())
    result["workload"] = workload
    (out / "result.json").write_text(json.dumps(result))
    (out / "requests.jsonl").write_text((source / "requests.jsonl").read_text())
    return out


def test_latency_at_a_lighter_load_commits_nothing_at_peak(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """The seeds' SLO is p95 TTFT < 800 ms *at 100 concurrent sessions*: ten sessions meeting
    it say nothing of a hundred. The TTFT, ITL, hit-rate and KV rows read "ok" from such a run
    while the sessions row (the only one that looked) said it drove too few."""
    chat = _lighter(
        report_dirs["chat"], tmp_path / "chat", {"name": "agent", "params": {"sessions": "10"}}
    )
    utility = _lighter(
        report_dirs["utility"],
        tmp_path / "utility",
        {"name": "utility", "params": {}, "rate": 1.5, "rate_scale": 1.0},
    )
    dirs = {**report_dirs, "light-chat": chat, "light-utility": utility}
    got = _rows(make_inputs(dirs, benches=("light-chat", "light-utility")))
    for name in (
        "chat p95 TTFT warm",
        "chat p95 ITL",
        "chat prefix-cache hit rate",
        "cluster KV use, steady (p50)",
        "cluster KV use, bursts (max)",
    ):
        row = got[name]
        assert row.measured.figure is None and row.verdict is None, name
        assert row.measured.why == (
            "the run drove fewer sessions than the planned peak (section 1): "
            "a figure at a lighter load commits nothing at peak"
        ), name
    text = build_document(make_inputs(dirs, benches=("light-chat", "light-utility"))).markdown
    section1 = text.split("## 1. ")[1].split("\n## ")[0]
    assert section1.count("not measured (the run drove") == 2  # chat's and utility's hit rate
    for name in ("utility p95 e2e", "utility throughput (req/min)"):
        assert got[name].measured.figure is None, name
        assert got[name].measured.why.startswith("the run drove a lower rate than the planned")


def test_a_run_at_the_planned_load_still_counts(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    utility = _lighter(
        report_dirs["utility"],
        tmp_path / "utility",
        {"name": "utility", "params": {}, "rate": 16.66666667, "rate_scale": 1.0},
    )
    got = _rows(make_inputs({**report_dirs, "utility": utility}))
    assert got["utility p95 e2e"].measured.figure is not None
    assert got["chat p95 TTFT warm"].measured.figure is not None


def test_the_chart_keeps_a_row_measured_at_zero(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """A throughput of 0 (every request failed) and 0% of sessions failed were dropped from the
    SLO chart: the one missed row vanished and the chart showed only green."""
    from inhouse.report.charts import NOTHING_SERVED_RATIO, bars

    rows = _all_failed(utility_rows(np.random.default_rng(0), 300, 1000 / 60.0))
    run = tmp_path / "utility"
    write_bench(run, "utility", utility_rows(np.random.default_rng(0), 2, 1.0))  # then spoilt
    result = json.loads((run / "result.json").read_text())
    result.update(num_prompts=len(rows), completed=0, failed=len(rows), p95_e2el_ms=None)
    result["workload"] = {"name": "utility", "params": {}}
    (run / "result.json").write_text(json.dumps(result))
    (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    inputs = make_inputs({**report_dirs, "failed": run}, benches=("chat", "failed"))
    drawn = {name: (ratio, ok) for name, ratio, ok in bars(slo_rows(inputs, []))}
    assert drawn["utility throughput (req/min)"] == (NOTHING_SERVED_RATIO, False)


def test_sessions_held_is_the_worst_run_s(report_dirs: dict[str, Path], tmp_path: Path) -> None:
    """Two runs at the planned peak: the first clean, the second with a failure in every
    session. The row quoted the first (0%, ok): a commitment from the luckiest run."""
    chat = report_dirs["chat"]
    rows = [json.loads(x) for x in (chat / "requests.jsonl").read_text().splitlines()]
    result = json.loads((chat / "result.json").read_text())
    clean = rewrite_run(
        tmp_path / "a-clean",
        result,
        [{**r, "success": True, "ttft_ms": r["ttft_ms"] or 1.0} for r in rows],
    )
    failed = [
        {**r, "success": False, "ttft_ms": None} if i % 4 == 0 else r for i, r in enumerate(rows)
    ]
    bad = rewrite_run(tmp_path / "b-bad", result, failed)
    inputs = make_inputs({**report_dirs, "clean": clean, "bad": bad}, benches=("clean", "bad"))
    held = _rows(inputs)["chat concurrent sessions held: share with a failure"]
    assert held.measured.figure is not None
    assert held.measured.figure.source.file.endswith("b-bad/requests.jsonl")
    assert held.verdict is False


def test_the_steady_kv_target_is_the_planner_s_cap(
    inputs: ReportInputs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row's 90% was a second copy of the planner's cap (plan/analytic.py): a planner that
    sized to another cap would have been held to a stale target."""
    from inhouse.plan import analytic

    monkeypatch.setattr(analytic, "MAX_KV_UTILIZATION", 0.8)
    row = _rows(inputs)["cluster KV use, steady (p50)"]
    assert row.target.figure is not None and row.target.figure.value == 0.8


def _chat_with_a_slow_warm_up(report_dirs: dict[str, Path], out: Path) -> Path:
    """The fixture's chat run (400 requests scheduled 0.1 s apart, 40 s asked for), its first
    8 s (the planner's warm-up: 20% of 40 s) slow as empty caches and ramping sessions are."""
    chat = report_dirs["chat"]
    rows = [json.loads(x) for x in (chat / "requests.jsonl").read_text().splitlines()]
    slow = {"ttft_ms": 5000.0, "e2el_ms": 60000.0, "itl_ms": [500.0, 400.0]}
    rows = [{**r, **slow} if r["t_sched_s"] < 8.0 else r for r in rows]
    result = json.loads((chat / "result.json").read_text())
    result["workload"] = {"name": "agent", "params": {"sessions": "100"}, "duration_s": 40.0}
    return rewrite_run(out, result, rows)


def test_latency_rows_leave_the_warm_up_out_as_the_planner_does(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """The planner's check and `bench --plan` leave a run's first 20% (at most 30 s) out; the
    report's p95s counted the warm-up's requests, so the measured p95 set beside the planner's
    was not measured the same way."""
    from inhouse.plan.verify import MAX_WARMUP_S, WARMUP_FRACTION

    run = _chat_with_a_slow_warm_up(report_dirs, tmp_path / "chat")
    got = _rows(make_inputs({**report_dirs, "slow": run}, benches=("slow",)))
    rows = [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines()]
    warmup = min(MAX_WARMUP_S, WARMUP_FRACTION * 40.0)
    kept = [r for r in rows if r["success"] and r["t_sched_s"] >= warmup]
    warm = got["chat p95 TTFT warm"].measured.figure
    assert warm is not None
    assert warm.value == np.percentile([r["ttft_ms"] for r in kept if r["cached_tokens"] > 0], 95)
    assert "after the run's warm-up" in warm.source.path
    itl = got["chat p95 ITL"].measured.figure
    assert itl is not None
    assert itl.value == np.percentile([g for r in kept for g in r["itl_ms"]], 95)
    assert itl.source.file.endswith("requests.jsonl")
    assert "after the run's warm-up" in itl.source.path


def test_without_a_recorded_duration_the_warm_up_is_a_share_of_the_arrivals(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """An older result.json records no `workload.duration_s`: the run's scheduled arrivals'
    span stands for it."""
    from inhouse.plan.verify import MAX_WARMUP_S, WARMUP_FRACTION

    utility = report_dirs["utility"]
    rows = [json.loads(x) for x in (utility / "requests.jsonl").read_text().splitlines()]
    rows = [{**r, "e2el_ms": 90000.0} if i < 150 else r for i, r in enumerate(rows)]
    run = rewrite_run(tmp_path / "u", json.loads((utility / "result.json").read_text()), rows)
    got = _rows(make_inputs({**report_dirs, "u": run}, benches=("u",)))
    span = rows[-1]["t_sched_s"] - rows[0]["t_sched_s"]
    warmup = min(MAX_WARMUP_S, WARMUP_FRACTION * span)
    kept = [r["e2el_ms"] for r in rows if r["t_sched_s"] - rows[0]["t_sched_s"] >= warmup]
    e2e = got["utility p95 e2e"].measured.figure
    assert e2e is not None and e2e.value == np.percentile(kept, 95)


def test_a_request_whose_cache_use_is_unknown_is_neither_warm_nor_cold(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """A server that reports no `cached_tokens` (vLLM without --enable-prompt-tokens-details)
    left every row's `cached_tokens` null: the cold row counted every request as cold."""
    chat = report_dirs["chat"]
    rows = [json.loads(x) for x in (chat / "requests.jsonl").read_text().splitlines()]
    rows = [{**r, "cached_tokens": None} for r in rows]
    run = rewrite_run(tmp_path / "chat", json.loads((chat / "result.json").read_text()), rows)
    got = _rows(make_inputs({**report_dirs, "unknown": run}, benches=("unknown",)))
    for name in ("chat p95 TTFT warm", "chat p95 TTFT cold"):
        reading = got[name].measured
        assert reading.figure is None, name
        assert "--enable-prompt-tokens-details" in reading.why, name


def _windowed(source: Path, out: Path, window: list[float] | None) -> Path:
    """The run at `source`, its engines' counters read over `window` (Unix seconds)."""
    result = json.loads((source / "result.json").read_text())
    result["run"] = {**result["run"], "counters_window_unix_s": window}
    rows = [json.loads(x) for x in (source / "requests.jsonl").read_text().splitlines()]
    return rewrite_run(out, result, rows)


def test_a_hit_rate_from_counters_another_run_shared_is_not_printed_as_its_own(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """The cold probe runs alongside the chat run on the same engines: the engines' counters
    over the chat run counted the probe's cold requests too, and the report printed that as
    the chat workload's measured hit rate."""
    inputs = make_inputs(report_dirs)  # the fixture's chat and chat-cold windows overlap
    chat = inputs.runs_for("chat")[0]
    row = _rows(inputs)["chat prefix-cache hit rate"]
    figure = row.measured.figure
    assert figure is not None
    assert figure.value == chat.result.get("prefix_cache_hit_rate_client")
    assert figure.source.path == "prefix_cache_hit_rate_client"
    assert "chat-cold" in row.measured.note and "same time" in row.measured.note
    text = build_document(inputs).markdown
    table = text.split("## 4. SLO commitments")[1].split("\n## ")[0]
    line = next(x for x in table.splitlines() if "| prefix-cache hit rate |" in x)
    assert "clients' count" in line and "chat-cold" in line, line
    section1 = text.split("## 1. ")[1].split("\n## ")[0]
    assert "chat-cold" in section1

    # Apart in time, each run's counters are its own.
    start = chat.result.get("run", "counters_window_unix_s")[1] + 100.0
    apart = _windowed(report_dirs["cold"], tmp_path / "cold", [start, start + 20.0])
    alone = _rows(make_inputs({**report_dirs, "cold": apart}))["chat prefix-cache hit rate"]
    assert alone.measured.figure is not None
    assert alone.measured.figure.source.path == "prefix_cache_hit_rate_server"
    assert alone.measured.note == ""

    # A run that records no window cannot rule another's traffic out.
    unknown = _windowed(report_dirs["cold"], tmp_path / "unknown", None)
    got = _rows(make_inputs({**report_dirs, "cold": unknown}))["chat prefix-cache hit rate"]
    assert got.measured.figure is not None
    assert got.measured.figure.source.path == "prefix_cache_hit_rate_client"
    assert "records no counters window" in got.measured.note


def test_shared_counters_and_no_client_count_say_both(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """Counters shared with the probe, and clients told no `cached_tokens`: the row said the
    figure was "not in result.json", as if the file were short."""
    chat = report_dirs["chat"]
    result = json.loads((chat / "result.json").read_text())
    result["prefix_cache_hit_rate_client"] = None
    rows = [json.loads(x) for x in (chat / "requests.jsonl").read_text().splitlines()]
    run = rewrite_run(tmp_path / "chat", result, rows)
    got = _rows(make_inputs({**report_dirs, "chat": run}))["chat prefix-cache hit rate"]
    assert got.measured.figure is None
    assert "also counted the requests of chat-cold" in got.measured.why
    assert "no cached_tokens" in got.measured.why


def test_a_latency_from_a_run_whose_client_was_the_bottleneck_says_so(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """The bench report said the client was a bottleneck in the chat run (its latencies
    include client delay); section 4 quoted the same run's p95s against the SLOs without a
    word of it."""
    chat = report_dirs["chat"]
    result = json.loads((chat / "result.json").read_text())
    result["client_bottleneck"] = True
    result["client"] = {"client_bottleneck": True, "reasons": ["main: event-loop lag p99 38.7 ms"]}
    rows = [json.loads(x) for x in (chat / "requests.jsonl").read_text().splitlines()]
    run = rewrite_run(tmp_path / "chat", result, rows)
    inputs = make_inputs({**report_dirs, "chat": run})
    got = _rows(inputs)
    for name in ("chat p95 TTFT warm", "chat p95 TTFT cold", "chat p95 ITL"):
        assert "the client was a bottleneck in chat" in got[name].measured.note, name
    assert got["utility p95 e2e"].measured.note == ""
    table = build_document(inputs).markdown.split("## 4. SLO")[1].split("\n## ")[0]
    line = next(x for x in table.splitlines() if "| p95 ITL |" in x)
    assert "the client was a bottleneck in chat" in line, line
    summary = build_document(inputs).markdown.split("## Summary")[1].split("\n## ")[0]
    assert "the client was a bottleneck in chat" in summary


def test_a_missing_reading_is_told_from_a_failed_one_by_its_gap_not_its_words() -> None:
    """The cold row says what would measure it only where runs were missing or too few; it told
    them apart by the reason's first words ("fewer than", "no bench run"), so a failure worded
    "fewer than half ..." was sent to run the probe again, and a missing run worded otherwise
    was not."""
    how = slo.cold_probe_how("chat", probed=False)
    failed = Reading(None, "fewer than half of the requests succeeded", gap=Gap.FAILED)
    assert slo._with_how(failed, how).how == ""
    missing = Reading(None, "the probe's directory was not given", gap=Gap.MISSING)
    assert slo._with_how(missing, how).how == how


def test_the_readings_of_runs_that_failed_and_of_no_run_have_their_gaps(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    chat = report_dirs["chat"]
    rows = _all_failed([json.loads(x) for x in (chat / "requests.jsonl").read_text().splitlines()])
    run = rewrite_run(tmp_path / "chat", json.loads((chat / "result.json").read_text()), rows)
    failed = _rows(make_inputs({**report_dirs, "failed": run}, benches=("failed",)))
    for name in ("chat p95 TTFT warm", "chat p95 TTFT cold", "chat p95 ITL"):
        assert failed[name].measured.gap is Gap.FAILED, name
    assert failed["chat p95 TTFT cold"].measured.how == ""
    none = _rows(make_inputs(report_dirs, benches=()))
    for name in ("chat p95 TTFT warm", "chat p95 TTFT cold", "chat p95 ITL"):
        assert none[name].measured.gap is Gap.MISSING, name
    assert none["chat p95 TTFT cold"].measured.how == slo.cold_probe_how("chat", probed=False)


def _read_rows(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines()]


def _failed(row: dict[str, Any]) -> dict[str, Any]:
    """`row` as the bench writes a failed request: no TTFT, no chunks, and no usage back, so no
    `cached_tokens` (its `ideal_cached_tokens` is the client's own)."""
    return {
        **row,
        "success": False,
        "error": "HTTP 503",
        "ttft_ms": None,
        "cached_tokens": None,
        "itl_ms": [],
    }


def _all_but(rows: list[dict[str, Any]], num_ok: int) -> list[dict[str, Any]]:
    """`rows`, all failed but the last `num_ok` (scheduled after any warm-up)."""
    cut = len(rows) - num_ok
    return [_failed(r) for r in rows[:cut]] + [{**r, "success": True} for r in rows[cut:]]


def _section4_line(text: str, metric: str) -> str:
    table = text.split("## 4. SLO")[1].split("\n## ")[0]
    return next(x for x in table.splitlines() if f"| {metric} |" in x)


def test_a_run_that_failed_most_requests_is_the_stack_s_to_fix(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """5 of some 400 requests succeeded: the rows said "fewer than the 20 successful requests ... a
    p95 needs" as if the bench had run too short (and the cold row said to run the probe
    longer); the runs sent plenty, the stack failed them."""
    chat = report_dirs["chat"]
    warm = [r for r in _read_rows(chat) if r["cached_tokens"]]
    rows = _all_but(warm, 5)
    run = rewrite_run(tmp_path / "chat", json.loads((chat / "result.json").read_text()), rows)
    probe = report_dirs["cold"]
    # The probe's prompts are new to any cache: nothing an infinite one could hold.
    cold = [{**r, "cached_tokens": 0, "ideal_cached_tokens": 0} for r in _read_rows(probe)]
    probe_run = rewrite_run(
        tmp_path / "chat-cold", json.loads((probe / "result.json").read_text()), _all_but(cold, 5)
    )
    dirs = {**report_dirs, "chat": run, "cold": probe_run}
    inputs = make_inputs(dirs, benches=("chat", "cold"))
    got = _rows(inputs)
    for name in ("chat p95 TTFT warm", "chat p95 TTFT cold", "chat p95 ITL"):
        reading = got[name].measured
        assert reading.figure is None, name
        assert reading.gap is Gap.FAILED, name
        assert reading.why.startswith("fewer than the 20 successful requests"), name
        assert "enough were sent, too many of them failed" in reading.why, name
    assert got["chat p95 TTFT cold"].measured.how == ""  # not "run it longer"
    assert got["chat p95 TTFT cold"].measured.samples == 5
    internal = _section4_line(build_document(inputs).markdown, "p95 TTFT cold")
    public = _section4_line(build_document(inputs, public=True).markdown, "p95 TTFT cold")
    for line in (internal, public):
        assert "too many of them failed (the stack's to fix" in line, line
        assert "cold-prefix probe" not in line, line
    assert "(5 here)" in internal and " here)" not in public

    # The chat run's failed requests were meant warm (its prompts' prefixes were sent before):
    # they say nothing of the cold row, which the probe measures.
    alone = _rows(make_inputs(dirs, benches=("chat",)))["chat p95 TTFT cold"].measured
    assert alone.gap is Gap.MISSING
    assert alone.how == slo.cold_probe_how("chat", probed=False)


def test_a_short_run_that_failed_nothing_still_reads_missing(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    chat = report_dirs["chat"]
    rows = [{**r, "success": True, "error": None} for r in _read_rows(chat)[:20]]
    run = rewrite_run(tmp_path / "chat", json.loads((chat / "result.json").read_text()), rows)
    got = _rows(make_inputs({**report_dirs, "chat": run}, benches=("chat",)))
    for name in ("chat p95 TTFT warm", "chat p95 TTFT cold", "chat p95 ITL"):
        reading = got[name].measured
        assert reading.figure is None, name
        assert reading.gap is Gap.MISSING, name
        assert "failed" not in reading.why, name
    assert got["chat p95 TTFT cold"].measured.how == slo.cold_probe_how("chat", probed=False)


def _timed(rows: list[dict[str, Any]], num_sent: int, num_failed: int) -> list[dict[str, Any]]:
    """Five failed requests in a 2-s warm-up (of a 10-s run), then `num_sent`, the first
    `num_failed` of them failed."""
    warmup = [{**_failed(r), "t_sched_s": 0.0, "t_send_s": 0.0} for r in rows[:5]]
    sent = [
        {**(_failed(r) if i < num_failed else r), "t_sched_s": 2.0 + i * 0.1, "t_send_s": 2.0}
        for i, r in enumerate(rows[5 : 5 + num_sent])
    ]
    assert len(sent) == num_sent
    return warmup + sent


@pytest.mark.parametrize(
    ("workload", "metric"), [("chat", "p95 TTFT warm"), ("utility", "p95 e2e")]
)
@pytest.mark.parametrize(
    ("num_sent", "num_failed", "gap"),
    [
        (MIN_SAMPLES, MIN_SAMPLES // 2, Gap.FAILED),  # enough sent, half of them failed
        (MIN_SAMPLES, 1, Gap.MISSING),  # a failure short: more of the bench would measure it
        (MIN_SAMPLES - 1, 1, Gap.MISSING),  # too few sent, failure or not
        (MIN_SAMPLES - 1, 0, Gap.MISSING),
        (MIN_SAMPLES, 0, None),  # measured
    ],
)
def test_a_failure_is_the_reason_only_where_enough_were_sent(
    report_dirs: dict[str, Path],
    tmp_path: Path,
    workload: str,
    metric: str,
    num_sent: int,
    num_failed: int,
    gap: Gap | None,
) -> None:
    """Failures in the warm-up are not counted, as the figure does not count their requests."""
    source = report_dirs[workload]
    result = json.loads((source / "result.json").read_text())
    result["workload"] = {**result["workload"], "duration_s": 10.0}
    rows = [r for r in _read_rows(source) if r["success"] and r["cached_tokens"]]
    run = rewrite_run(tmp_path / workload, result, _timed(rows, num_sent, num_failed))
    inputs = make_inputs({**report_dirs, workload: run}, benches=(workload,))
    assert len(counted_rows(inputs.runs_for(workload)[0])) == num_sent
    reading = _rows(inputs)[f"{workload} {metric}"].measured
    assert (reading.figure is None) == (gap is not None)
    assert reading.gap is gap
    assert ("too many of them failed" in reading.why) == (gap is Gap.FAILED)


def _mostly_failed(source: Path, out: Path, num_ok: int) -> Path:
    """The run at `source`, every request failed but its last `num_ok`."""
    result = json.loads((source / "result.json").read_text())
    return rewrite_run(out, result, _all_but(_read_rows(source), num_ok))


@pytest.mark.parametrize(("workload", "metric"), [("chat", "p95 ITL"), ("utility", "p95 e2e")])
def test_a_run_that_failed_most_requests_leaves_the_worst_run_s_p95_unknown(
    report_dirs: dict[str, Path], tmp_path: Path, workload: str, metric: str
) -> None:
    """Two runs of a workload, one clean, one with 5 successes in hundreds: the row printed the
    clean run's p95 as "the worst run's" and read ok; only the throughput row showed the
    failures. The worst run is the failed one, and its p95 is not known."""
    bad = _mostly_failed(report_dirs[workload], tmp_path / "b-bad", 5)
    dirs = {**report_dirs, "a-clean": report_dirs[workload], "b-bad": bad}
    inputs = make_inputs(dirs, benches=("a-clean", "b-bad"))
    row = _rows(inputs)[f"{workload} {metric}"]
    reading = row.measured
    assert reading.figure is None and row.verdict is None
    assert reading.gap is Gap.FAILED
    assert "in b-bad: enough were sent, too many of them failed" in reading.why
    assert "a-clean" not in reading.why
    assert "the other runs' would flatter it" in reading.why
    assert reading.samples == 5
    internal = build_document(inputs).markdown
    public = build_document(inputs, public=True).markdown
    for text in (internal, public):
        line = _section4_line(text, metric)
        assert "not measured: fewer than the 20 successful requests" in line, line
        assert " ok" not in line.split("|")[5], line
        assert line.split("|")[5].strip().startswith("FAILED, not measured:"), line
        failures = text.split("## 4. SLO")[1].split("failed, the stack's to fix (")[1]
        assert f"{workload} {metric}" in failures.split(": the runs sent enough")[0]
        summary = text.split("## Summary")[1].split("\n## ")[0]
        assert (
            f"{workload} {metric}"
            in summary.split("failed, the stack's to fix: ")[1].split("**")[0]
        )
    assert "(5 here)" in _section4_line(internal, metric)
    assert " here)" not in _section4_line(public, metric)

    # Alone, the clean run measures the row; alone, the failed run reads failed, unnamed as
    # "the other runs'" (there are none).
    clean = _rows(make_inputs(dirs, benches=("a-clean",)))[f"{workload} {metric}"].measured
    assert clean.figure is not None
    alone = _rows(make_inputs(dirs, benches=("b-bad",)))[f"{workload} {metric}"].measured
    assert alone.gap is Gap.FAILED and "other runs" not in alone.why


def _one_token(row: dict[str, Any]) -> dict[str, Any]:
    """`row` as a one-token answer: no chunk after the first, so no inter-token gap."""
    return {**row, "output_len": 1, "itl_ms": [], "e2el_ms": row["ttft_ms"]}


def test_one_token_answers_have_no_inter_token_gap_to_measure(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """Hundreds of successful requests, every answer one token: the ITL row said "fewer than
    the 20 successful requests ... a p95 needs" (more of the bench, which would answer the
    same), and the TPOT reading likewise."""
    chat = report_dirs["chat"]
    rows = [_one_token(r) if r["success"] else r for r in _read_rows(chat)]
    run = rewrite_run(tmp_path / "chat", json.loads((chat / "result.json").read_text()), rows)
    inputs = make_inputs({**report_dirs, "chat": run}, benches=("chat",))
    (kept,) = inputs.runs_for("chat")
    assert sum(1 for r in counted_rows(kept) if r["success"]) >= MIN_SAMPLES
    itl = _rows(inputs)["chat p95 ITL"].measured
    tpot = measure.worst_p95([kept], "tpot")
    for reading in (itl, tpot):
        assert reading.figure is None
        assert reading.gap is None  # neither more of the bench nor the stack's failure
        assert "fewer than" not in reading.why
        assert reading.why.startswith("no successful request after the warm-up had a second")
        assert "no inter-token gap to measure" in reading.why
        assert reading.how == "answers longer than one token would measure it"
    line = _section4_line(build_document(inputs).markdown, "p95 ITL")
    assert "no inter-token gap to measure" in line
    assert "answers longer than one token would measure it" in line
    # e2e needs no second token.
    assert measure.worst_p95([kept], "e2e").figure is not None


def test_a_short_worst_run_row_counts_its_successes_as_the_ttft_rows_do(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """The internal version printed "(12 here)" beside a short TTFT row and nothing beside a
    short ITL or e2e row, whose readings carried no count."""
    utility = report_dirs["utility"]
    result = json.loads((utility / "result.json").read_text())
    result["workload"] = {**result["workload"], "duration_s": 10.0}
    # One request in the 2-s warm-up (of a 10-s run), 12 after it.
    first, *rest = _read_rows(utility)[:13]
    rows = [{**first, "t_sched_s": 0.0}] + [
        {**r, "t_sched_s": 2.0 + 0.1 * i} for i, r in enumerate(rest)
    ]
    run = rewrite_run(tmp_path / "utility", result, rows)
    inputs = make_inputs({**report_dirs, "utility": run}, benches=("utility",))
    reading = _rows(inputs)["utility p95 e2e"].measured
    assert reading.gap is Gap.MISSING and reading.samples == 12
    assert "(12 here)" in _section4_line(build_document(inputs).markdown, "p95 e2e")
    assert " here)" not in _section4_line(build_document(inputs, public=True).markdown, "p95 e2e")


def _count_free(text: str) -> bool:
    """Whether `text` states no count of 5 (the "p95" in it is a name, not a count)."""
    return re.search(r"\b5\b", text) is None


def test_a_run_that_failed_most_warm_requests_leaves_the_pooled_ttft_unknown(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """A clean run and a run with 5 successes in hundreds of warm requests: the warm row pooled
    the 5 with the clean run's and printed a p95 that read ok, while one run of the workload
    mostly failed. The bad run's p95 is not known, so neither is the row's."""
    chat = report_dirs["chat"]
    warm = [r for r in _read_rows(chat) if r["cached_tokens"]]
    bad = rewrite_run(
        tmp_path / "b-bad", json.loads((chat / "result.json").read_text()), _all_but(warm, 5)
    )
    dirs = {**report_dirs, "a-clean": chat, "b-bad": bad}
    inputs = make_inputs(dirs, benches=("a-clean", "b-bad"))
    got = _rows(inputs)
    row = got["chat p95 TTFT warm"]
    reading = row.measured
    assert reading.figure is None and row.verdict is None
    assert reading.gap is Gap.FAILED
    assert reading.why.startswith("fewer than the 20 successful requests with cached_tokens > 0")
    # It names the bad run, and it alone (the clean run is `chat`).
    assert "a p95 needs in b-bad: enough were sent, too many of them failed" in reading.why
    assert "the other runs' would flatter it" in reading.why
    assert reading.samples == 5
    assert _count_free(reading.why)
    # The bad run sent no cold request (its failed ones were meant warm): the cold row is not
    # the stack's failure.
    assert got["chat p95 TTFT cold"].measured.gap is not Gap.FAILED

    internal = _section4_line(build_document(inputs).markdown, "p95 TTFT warm")
    public = _section4_line(build_document(inputs, public=True).markdown, "p95 TTFT warm")
    for line in (internal, public):
        assert "too many of them failed (the stack's to fix" in line, line
        assert "the other runs' would flatter it" in line, line
        assert "ok" not in line.split("|")[6], line  # the verdict
    assert "(5 here)" in internal
    assert " here)" not in public and _count_free(public.split("|")[5]), public

    # Alone, the clean run measures the row; alone, the bad run reads failed, with no other runs
    # to flatter it.
    clean = _rows(make_inputs(dirs, benches=("a-clean",)))["chat p95 TTFT warm"].measured
    assert clean.figure is not None
    alone = _rows(make_inputs(dirs, benches=("b-bad",)))["chat p95 TTFT warm"].measured
    assert alone.gap is Gap.FAILED and "in b-bad" in alone.why
    assert "other runs" not in alone.why


def test_a_cold_probe_that_failed_most_requests_leaves_the_cold_ttft_unknown(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """The cold row pools the workload's run and its cold probes; a probe with 5 successes in
    its cold requests was outweighed by a clean probe's, and the row read measured."""
    probe = report_dirs["cold"]
    # The probe's prompts are new to any cache: nothing an infinite one could hold.
    cold = [{**r, "cached_tokens": 0, "ideal_cached_tokens": 0} for r in _read_rows(probe)]
    result = json.loads((probe / "result.json").read_text())
    bad = rewrite_run(tmp_path / "b-probe", result, _all_but(cold, 5))
    dirs = {**report_dirs, "b-probe": bad}
    clean = _rows(make_inputs(dirs, benches=("chat", "cold")))["chat p95 TTFT cold"].measured
    assert clean.figure is not None  # the clean probe and the chat run alone give a figure
    reading = _rows(make_inputs(dirs, benches=("chat", "cold", "b-probe")))
    cold_row = reading["chat p95 TTFT cold"].measured
    assert cold_row.figure is None and cold_row.gap is Gap.FAILED
    assert "in b-probe: enough were sent, too many of them failed" in cold_row.why
    assert "the other runs' would flatter it" in cold_row.why
    assert cold_row.how == ""  # not "run the probe longer"
    assert cold_row.samples == 5


def _fewer(source: Path, out: Path, num_sent: int, num_failed: int) -> Path:
    """The run at `source` cut to warm requests: five failed in a 2-s warm-up (of a 10-s run),
    then `num_sent`, the first `num_failed` of them failed (`_timed`)."""
    result = json.loads((source / "result.json").read_text())
    result["workload"] = {**result["workload"], "duration_s": 10.0}
    rows = [r for r in _read_rows(source) if r["success"] and r["cached_tokens"]]
    return rewrite_run(out, result, _timed(rows, num_sent, num_failed))


@pytest.mark.parametrize(
    ("num_sent", "num_failed", "gap"),
    [
        (MIN_SAMPLES - 1, MIN_SAMPLES - 1, None),  # too few sent: the clean run's stand
        (MIN_SAMPLES - 1, 1, None),
        (MIN_SAMPLES, MIN_SAMPLES // 2, Gap.FAILED),  # enough sent, half of them failed
        (MIN_SAMPLES, 1, None),  # a failure short: not the stack's, the clean run's stands
        (MIN_SAMPLES, 0, None),
    ],
)
def test_only_a_run_that_sent_enough_of_the_kind_leaves_the_pooled_ttft_unknown(
    report_dirs: dict[str, Path],
    tmp_path: Path,
    num_sent: int,
    num_failed: int,
    gap: Gap | None,
) -> None:
    chat = report_dirs["chat"]
    short = _fewer(chat, tmp_path / "b-short", num_sent, num_failed)
    dirs = {**report_dirs, "a-clean": chat, "b-short": short}
    inputs = make_inputs(dirs, benches=("a-clean", "b-short"))
    assert len(counted_rows(inputs.runs_for("chat")[1])) == num_sent
    reading = _rows(inputs)["chat p95 TTFT warm"].measured
    assert (reading.figure is None) == (gap is not None)
    assert reading.gap is gap
    assert ("in b-short: enough were sent, too many of them failed" in reading.why) == (
        gap is Gap.FAILED
    )
