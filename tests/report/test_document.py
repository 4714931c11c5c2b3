"""The document: sections in order, the SLO table's measured column, rows without a number
counted, the degraded SLO from the kill-replica drill, every figure traceable."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from inhouse.report.document import DELIVERABLES, build_document
from inhouse.report.inputs import ReportInputs, parse_path
from inhouse.report.rendered import read_alerts
from inhouse.report.slo import SloRow, slo_rows

from .conftest import make_inputs

SECTIONS = (
    "1. Workload characterization",
    "2. Hardware bill",
    "3. Model, quantization and engine selection",
    "4. SLO commitments",
    "5. Capacity plan",
    "6. Observability",
    "7. Cost model",
    "8. Runbook drills",
)


def _rows(inputs: ReportInputs) -> dict[str, object]:
    return {f"{r.workload} {r.metric}": r for r in _slo_rows(inputs)}


def _slo_rows(inputs: ReportInputs) -> list[SloRow]:
    return slo_rows(inputs, read_alerts(inputs.render))


def test_eight_sections_in_order_and_six_deliverables(inputs: ReportInputs) -> None:
    text = build_document(inputs).markdown
    headings = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    numbered = [h for h in headings if h[0].isdigit()]
    assert numbered == list(SECTIONS)
    assert len(DELIVERABLES) == 6
    front = text.split("## Summary")[0]
    for _, file, _ in DELIVERABLES:
        assert f"[{file}]({file})" in front
    assert text.count("```mermaid") == 1


def _after_warm_up(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows scheduled after the planner's warm-up (its first 20%, at most 30 s) of the
    run's arrivals (the fixtures' result.json records no duration)."""
    from inhouse.plan.verify import MAX_WARMUP_S, WARMUP_FRACTION

    first, last = rows[0]["t_sched_s"], rows[-1]["t_sched_s"]
    warmup = min(MAX_WARMUP_S, WARMUP_FRACTION * (last - first))
    return [r for r in rows if r["t_sched_s"] - first >= warmup]


def test_measured_column_comes_from_the_runs(
    inputs: ReportInputs, report_dirs: dict[str, Path]
) -> None:
    rows = _rows(inputs)
    chat = [
        json.loads(line)
        for line in (report_dirs["chat"] / "requests.jsonl").read_text().splitlines()
    ]
    cold = [
        json.loads(line)
        for line in (report_dirs["cold"] / "requests.jsonl").read_text().splitlines()
    ]
    # Latency p95s count what each run scheduled after its warm-up, as the planner's check.
    chat_kept, cold_kept = _after_warm_up(chat), _after_warm_up(cold)
    warm = [r["ttft_ms"] for r in chat_kept if r["success"] and r["cached_tokens"] > 0]
    cold_ttft = [
        r["ttft_ms"] for r in chat_kept + cold_kept if r["success"] and r["cached_tokens"] == 0
    ]
    assert rows["chat p95 TTFT warm"].measured.figure.value == np.percentile(warm, 95)
    assert rows["chat p95 TTFT cold"].measured.figure.value == np.percentile(cold_ttft, 95)
    gaps = [g for r in chat_kept if r["success"] for g in r["itl_ms"]]
    assert rows["chat p95 ITL"].measured.figure.value == np.percentile(gaps, 95)
    # one session of the 100 driven had a failed request (row 7)
    held = rows["chat concurrent sessions held: share with a failure"]
    assert held.measured.figure.value == 0.01 and held.verdict is True
    assert abs(rows["utility throughput (req/min)"].measured.figure.value - 1000.0) < 1e-6
    assert rows["utility throughput (req/min)"].verdict is True
    assert rows["cluster KV use, steady (p50)"].measured.figure.value == 0.2937
    assert rows["cluster KV use, bursts (max)"].measured.figure.value == 0.4683
    # The engines' counters over the chat run also counted its cold probe (the two overlap,
    # as the documented sequence runs them): the clients' own count stands.
    hit = rows["chat prefix-cache hit rate"].measured.figure
    chat_result = json.loads((report_dirs["chat"] / "result.json").read_text())
    assert hit.value == chat_result["prefix_cache_hit_rate_client"]
    degraded = rows["chat p95 TTFT, one chat replica lost"]
    assert degraded.measured.figure.value == 1034.0
    assert degraded.measured.figure.source.path == "checks[1].observed"
    unmeasured = [name for name, r in rows.items() if r.measured.figure is None]
    assert unmeasured == ["chat p95 ITL, one chat replica lost"]  # the drill measures TTFT


