"""Measured figures when a run went wrong: every request failed, or the run drove less than the
planned load. The document must say so, never print a figure that cannot be."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inhouse.report.document import build_document
from inhouse.report.inputs import ReportInputs
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
