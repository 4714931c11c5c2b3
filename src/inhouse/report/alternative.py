"""The alternative architecture, compared: `compare.json` (written by `inhouse plan --compare`)
laid out — cost, SLO margins, degraded mode, blast radius — and the trade in words, derived from
those numbers."""

from __future__ import annotations

from typing import Any

from inhouse.report.context import Context, table
from inhouse.report.inputs import Doc, PathPart


def why_infeasible(summary: dict[str, Any], public: bool = False) -> str:
    """The planner's infeasibility, to its first binding constraint. The public version stops
    at the constraint's name: the planner's account of it quotes its simulated figures."""
    lines = [x.strip() for x in str(summary.get("why_infeasible", "")).splitlines() if x.strip()]
    why = " ".join(lines[1:2] or lines[:1]).rstrip(".")
    return why.split(" — ")[0] if public else why


def _worst_margin(summary: dict[str, Any]) -> tuple[str, float] | None:
    worst: tuple[str, float] | None = None
    for workload, metrics in (summary.get("slo_margins") or {}).items():
        for metric, m in metrics.items():
            if m.get("margin") is not None and (worst is None or m["margin"] < worst[1]):
                worst = (f"{workload} {metric}", float(m["margin"]))
    return worst


def _margin_text(
    ctx: Context, doc: Doc, base: tuple[PathPart, ...], summary: dict[str, Any]
) -> str:
    worst = _worst_margin(summary)
    if worst is None:
        return "—"
    workload, metric = worst[0].split(" ")
    figure = doc.figure(
        *base, "slo_margins", workload, metric, "margin", kind="estimate", unit="pct"
    )
    return f"{worst[0]} {ctx.show(figure)}"


def _degraded(summary: dict[str, Any]) -> str:
    items = summary.get("degraded") or []
    if not items:
        return "no pool with a second replica"
    return "; ".join(
        f"{d['pool']} lost: {'meets' if d['pass'] else 'misses'} the degraded SLO" for d in items
    )


def _blast(summary: dict[str, Any]) -> str:
    return "; ".join(
        f"{b['pool']} replica ({b['gpus_per_replica']} GPUs): 1/{b['replicas']} of "
        f"{', '.join(b['workloads'])}"
        for b in summary.get("blast_radius") or []
    )


def _row(
    ctx: Context, doc: Doc, base: tuple[PathPart, ...], summary: dict[str, Any], label: str
) -> list[str]:
    if summary.get("feasible") is False:
        more = summary.get("with_more_nodes") or {}
        if "usd_per_hour" in more:
            return _row(ctx, doc, (*base, "with_more_nodes"), more, label + " — on more nodes")
        return [label, "infeasible", "—", "—", why_infeasible(summary, ctx.public), "—", "—"]
    return [
        label,
        ctx.show(
            doc.figure(*base, "usd_per_hour", kind="price", unit="usd_h", label=f"{label} $/h")
        ),
        str(summary.get("gpus", "—")),
        "yes" if summary.get("meets_slo_at_1x") else "no",
        _margin_text(ctx, doc, base, summary),
        _degraded(summary),
        _blast(summary),
    ]


def _trade(chosen: dict[str, Any], alt: dict[str, Any], public: bool) -> str:
    if alt.get("feasible") is False and "usd_per_hour" not in (alt.get("with_more_nodes") or {}):
        return (
            f"{alt['label']}: not possible with these requirements — {why_infeasible(alt, public)}."
        )
    other = alt if alt.get("feasible") is not False else alt["with_more_nodes"]
    dearer = other["usd_per_hour"] > chosen["usd_per_hour"] * 1.001
    cheaper = other["usd_per_hour"] < chosen["usd_per_hour"] * 0.999
    cost = (
        "costs more per hour"
        if dearer
        else ("costs less per hour" if cheaper else "costs the same per hour")
    )
    nodes = (
        f" and needs more nodes than the hardware offers (on it: {why_infeasible(alt, public)})"
        if alt.get("feasible") is False
        else ""
    )
    cm, om = _worst_margin(chosen), _worst_margin(other)
    margin = ""
    if cm and om:
        margin = (
            f"; its tightest SLO margin is {'wider' if om[1] > cm[1] else 'narrower'} ({om[0]})"
        )
    pools = len(other.get("blast_radius") or [])
    blast = (
        "; it splits the workloads over more pools, so one replica's failure touches fewer of them"
        if pools > len(chosen.get("blast_radius") or [])
        else ""
    )
    verdict = (
        "the chosen plan stays"
        if dearer or not other.get("meets_slo_at_1x")
        else "worth a second look"
    )
    return f"{alt['label']} {cost}{nodes}{margin}{blast}: {verdict}."


def render_alternatives(ctx: Context, doc: Doc) -> list[str]:
    chosen = doc.get("chosen") or {}
    rows = [_row(ctx, doc, ("chosen",), chosen, "chosen: " + "; ".join(chosen.get("pools") or []))]
    alts = doc.get("alternatives") or []
    for i, alt in enumerate(alts):
        rows.append(_row(ctx, doc, ("alternatives", i), alt, alt["label"]))
    lines = table(
        [
            "architecture",
            "$/h",
            "GPUs",
            "meets SLOs at 1x",
            "tightest margin",
            "degraded mode",
            "blast radius of one replica",
        ],
        rows,
    )
    lines += ["The trade:", ""]
    lines += [f"* {_trade(chosen, alt, ctx.public)}" for alt in alts]
    return [*lines, ""]


def alternative(ctx: Context) -> list[str]:
    lines = ctx.section("Alternative architecture, compared")
    doc = ctx.inputs.compare
    if doc is None:
        return [
            *lines,
            "Not compared: run `inhouse plan REQUIREMENTS --out PLAN_DIR --compare` and pass the "
            "plan directory again.",
            "",
        ]
    lines += [
        f"Each alternative was planned and verified by the same planner (`{doc.name}`).",
        "",
    ]
    return [*lines, *render_alternatives(ctx, doc)]


def compare_markdown(compare: dict[str, Any], name: str) -> str:
    """compare.md beside compare.json: the same table and trade as the document's section."""
    from inhouse.report.figures import Ledger
    from inhouse.report.inputs import Doc, ReportInputs

    doc = Doc(name, compare)
    inputs = ReportInputs(plan=Doc("plan.json", {}), stack=Doc("stack.yaml", {}), compare=doc)
    ctx = Context(inputs, Ledger())
    lines = [
        f"# Alternatives compared: {compare.get('name', '')}",
        "",
        *render_alternatives(ctx, doc),
    ]
    return "\n".join(lines)
