"""What every section gets: the inputs, the ledger that formats figures, and what was read from
the render output and the SLO rows (computed once, quoted by several sections)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from inhouse.report.figures import Figure, Kind, Ledger, Unit
from inhouse.report.inputs import PathPart, ReportInputs
from inhouse.report.public import public_inputs
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
        """The context of one version; the public one cites every file by a neutral name
        (`public.public_inputs`: a path as given can name the customer)."""
        if public:
            inputs = public_inputs(inputs)
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

    def names_to_remove(self) -> dict[str, str]:
        """Tenant names (the stack's gateway section) and the customer's (the plan's and the
        stack's name), each with its public placeholder."""
        out: dict[str, str] = {}
        tenants = self.inputs.stack.get("gateway", "tenants") or []
        for i, tenant in enumerate(tenants):
            if tenant.get("name"):
                out[str(tenant["name"])] = f"tenant-{i + 1}"
        for value in (self.inputs.plan.get("name"), self.inputs.stack.get("name")):
            if value:
                out[str(value)] = "customer"
        return out

    def redact(self, text: str) -> str:
        """The public version carries no tenant or customer name (longest names first)."""
        if not self.public:
            return text
        for name, placeholder in sorted(self.names_to_remove().items(), key=lambda kv: -len(kv[0])):
            text = re.sub(rf"(?<![\w-]){re.escape(name)}(?![\w-])", placeholder, text)
        return text
