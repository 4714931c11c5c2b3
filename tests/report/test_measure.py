"""Measured figures when a run went wrong: every request failed, or the run drove less than the
planned load. The document must say so, never print a figure that cannot be."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from inhouse.report.inputs import ReportInputs
from inhouse.report.rendered import read_alerts
from inhouse.report.slo import SloRow, slo_rows

from .conftest import make_inputs
from .report_fixtures import utility_rows, write_bench


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
    assert e2e.measured.why == f"no request succeeded ({len(rows)} failed)"


def test_a_ttft_row_with_no_success_says_so(report_dirs: dict[str, Path], tmp_path: Path) -> None:
    chat = report_dirs["chat"]
    rows = _all_failed([json.loads(x) for x in (chat / "requests.jsonl").read_text().splitlines()])
    run = tmp_path / "chat"
    run.mkdir()
    (run / "result.json").write_text((chat / "result.json").read_text())
    (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = _rows(make_inputs({**report_dirs, "failed": run}, benches=("failed",)))
    why = f"no request succeeded ({len(rows)} failed)"
    assert got["chat p95 TTFT warm"].measured.why == why
    assert got["chat p95 TTFT cold"].measured.why == why
