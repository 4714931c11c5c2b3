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


def test_a_run_s_server_hit_rate_shared_with_another_run_says_so(inputs: ReportInputs) -> None:
    """The chat run's engine counters also counted its cold probe's requests (the two ran at
    the same time): the bench report printed that figure as the chat run's own."""
    chat = _bench_report(inputs)["chat"]
    line = next(x for x in chat.splitlines() if x.startswith("| prefix hit (server) |"))
    assert "not this run's own" in line and "chat-cold" in line, line
    assert "| prefix hit (server) |" in _bench_report(inputs)["utility"]  # ran alone


def test_the_bench_report_states_each_latency_s_window(inputs: ReportInputs) -> None:
    """result.json's percentiles count every request, warm-up included (vLLM's); section 4 and
    the planner leave each run's warm-up out. The bench report set them down without saying
    which, beside a section 4 that quoted other numbers for the same run."""
    import numpy as np

    from inhouse.plan.verify import warmup_for
    from inhouse.report.measure import SAMPLES, counted_rows

    runs = _bench_report(inputs)
    run = next(r for r in inputs.benches if r.name == "utility")
    rows = [r["t_sched_s"] for r in run.requests]
    warmup = warmup_for(max(rows) - min(rows))
    text = runs["utility"]
    assert "every request of the run, its warm-up included" in text
    assert f"after its {format_value(warmup, 's')} warm-up" in text
    kept = [r for r in counted_rows(run) if r["success"]]
    sample, _ = SAMPLES["e2e"]
    p95 = float(np.percentile([v for r in kept for v in sample(r)], 95))
    assert f"| p95 e2e after the warm-up | {format_value(p95, 'ms')} |" in text
