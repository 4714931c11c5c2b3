"""The benchmark report (deliverable 5): p50, p95 and p99 of every latency, as the seeds ask; the
load each run drove against the planned peak; no engine counter passed off as a probe's."""

from __future__ import annotations

import json
from pathlib import Path

from inhouse.report.build import build_outputs
from inhouse.report.figures import format_value
from inhouse.report.inputs import ReportInputs

from .conftest import make_inputs


def _bench_report(inputs: ReportInputs) -> dict[str, str]:
    text = build_outputs(inputs).files["bench-report.md"].decode()
    return {part.split(" — ")[0]: part for part in text.split("\n## ")[1:]}


def test_every_latency_has_its_p50_p95_and_p99(inputs: ReportInputs) -> None:
    """ "Bench report: ... at target concurrencies, with p50/p95/p99" (the seeds): ITL, TPOT and
    e2e had their p95 only."""
    runs = _bench_report(inputs)
    run = next(r for r in inputs.benches if r.name == "utility")
    for metric, label in (("itl", "ITL"), ("tpot", "TPOT"), ("e2el", "e2e")):
        for p in (50, 95, 99):
            value = run.result.get(f"p{p}_{metric}_ms")
            assert value is not None
            assert f"| p{p} {label} | {format_value(value, 'ms')} |" in runs["utility"], (p, label)


def test_a_probe_s_server_hit_rate_is_not_its_own(inputs: ReportInputs) -> None:
    """The engines' counters over a cold probe count the chat run beside it (78% for a probe
    whose every request was cold): the probe shows its own, client-side figure."""
    probe = _bench_report(inputs)["chat-cold"]
    assert "prefix hit (server)" not in probe and "prefix hit (client)" in probe
    assert "engines' counters during a probe also count the run beside it" in probe


def test_the_load_driven_is_set_against_the_planned_peak(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """The seeds want the bench "at target concurrencies": each run says what it drove, and a
    run below the planned peak says section 4 leaves it out."""
    light = tmp_path / "light"
    light.mkdir()
    result = json.loads((report_dirs["chat"] / "result.json").read_text())
    peak_run = result["workload"]["params"]["sessions"]
    result["workload"]["params"]["sessions"] = "10"
    (light / "result.json").write_text(json.dumps(result))
    (light / "requests.jsonl").write_text((report_dirs["chat"] / "requests.jsonl").read_text())
    inputs = make_inputs({**report_dirs, "light": light}, benches=("chat", "light"))
    planned = inputs.plan.get("workloads", "chat", "traffic", "peak_sessions")
    runs = _bench_report(inputs)
    assert f"Load: {peak_run} concurrent sessions (the plan's peak: {planned})." in runs["chat"]
    assert (
        f"Load: 10 concurrent sessions (the plan's peak: {planned}). **Below the planned "
        "peak**: section 4 leaves this run out." in runs["light"]
    )


def test_a_rate_run_states_its_offered_rate(report_dirs: dict[str, Path], tmp_path: Path) -> None:
    slow = tmp_path / "slow"
    slow.mkdir()
    result = json.loads((report_dirs["utility"] / "result.json").read_text())
    result["workload"] = {"name": "utility", "params": {}, "rate": 1.5, "rate_scale": 1.0}
    (slow / "result.json").write_text(json.dumps(result))
    (slow / "requests.jsonl").write_text((report_dirs["utility"] / "requests.jsonl").read_text())
    inputs = make_inputs({**report_dirs, "slow": slow}, benches=("chat", "slow"))
    peak = inputs.plan.get("workloads", "utility", "traffic", "peak_per_s") * 60
    assert (
        f"Load: {format_value(90.0, 'rate')} req/min offered (the plan's peak: "
        f"{format_value(peak, 'rate')} req/min). **Below the planned peak**"
    ) in _bench_report(inputs)["slow"]
