"""Every file `inhouse report` writes, built in memory from `ReportInputs` (the CLI writes them).

Internal: `reference-architecture.md` and `.html`, the six deliverables (`sizing-memo.md`,
`runbook.md`, `deployment-playbook.md`, `bench-report.md`, `cost-sheet.xlsx` with
`cost-sheet.csv`, `license-memo.md`), the SLO chart and the drills' timelines. Public
(`public=True`): the same names, sanitized (figures as ranges or placeholders, names removed,
no charts of measured values, the cost sheet as a template with the prices zeroed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inhouse.report.charts import slo_chart
from inhouse.report.context import Context
from inhouse.report.cost_sheet import build_sheet, to_csv, to_xlsx
from inhouse.report.deliverables import bench_report, license_memo, runbook
from inhouse.report.document import build_document, build_sizing_memo
from inhouse.report.figures import Ledger
from inhouse.report.html import render_html
from inhouse.report.inputs import ReportInputs
from inhouse.report.playbook import build_playbook
from inhouse.spec.stack import StackSpec

DOCUMENT = "reference-architecture.md"
SLO_CHART = "slo.png"


@dataclass
class Output:
    files: dict[str, bytes] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    ledger: Ledger | None = None  # the document's
    ledgers: list[Ledger] = field(default_factory=list)  # every file's


def _charts(inputs: ReportInputs, public: bool) -> dict[str, bytes]:
    if public:
        return {}
    ctx = Context.build(inputs, public=False)
    chart = slo_chart(ctx.rows)
    return {SLO_CHART: chart} if chart else {}


def build_outputs(
    inputs: ReportInputs,
    *,
    public: bool = False,
    stack: StackSpec | None = None,
    mermaid_js: str | None = None,
) -> Output:
    out = Output()
    images = {**({} if public else dict(inputs.images)), **_charts(inputs, public)}
    names = {"slo": SLO_CHART} if SLO_CHART in images else {}
    doc = build_document(inputs, public=public, charts=names)
    out.ledger = doc.ledger
    out.files[DOCUMENT] = doc.markdown.encode()
    page, missing = render_html(doc.markdown, "Reference architecture", images, mermaid_js)
    out.files[DOCUMENT.replace(".md", ".html")] = page.encode()
    out.warnings += [f"HTML: image {m} not found; left as a link" for m in missing]
    if mermaid_js is None:
        out.warnings.append(
            "no mermaid.js (--mermaid-js or scripts/fetch-mermaid.sh): "
            "the HTML shows the diagram's source"
        )
    memo = build_sizing_memo(inputs, public=public, charts=names)
    out.files["sizing-memo.md"] = memo.markdown.encode()
    ctx = Context.build(inputs, public)
    out.files["runbook.md"] = ctx.redact(runbook(ctx)).encode()
    out.files["deployment-playbook.md"] = ctx.redact(build_playbook(ctx, stack)).encode()
    out.files["bench-report.md"] = ctx.redact(bench_report(ctx)).encode()
    out.files["license-memo.md"] = ctx.redact(license_memo(ctx)).encode()
    out.ledgers = [doc.ledger, memo.ledger, ctx.ledger]
    sheet = build_sheet(inputs.plan.data, blank_prices=public)
    title = "Cost sheet" + ("" if public else f": {inputs.plan.get('name')}")
    out.files["cost-sheet.xlsx"] = to_xlsx(sheet, title)
    out.files["cost-sheet.csv"] = to_csv(sheet).encode()
    for name, data in images.items():
        out.files[name] = data
    return out
