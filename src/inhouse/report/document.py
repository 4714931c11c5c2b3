"""The reference-architecture document: front matter with the six deliverables, a summary, the
eight sections in the seeds' order, the alternative compared, and the traceability appendix.

`build_document(inputs, public=...)` returns the markdown and the ledger of every figure it
printed. The public version is the same document rendered through a public ledger: ranges for
workload and measured figures, placeholders for prices, names removed, drills verbatim.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from inhouse.report import sections_cost, sections_ops, sections_plan
from inhouse.report.alternative import alternative
from inhouse.report.context import Context, table
from inhouse.report.figures import Ledger
from inhouse.report.inputs import DRILLS, ReportInputs
from inhouse.report.measure import client_bottlenecked
from inhouse.report.sections_ops import drill_conditions
from inhouse.report.slo import Tally, row_names, tally

DELIVERABLES = (
    (
        "Sizing memo",
        "sizing-memo.md",
        "sections 1–5: workload, hardware, selection, SLOs, capacity",
    ),
    ("Runbook", "runbook.md", "section 8 as an operations guide, with every alert's entry"),
    ("Deployment playbook", "deployment-playbook.md", "bare metal to serving, commands exact"),
    ("Benchmark report", "bench-report.md", "the measured numbers behind section 4"),
    ("Cost sheet", "cost-sheet.xlsx", "section 7 as live formulas (and cost-sheet.csv)"),
    ("License compliance memo", "license-memo.md", "per model and adapter"),
)


@dataclass(frozen=True)
class Built:
    markdown: str
    ledger: Ledger


def _front(ctx: Context) -> list[str]:
    title = "Reference architecture" + ("" if ctx.public else f": {ctx.customer()}")
    desc = "" if ctx.public else str(ctx.inputs.plan.get("description") or "")
    lines = [f"# {title}", ""]
    if desc:
        lines += [f"_{desc}_", ""]
    if ctx.public:
        lines += [
            "_Public version: workload and measured figures are ranges, prices are "
            "placeholders in the arithmetic, tenant and customer names are removed; the drills "
            "are verbatim._",
            "",
        ]
    lines += ["Deliverables (six, each a file beside this document):", ""]
    lines += table(
        ["deliverable", "file", "what"], [[a, f"[{b}]({b})", c] for a, b, c in DELIVERABLES]
    )
    return lines


def _summary(ctx: Context) -> list[str]:
    ctx.ledger.section = "Summary"
    pools = "; ".join(
        f"{p['name']}: {p['replicas']}x {p['model']} {p['quant']} TP{p['tp']} on {p['gpu']}"
        for p in ctx.inputs.plan.get("pools") or []
    )
    rows = tally(ctx.rows)
    unmeasured = _unmeasured(rows)
    # The runs behind section 4's figures whose client was a bottleneck (their rows say so).
    cited = {
        run.name
        for r in rows.measured
        if r.measured.figure is not None
        for run in client_bottlenecked(r.measured.figure, ctx.inputs.benches)
    }
    bottlenecked = [run.name for run in ctx.inputs.benches if run.name in cited]
    drills = ctx.inputs.drills
    verdicts = {
        name: (run.evidence.get("verdict") if run else None)
        for name, _ in DRILLS
        for run in [drills.run(name) if drills else None]
    }
    passed = sum(1 for v in verdicts.values() if v == "pass")
    failed = [name for name, v in verdicts.items() if v is not None and v != "pass"]
    not_run = [name for name, v in verdicts.items() if v is None]
    how = drill_conditions(drills)
    return [
        "## Summary",
        "",
        f"Stack: {pools}. All-in "
        + ctx.plan("cost", "usd_per_hour", kind="price", unit="usd_h", label="stack $/h")
        + f". SLO rows measured: {len(rows.measured)} of {len(ctx.rows)}"
        + unmeasured
        + (
            f"; **{len(rows.missed)} {'misses its' if len(rows.missed) == 1 else 'miss their'} "
            f"target** ({row_names(rows.missed)})"
            if rows.missed
            else (
                f"{';' if unmeasured else ','} every measured one within its target"
                if rows.measured and not rows.unjudged
                else ""
            )
        )
        + (f"; no target to judge: {row_names(rows.unjudged)}" if rows.unjudged else "")
        + (
            f"; the client was a bottleneck in {', '.join(bottlenecked)}, whose figures include "
            "client delay"
            if bottlenecked
            else ""
        )
        + f". Drills passed: {passed} of {len(verdicts)}"
        + (f"; **not passed: {', '.join(failed)}**" if failed else "")
        + (f"; **not run: {', '.join(not_run)}**" if drills and not_run else "")
        + (f" ({how})" if how else "")
        + ("" if drills else " (no drill evidence given)")
        + ". Every figure is listed in the appendix with the file and JSON path it came from.",
        "",
    ]


def _unmeasured(rows: Tally) -> str:
    """The rows without a measured number, the stack's failures apart from the measurements
    still to take: "not measured" for both told an operator nothing of whether to fix the stack
    or to run more of the bench. NOTE: where nothing was measured and nothing failed, "0 of N"
    says it all."""
    text = ""
    if rows.failed:
        text += (
            f"; **{len(rows.failed)} failed, the stack's to fix: {row_names(rows.failed)}** "
            "(the runs sent enough requests and too many of them failed: see the runs' errors)"
        )
    if rows.unmeasured and (rows.measured or rows.failed):
        text += (
            f"; **{len(rows.unmeasured)} not measured yet: {row_names(rows.unmeasured)}** "
            "(measurements still to take: section 4 says why, row by row)"
        )
    return text


def _appendix(ctx: Context) -> list[str]:
    ctx.ledger.section = "Appendix"
    seen: set[tuple[str, str, str, str]] = set()
    rows: list[list[str]] = []
    for entry in list(ctx.ledger.entries):
        src = entry.figure.source
        key = (entry.section, entry.shown, src.file, src.path)
        if key in seen:
            continue
        seen.add(key)
        rows.append(
            [f"F{len(rows) + 1}", entry.section, entry.shown, f"`{src.file}`", f"`{src.path}`"]
        )
    return [
        "## Appendix: where every figure comes from",
        "",
        *table(["#", "section", "figure", "file", "JSON path"], rows),
    ]


def sizing_sections(ctx: Context, charts: Mapping[str, str]) -> list[str]:
    return [
        *sections_plan.workloads(ctx),
        *sections_plan.hardware(ctx),
        *sections_plan.selection(ctx),
        *sections_ops.slo(ctx, charts.get("slo")),
        *sections_plan.capacity(ctx),
    ]


def build_document(
    inputs: ReportInputs, *, public: bool = False, charts: Mapping[str, str] | None = None
) -> Built:
    charts = charts or {}
    ctx = Context.build(inputs, public)
    lines = [*_front(ctx), *_summary(ctx), *sizing_sections(ctx, charts)]
    lines += sections_ops.observability(ctx)
    lines += sections_cost.cost(ctx)
    lines += sections_ops.drills(ctx)
    lines += alternative(ctx)
    lines += _appendix(ctx)
    return Built(ctx.redact("\n".join(lines)), ctx.ledger)


def build_sizing_memo(
    inputs: ReportInputs, *, public: bool = False, charts: Mapping[str, str] | None = None
) -> Built:
    ctx = Context.build(inputs, public)
    lines = [f"# Sizing memo: {ctx.customer()}", "", *sizing_sections(ctx, charts or {})]
    lines += _appendix(ctx)
    return Built(ctx.redact("\n".join(lines)), ctx.ledger)
