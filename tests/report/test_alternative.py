"""The alternative compared: compare.json laid out, the trade worded from its numbers."""

from __future__ import annotations

from dataclasses import replace

from inhouse.plan import build_report, make_plan
from inhouse.plan.compare import compare
from inhouse.report.document import build_document
from inhouse.report.inputs import Doc, ReportInputs

from ..plan.plan_helpers import parse
from ..plan.test_compare import _with_utility


def test_the_document_lays_out_the_alternatives(inputs: ReportInputs) -> None:
    req = parse(_with_utility())
    chosen = build_report(make_plan(req, verify=False), sensitivity=False)
    result = compare(req, chosen, verify=False)
    text = build_document(replace(inputs, compare=Doc("plan/compare.json", result))).markdown
    section = text.split("## Alternative architecture, compared")[1].split("## Appendix")[0]
    assert "utility on its own pool (Layout B) instead of LoRA adapters on chat" in section
    assert "sglang instead of vllm" in section
    assert "The trade:" in section and section.count("\n* ") >= 2
    layout = result["alternatives"][0]
    ratio = layout["usd_per_hour"] / result["chosen"]["usd_per_hour"]
    word = "more" if ratio > 1.001 else "less" if ratio < 0.999 else "the same"
    assert f"{layout['label']} costs {word} per hour" in section
    assert "`plan/compare.json`" in text.split("## Appendix")[1]


def test_without_compare_the_section_says_how_to_make_it(inputs: ReportInputs) -> None:
    text = build_document(replace(inputs, compare=None)).markdown
    assert "inhouse plan REQUIREMENTS --out PLAN_DIR --compare" in text
