"""The reference-architecture document and its six deliverables, from measured runs.

`build_outputs(inputs)` turns `ReportInputs` (plan.json, stack.yaml, bench runs, drill evidence,
the render output, compare.json — read by the CLI) into every file `inhouse report` writes, in
memory: the document (markdown and self-contained HTML), the sizing memo, runbook, deployment
playbook, bench report, cost sheet (XLSX with live formulas, and CSV) and licence memo. Pure:
no files, no clock, no network. Every number goes through a `Ledger`, which formats it for the
internal or the public version and lists it in the traceability appendix. See docs/report.md.
"""

from inhouse.report.build import Output, build_outputs
from inhouse.report.inputs import BenchRun, Doc, DrillRun, Drills, RenderOutput, ReportInputs

__all__ = [
    "BenchRun",
    "Doc",
    "DrillRun",
    "Drills",
    "Output",
    "RenderOutput",
    "ReportInputs",
    "build_outputs",
]