def test_rows_without_a_number_are_counted_as_wishes(report_dirs: dict[str, Path]) -> None:
    inputs = make_inputs(report_dirs, drills=False, benches=("chat",))
    text = build_document(inputs).markdown
    rows = _rows(inputs)
    cold = rows["chat p95 TTFT cold"]
    assert cold.measured.figure is None
    assert cold.measured.why.startswith(
        "fewer than the 20 successful requests with cached_tokens == 0, after the warm-up, "
        "a p95 needs"
    )
    chat = [
        json.loads(line)
        for line in (report_dirs["chat"] / "requests.jsonl").read_text().splitlines()
    ]
    kept = _after_warm_up(chat)
    assert cold.measured.samples == sum(1 for r in kept if r["success"] and not r["cached_tokens"])
    missing = [name for name, r in rows.items() if r.measured.figure is None]
    assert set(missing) == {
        "chat p95 TTFT cold",
        "utility p95 e2e",
        "utility throughput (req/min)",
        "chat p95 TTFT, one chat replica lost",
        "chat p95 ITL, one chat replica lost",
    }
    assert f"{len(rows) - 5} of {len(rows)} rows are measured; 5 not measured yet" in text
    assert len(rows) == 11
    assert "Drills passed: 0 of 7 (no drill evidence given)" in text


def test_the_degraded_slo_is_named_with_the_drill_value(inputs: ReportInputs) -> None:
    text = build_document(inputs).markdown
    assert "**chat p95 TTFT at most 1,200 ms while one chat replica is lost**" in text
    assert "measured by the kill-replica drill: 1,034 ms — held" in text


def test_every_figure_traces_to_its_file_and_json_path(inputs: ReportInputs) -> None:
    built = build_document(inputs)
    assert built.ledger.entries
    docs = {d.name: d for d in (inputs.plan, *(r.result for r in inputs.benches))}
    if inputs.drills:
        docs.update({r.evidence.name: r.evidence for r in inputs.drills.runs})
    checked = 0
    for entry in built.ledger.entries:
        src = entry.figure.source
        assert src.file and src.path
        doc = docs.get(src.file)
        if doc is None or " " in src.path:  # derived: a selection and a statistic, named
            continue
        value = doc.get(*parse_path(src.path))
        if isinstance(value, str):
            continue
        assert value is not None, (src.file, src.path)
        checked += 1
    assert checked > 40
    appendix = built.markdown.split("## Appendix")[1]
    assert "`cost.usd_per_hour`" in appendix and "checks[1].observed" in appendix


