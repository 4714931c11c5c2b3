"""What every section gets: the inputs, the ledger that formats figures, and what was read from
the render output and the SLO rows (computed once, quoted by several sections)."""

from __future__ import annotations

from dataclasses import dataclass, field

from inhouse.report.figures import Figure, Kind, Ledger, Unit
from inhouse.report.inputs import PathPart, ReportInputs
from inhouse.report.rendered import Alert, Dashboard, read_alerts, read_dashboards
from inhouse.report.slo import SloRow, slo_rows


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return [*out, ""]


@dataclass
class Context:
    inputs: ReportInputs
    ledger: Ledger
    alerts: list[Alert] = field(default_factory=list)
    dashboards: list[Dashboard] = field(default_factory=list)
    rows: list[SloRow] = field(default_factory=list)

    @classmethod
    def build(cls, inputs: ReportInputs, public: bool) -> Context:
        alerts = read_alerts(inputs.render)
        return cls(
            inputs,
            Ledger(public=public),
            alerts,
            read_dashboards(inputs.render),
            slo_rows(inputs, alerts),
        )

    @property
    def public(self) -> bool:
        return self.ledger.public

    def section(self, title: str) -> list[str]:
        self.ledger.section = title
        return [f"## {title}", ""]

    def show(self, figure: Figure | None, missing: str = "—") -> str:
        return self.ledger.show(figure, missing)

    def plan(
        self,
        *parts: PathPart,
        kind: Kind,
        unit: Unit = "",
        label: str = "",
        scale: float = 1.0,
        digits: int | None = None,
    ) -> str:
        """A figure from plan.json, shown; "—" when the plan does not have it."""
        return self.show(
            self.inputs.plan.figure(
                *parts, kind=kind, unit=unit, label=label, scale=scale, digits=digits
            )
        )

    def customer(self) -> str:
        return self.ledger.name(str(self.inputs.plan.get("name") or "the stack"), "the customer")
