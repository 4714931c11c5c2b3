from __future__ import annotations

import json
from pathlib import Path

from inhouse.drill.evidence import AlertRecord, DrillResult, Event, Sample
from inhouse.drill.report import write_drill, write_summary

EVIDENCE_KEYS = {"drill", "verdict", "checks", "alerts", "prometheus", "started", "duration_s",
                 "stack"}  # fmt: skip


def _result(ok: bool) -> DrillResult:
    result = DrillResult("kv-fill", "2026-01-01T00:00:00+00:00", "built-in demo")
    result.check("KV page", "InhouseKVCacheFull reaches Alertmanager", "received", ok)
    result.alerts.append(AlertRecord("InhouseKVCacheFull", "page", 12.5, 30.0, True))
    result.events.append(Event(5.0, "hold 97% of KV"))
    result.samples = [Sample(t * 0.5, 0.2 + t / 100, "" if t % 7 else "mid-stream", 200)
                      for t in range(60)]  # fmt: skip
    result.prometheus = {"version": "2.42.0", "rules_file": "rules.yaml", "time_scale": 0.1}
    result.duration_s = 31.0
    return result


def test_evidence_files(tmp_path: Path) -> None:
    where = write_drill(_result(True), tmp_path)
    evidence = json.loads((where / "evidence.json").read_text())
    assert set(evidence) >= EVIDENCE_KEYS
    assert evidence["verdict"] == "pass"
    assert set(evidence["checks"][0]) == {"name", "expected", "observed", "ok"}
    alert = evidence["alerts"][0]
    assert {"name", "severity", "fired_s", "resolved_s", "received_by_alertmanager"} <= set(alert)
    assert set(evidence["prometheus"]) == {"version", "rules_file", "time_scale"}
    assert (where / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (where / "report.md").read_text()
    for heading in ("## Expected outcome", "## Red flags", "## What was observed",
                    "## Post-mortem", "**Timeline**", "12.5 s: InhouseKVCacheFull"):  # fmt: skip
        assert heading in report


def test_one_failed_check_fails_the_drill_and_the_summary_counts_it(tmp_path: Path) -> None:
    good, bad = _result(True), _result(False)
    bad.drill = "ecc-dbe"
    assert bad.verdict == "fail" and bad.failed_checks == ["KV page"]
    assert DrillResult("soak", "", "").verdict == "fail"  # no checks: nothing was shown
    write_summary([good, bad], tmp_path, {"stack": "demo", "started": "x", "duration_s": 1.0})
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["passed"], summary["failed"]) == (1, 1)
    assert summary["drills"][1]["failed_checks"] == ["KV page"]
    assert "1 of 2 passed" in (tmp_path / "drills.md").read_text()