def test_a_run_below_the_planned_sessions_holds_nothing(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """Ten sessions without a failure say nothing about a hundred."""
    run = tmp_path / "small"
    run.mkdir()
    result = json.loads((report_dirs["chat"] / "result.json").read_text())
    result["workload"]["params"]["sessions"] = "10"
    (run / "result.json").write_text(json.dumps(result))
    (run / "requests.jsonl").write_text((report_dirs["chat"] / "requests.jsonl").read_text())
    dirs = {**report_dirs, "small": run}
    rows = _rows(make_inputs(dirs, benches=("small",)))
    held = rows["chat concurrent sessions held: share with a failure"]
    assert held.measured.figure is None
    assert "drove fewer sessions than the planned peak" in held.measured.why


def test_the_drill_table_shows_each_verdict(report_dirs: dict[str, Path], tmp_path: Path) -> None:
    from .report_fixtures import write_drills

    drills = write_drills(tmp_path / "drills", failing="kv-fill")
    inputs = make_inputs({**report_dirs, "drills": drills})
    text = build_document(inputs).markdown
    assert "| kill-replica | Kill a chat replica during peak load | pass |" in text
    assert "| kv-fill | Fill the KV cache to 95% | fail |" in text
    summary = text.split("## Summary")[1].split("\n## ")[0]
    assert "Drills passed: 6 of 7; **not passed: kv-fill** (the rules' holds" in summary


def test_the_summary_names_the_rows_that_miss_their_target(inputs: ReportInputs) -> None:
    """The fixture's chat run hits 83.9% of prefixes against a planned 85.0%: the summary, the
    paragraph a signer reads, says so, not just that every row was measured."""
    rows = _rows(inputs)
    missed = [name for name, r in rows.items() if r.verdict is False]  # type: ignore[attr-defined]
    assert missed == ["chat prefix-cache hit rate"]
    text = build_document(inputs).markdown
    summary = text.split("## Summary")[1].split("\n## ")[0]
    assert (
        "SLO rows measured: 10 of 11; **1 not measured yet: chat p95 ITL, one chat replica "
        "lost** (measurements still to take: section 4 says why, row by row); "
        "**1 misses its target** (chat prefix-cache hit rate). "
        "Drills passed: 7 of 7 (the rules' holds and windows at 0.1x)." in summary
    )


def test_the_drills_post_mortem_timeline_stays_a_list(inputs: ReportInputs) -> None:
    """Issue 22 aligns its times (`*     9.3 s`): five spaces would make CommonMark code."""
    text = build_document(inputs).markdown
    assert "\n* 9.3 s: SIGKILL chat-1" in text and "*     9.3 s" not in text


def _summary(inputs: ReportInputs) -> str:
    return build_document(inputs).markdown.split("## Summary")[1].split("\n## ")[0]


def test_the_summary_names_the_rows_not_measured(report_dirs: dict[str, Path]) -> None:
    """ "SLO rows measured: 6 of 11, every one within its target" read as a clean bill: the
    paragraph a signer reads names the rows that are wishes."""
    inputs = make_inputs(report_dirs, drills=False, benches=("chat",))
    wishes = [
        f"{r.workload} {r.metric}" for r in _rows(inputs).values() if r.measured.figure is None
    ]  # type: ignore[attr-defined]
    assert len(wishes) == 5
    assert f"**5 not measured yet: {'; '.join(wishes)}**" in _summary(inputs)


def test_the_summary_names_drills_not_run_and_how_they_ran(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """Evidence for five of the seven drills read "Drills passed: 5 of 7", as if two had been
    run and failed, or never wanted; and drills judged with the rules' holds at a tenth of
    production's passed without saying so."""
    import shutil

    from .report_fixtures import write_drills

    drills = write_drills(tmp_path / "drills")
    for name in ("ecc-dbe", "soak"):
        shutil.rmtree(drills / name)
    summary = json.loads((drills / "summary.json").read_text())
    (drills / "summary.json").write_text(json.dumps({**summary, "quick": True}))
    inputs = make_inputs({**report_dirs, "drills": drills})
    scale = inputs.drills.runs[0].evidence.get("prometheus", "time_scale")  # type: ignore[union-attr]
    assert scale is not None and scale < 1
    text = _summary(inputs)
    assert "Drills passed: 5 of 7; **not run: ecc-dbe, soak**" in text
    assert f"(quick runs, the rules' holds and windows at {scale:g}x)" in text


def test_every_degraded_commitment_is_a_row(inputs: ReportInputs) -> None:
    """The requirements commit p95 ITL as well as TTFT while a replica is lost (plan.json
    `degraded[].degraded_slo`); the table listed TTFT only, and the ITL commitment appeared
    nowhere in the document a customer signs."""
    stated = {
        (d["pool"], workload, metric)
        for d in inputs.plan.get("degraded")
        for workload, slo in (d.get("degraded_slo") or {}).items()
        for metric in slo or {}
    }
    assert ("chat", "chat", "itl") in stated
    rows = _rows(inputs)
    itl = rows["chat p95 ITL, one chat replica lost"]
    target = inputs.plan.get("degraded", 0, "degraded_slo", "chat", "itl", "target_ms")
    assert itl.target.figure is not None and itl.target.figure.value == target
    assert itl.measured.figure is None
    # The words tests/report/test_reference_run.py tells the never-measured rows by.
    assert "the kill-replica drill measures p95 TTFT only" in itl.measured.why
    assert len([k for k in rows if k.endswith("replica lost")]) == len(stated)
    section5 = build_document(inputs).markdown.split("## 5. ")[1].split("\n## ")[0]
    assert f"**chat p95 ITL at most {target:,.0f} ms while one chat replica is lost**" in section5
    assert "; not measured: no drill measures it: the kill-replica drill measures" in section5


def test_section_5_and_the_table_give_one_verdict(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """A degraded p95 TTFT exactly at its target: the drill's own check (`<=`) said ok, the
    SLO table (`<`) said MISS, and section 5 followed the drill ("held"): two verdicts on one
    figure in one document."""
    from .report_fixtures import write_drills

    inputs = make_inputs(report_dirs)
    target = inputs.plan.get("degraded", 0, "degraded_slo", "chat", "ttft", "target_ms")
    drills = write_drills(tmp_path / "drills", degraded_ttft=f"{target:,.0f} ms")
    inputs = make_inputs({**report_dirs, "drills": drills})
    row = _rows(inputs)["chat p95 TTFT, one chat replica lost"]
    assert row.verdict is False  # type: ignore[attr-defined]
    text = build_document(inputs).markdown
    assert f"measured by the kill-replica drill: {target:,.0f} ms — **missed**" in text


def test_the_summary_says_when_the_soak_ran_with_shortened_days(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """`inhouse drill run --soak-day-s 900` said so in the soak's own check text only: the
    summary read as if fourteen 24 h days had been soaked."""
    from .report_fixtures import write_drills

    drills = write_drills(tmp_path / "drills")
    full = _summary(make_inputs({**report_dirs, "drills": drills}))
    assert "shortened" not in full and "soak" not in full.split("Drills passed")[1]
    summary = json.loads((drills / "summary.json").read_text())
    (drills / "summary.json").write_text(json.dumps({**summary, "soak_day_s": 900}))
    text = _summary(make_inputs({**report_dirs, "drills": drills}))
    assert "the soak's simulated days shortened to 900 s, not 24 h" in text, text
    # One parenthesis, no nested one: the reference run's reader (tests/report/
    # test_reference_run.py) and a customer's eye both take the sentence to end at its ")."
    assert re.search(r"Drills passed: \d of \d( \([^)]*\))?\.", text), text


def test_shortened_soak_days_are_not_claimed_when_the_soak_did_not_run(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    import shutil

    from .report_fixtures import write_drills

    drills = write_drills(tmp_path / "drills")
    shutil.rmtree(drills / "soak")
    summary = json.loads((drills / "summary.json").read_text())
    (drills / "summary.json").write_text(json.dumps({**summary, "soak_day_s": 900}))
    text = _summary(make_inputs({**report_dirs, "drills": drills}))
    assert "**not run: soak**" in text and "shortened" not in text


def test_an_unmeasured_row_names_what_measures_it_and_never_reads_as_a_pass(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """The cold-TTFT and degraded rows read "not measured" without saying which run or drill
    measures them; and a measured row with no target (requirements without a cold-TTFT SLO)
    let the summary say every measured row was within its target."""
    inputs = make_inputs(report_dirs, drills=False, benches=("chat",))
    rows = _rows(inputs)
    cold = rows["chat p95 TTFT cold"].measured.how
    assert "plan_bench_args.py PLAN_DIR/plan.json chat --cold" in cold, cold
    assert "--label chat-cold" in cold, cold
    degraded = rows["chat p95 TTFT, one chat replica lost"].measured.how
    assert "inhouse drill run kill-replica --stack PLAN_DIR/stack.yaml" in degraded, degraded
    itl = rows["chat p95 ITL, one chat replica lost"].measured.why
    assert itl.startswith("no drill measures it: the kill-replica drill"), itl
    text = build_document(inputs).markdown
    table = text.split("## 4. SLO commitments")[1].split("\n## ")[0]
    for line in table.splitlines():
        if "not measured" in line:
            assert " ok " not in line and "MISS" not in line, line

    plan = tmp_path / "plan"
    plan.mkdir()
    data = json.loads((report_dirs["plan"] / "plan.json").read_text())
    data["commitments"]["chat"]["ttft_cold"]["target_ms"] = None
    (plan / "plan.json").write_text(json.dumps(data))
    (plan / "stack.yaml").write_text((report_dirs["plan"] / "stack.yaml").read_text())
    no_target = make_inputs({**report_dirs, "plan": plan})
    row = _rows(no_target)["chat p95 TTFT cold"]
    assert row.measured.figure is not None and row.verdict is None
    text = build_document(no_target).markdown
    summary = text.split("## Summary")[1].split("\n## ")[0]
    assert "every measured one within its target" not in summary
    assert "no target to judge: chat p95 TTFT cold" in summary
    assert "Every measured row meets its target" not in text


def test_the_planner_s_p95s_stand_beside_the_table_counted_the_same_way(
    inputs: ReportInputs,
) -> None:
    """Section 4 quoted measured p95s against targets; the plan's own simulated p95s (after
    its warm-up) were nowhere in the document to set them beside, nor what each counted."""
    from inhouse.report.figures import format_value

    text = build_document(inputs).markdown
    section = text.split("## 4. SLO commitments")[1].split("\n## ")[0]
    check = inputs.plan.get("slo_check", "1x", "workloads")
    for workload, result in check.items():
        for metric, row in result["metrics"].items():
            shown = format_value(row["p95_ms"], "ms")
            label = {"ttft": "TTFT", "itl": "ITL", "tpot": "TPOT", "e2e": "e2e"}[metric]
            assert f"{workload} p95 {label} {shown}" in section, (workload, metric)
    assert "after its warm-up, as the measured rows are" in section


def test_section_5_words_an_unmeasured_degraded_slo_plainly(report_dirs: dict[str, Path]) -> None:
    """Section 5 read "not measured (no drill evidence (inhouse report --drills DIR))" and,
    of the ITL commitment, "section 5 gives the planner's simulation", in section 5 itself."""
    inputs = make_inputs(report_dirs, drills=False)
    section5 = build_document(inputs).markdown.split("## 5. ")[1].split("\n## ")[0]
    assert "section 5 gives" not in section5
    assert "((" not in section5 and "))" not in section5.replace("`))", "")
    assert "not measured by the kill-replica drill: no drill evidence" in section5
    assert "inhouse drill run kill-replica --stack PLAN_DIR/stack.yaml" in section5


def _depth(text: str) -> int:
    """The deepest nesting of parentheses outside code spans."""
    deepest = depth = 0
    for i, part in enumerate(text.split("`")):
        if i % 2:
            continue  # a code span
        for char in part:
            depth += {"(": 1, ")": -1}.get(char, 0)
            deepest = max(deepest, depth)
    return deepest


def test_section_4_nests_no_parentheses(report_dirs: dict[str, Path]) -> None:
    """ "< 2.0% (of the sessions, at the planned peak (section 1))": a reader loses which
    parenthesis closes what, in the table a customer signs."""
    for inputs in (make_inputs(report_dirs), make_inputs(report_dirs, drills=False)):
        table = build_document(inputs).markdown.split("## 4. SLO")[1].split("\n## ")[0]
        for line in table.splitlines():
            assert _depth(line) <= 1, line


def _mostly_failed(source: Path, out: Path, num_ok: int) -> Path:
    """The run at `source`, every request failed as the bench writes one (no TTFT, no usage)
    but its last `num_ok`."""
    from .report_fixtures import rewrite_run

    rows = [json.loads(x) for x in (source / "requests.jsonl").read_text().splitlines()]
    cut = len(rows) - num_ok
    failed = [
        {**r, "success": False, "error": "HTTP 503", "ttft_ms": None, "cached_tokens": None}
        | {"itl_ms": []}
        for r in rows[:cut]
    ]
    result = json.loads((source / "result.json").read_text())
    return rewrite_run(out, result, failed + [{**r, "success": True} for r in rows[cut:]])


def test_the_summary_tells_the_stack_s_failures_from_measurements_still_to_take(
    report_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """The chat run sent hundreds of requests and 5 succeeded (the stack failed); no utility
    run was given (a measurement still to take). The summary read "**not measured: ...**" for
    both: an operator could not tell "fix the stack" from "run more of the bench"."""
    from inhouse.report.measure import Gap

    bad = _mostly_failed(report_dirs["chat"], tmp_path / "chat", 5)
    inputs = make_inputs({**report_dirs, "chat": bad}, benches=("chat", "cold"))
    readings = {f"{r.workload} {r.metric}": r.measured for r in _slo_rows(inputs)}
    failed = [n for n, r in readings.items() if r.gap is Gap.FAILED]
    todo = [n for n, r in readings.items() if r.figure is None and r.gap is not Gap.FAILED]
    assert failed == ["chat p95 TTFT warm", "chat p95 ITL"]
    assert todo == [
        "utility p95 e2e",
        "utility throughput (req/min)",
        "chat p95 ITL, one chat replica lost",
    ]
    summary = _summary(inputs)
    assert (
        "**2 failed, the stack's to fix: chat p95 TTFT warm; chat p95 ITL** (the runs sent "
        "enough requests and too many of them failed: see the runs' errors); "
        "**3 not measured yet: utility p95 e2e; utility throughput (req/min); chat p95 ITL, "
        "one chat replica lost** (measurements still to take: section 4 says why, row by row)"
        in summary
    ), summary
    assert "not measured:" not in summary
    text = build_document(inputs).markdown
    section4 = text.split("## 4. SLO")[1].split("\n## ")[0]
    assert (
        f"{len(readings) - 5} of {len(readings)} rows are measured; 2 failed, the stack's to fix "
        "(chat p95 TTFT warm; chat p95 ITL): the runs sent enough requests and too many of "
        "them failed, and more of the bench would fail as well; 3 not measured yet, a "
        "measurement still to take (utility p95 e2e; utility throughput (req/min); chat p95 "
        "ITL, one chat replica lost) — a row without a measured number is a wish" in section4
    ), section4
    cells = {
        line.split("|")[2].strip(): line.split("|")[5].strip()
        for line in section4.splitlines()
        if line.startswith("| chat |") or line.startswith("| utility |")
    }
    assert cells["p95 ITL"].startswith("FAILED, not measured: fewer than the 20"), cells
    assert cells["p95 e2e"].startswith("not measured: no bench run of this workload"), cells
    # The public version, which names no tenant and prints no exact figure, tells them apart too.
    public = _summary_of(build_document(inputs, public=True).markdown)
    assert "failed, the stack's to fix:" in public and "not measured yet:" in public


def _summary_of(markdown: str) -> str:
    return markdown.split("## Summary")[1].split("\n## ")[0]
