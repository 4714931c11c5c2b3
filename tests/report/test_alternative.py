"""The alternative compared: compare.json laid out, the trade worded from its numbers."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

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


def _section3(inputs: ReportInputs, compared: dict[str, Any]) -> str:
    text = build_document(replace(inputs, compare=Doc("plan/compare.json", compared))).markdown
    return text.split("## 3. ")[1].split("\n## ")[0]


def test_section_3_words_an_infeasible_engine_alternative(inputs: ReportInputs) -> None:
    """`inhouse plan --compare` on the CRM example: SGLang does not fit the node. Section 3
    read "the same requirements give sglang instead of vllm: — (section 5, ...)": a dash for
    a price, and a section that is not where the comparison is."""
    req = parse(_with_utility())
    result = compare(req, build_report(make_plan(req, verify=False), sensitivity=False))
    index = next(i for i, a in enumerate(result["alternatives"]) if a["axis"] == "engine")
    engine = result["alternatives"][index]
    feasible = {k: v for k, v in engine.items() if k not in ("feasible", "why_infeasible")}
    bigger = {
        "axis": "engine",
        "label": engine["label"],
        "feasible": False,
        "why_infeasible": "x: no plan meets the requirements.\n  binding constraint: chat p95 itl",
        "with_more_nodes": {**feasible, "usd_per_hour": 30.77},
    }
    result["alternatives"][index] = bigger
    section = _section3(inputs, result)
    assert ": —" not in section and "section 5" not in section
    assert (
        f"Planned with SGLang's step-time constants instead ({engine['label']}), the same "
        "requirements do not fit this hardware (binding constraint: chat p95 itl); on more "
        "nodes it costs $30.77/h (the alternative compared, after section 8)." in section
    )
    del bigger["with_more_nodes"]
    section = _section3(inputs, result)
    assert (
        "the same requirements cannot be met (binding constraint: chat p95 itl; the "
        "alternative compared, after section 8)." in section
    )
