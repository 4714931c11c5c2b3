"""Section 7: the cost arithmetic at the customer's duty cycle, break-even, and the multiple.

Every dollar figure is a `price` (a placeholder in the public version); the multiple against an
API is derived here as API $/month ÷ stack $/month at the same duty cycle, never asserted.
"""

from __future__ import annotations

from typing import Any

from inhouse.report.context import Context, table
from inhouse.report.figures import Figure, Source


def multiples(ctx: Context) -> list[tuple[str, Figure]]:
    """(API, API $/month ÷ stack $/month) for each API the requirements price."""
    cost = ("cost",)
    stack = ctx.inputs.plan.figure(*cost, "usd_per_month", kind="price", unit="usd_m")
    out = []
    for api in ctx.inputs.plan.get("cost", "api_usd_per_month") or {}:
        spend = ctx.inputs.plan.figure(*cost, "api_usd_per_month", api, kind="price", unit="usd_m")
        if stack is None or spend is None or stack.value <= 0:
            continue
        source = Source(ctx.inputs.plan.name, f"{spend.source.path} / {stack.source.path}")
        out.append((api, Figure(spend.value / stack.value, "x", "estimate", source)))
    return out


def cost(ctx: Context) -> list[str]:
    lines = ctx.section("7. Cost model")
    hw = ctx.inputs.plan.get("requirements", "hardware") or []
    for i, offer in enumerate(hw):
        lines.append(_offer_line(ctx, i, offer))
    active = ctx.plan("requirements", "usage", "active_hours_per_month", kind="workload", digits=0)
    lines += [
        "* Stack: "
        + ctx.plan("cost", "usd_per_hour", kind="price", unit="usd_h", label="stack $/h")
        + " x 730 h = "
        + ctx.plan("cost", "usd_per_month", kind="price", unit="usd_m", label="stack $/month")
        + f"; traffic flows {active}"
        " active hours a month (the customer's duty cycle).",
        "",
    ]
    lines += _workload_table(ctx)
    lines += _month_paragraph(ctx, active)
    lines += _per_workload_month(ctx)
    lines += _api_table(ctx)
    lines += [
        "`cost-sheet.xlsx` holds this arithmetic as live formulas with every input in one block: "
        "put in your own duty cycle and prices and the rest recomputes (`cost-sheet.csv` has the "
        "same values).",
        "",
    ]
    return lines


def _offer_line(ctx: Context, i: int, offer: dict[str, Any]) -> str:
    """One hardware offer's $/h: the rent per GPU-hour, or an owned node's all-in arithmetic."""
    r = ("requirements", "hardware", i)
    if offer.get("pricing") == "hourly":
        return (
            f"* {offer['gpu']}, rented: GPUs x "
            + ctx.plan(*r, "usd_per_gpu_hour", kind="price", unit="usd", label="rent per GPU-hour")
            + " per GPU-hour."
        )
    return (
        f"* {offer['gpu']} node, owned: capex "
        + ctx.plan(
            *r, "capex_usd_per_node", kind="price", unit="usd", digits=0, label="capex per node"
        )
        + f" / ({ctx.plan(*r, 'amortization_years', kind='config', digits=0)} y x 8,760 h)"
        + f" + power {ctx.plan(*r, 'effective_power_kw_per_node', kind='config', digits=1)} kW"
        + f" x {ctx.plan(*r, 'avg_power_fraction', kind='config', digits=2)} average"
        + f" x PUE {ctx.plan(*r, 'pue', kind='config', digits=2)}"
        + " x "
        + ctx.plan(*r, "usd_per_kwh", kind="price", unit="usd", digits=3, label="$ per kWh")
        + "/kWh + ops "
        + ctx.plan(
            *r,
            "ops_usd_per_node_year",
            kind="price",
            unit="usd",
            digits=0,
            label="ops per node-year",
        )
        + "/y / 8,760 h = "
        + ctx.plan("hardware", i, "node_usd_per_hour", kind="price", unit="usd_h", label="node $/h")
        + " all-in."
    )


def _workload_table(ctx: Context) -> list[str]:
    """Per workload: its $/h share, its average token rates and its $/1M while traffic flows."""
    rows = [_workload_row(ctx, name) for name in ctx.inputs.plan.get("cost", "workloads") or {}]
    return [
        "Per workload: `$/1M tokens = $/h share / (tokens/s x 3600) x 10^6` at the average rate; "
        "a pool's $/h is split between the workloads it serves by the replica time each takes.",
        "",
        *table(
            [
                "workload",
                "$/h share",
                "input / output tok/s",
                "$/1M blended while traffic flows",
                "$/1M input",
                "$/1M output",
            ],
            rows,
        ),
    ]


def _workload_row(ctx: Context, name: str) -> list[str]:
    w = ("cost", "workloads", name)
    row = [
        name,
        ctx.plan(*w, "usd_per_hour", kind="price", unit="usd_h", label=f"{name} $/h"),
        ctx.plan(*w, "at_average_load", "input_tokens_per_s", kind="workload")
        + " / "
        + ctx.plan(*w, "at_average_load", "output_tokens_per_s", kind="workload"),
    ]
    for part, suffix in (("blended", ""), ("input", " input"), ("output", " output")):
        row.append(
            ctx.plan(
                *w,
                "usd_per_million_tokens",
                part,
                kind="price",
                unit="usd",
                digits=3,
                label=f"{name} $/1M{suffix}",
            )
        )
    return row


def _month_paragraph(ctx: Context, active: str) -> list[str]:
    """The stack's $/1M over the month, idle hours included, where the plan has it."""
    effective = ctx.plan(
        "cost",
        "effective_usd_per_million_tokens_with_idle_hours",
        kind="price",
        unit="usd",
        digits=3,
        label="$/1M over the month",
    )
    if effective == "—":
        return []
    return [
        f"Over the month, idle hours included: {effective} per 1M tokens, every workload "
        "blended (the stack's $/month over the month's tokens: it is paid for every hour, "
        f"traffic flows {active} of them). That is the figure to set beside an API's price "
        "per token; the rates above hold only while traffic flows. Per workload:",
        "",
    ]


def _api_table(ctx: Context) -> list[str]:
    """Each API's $/month for the same tokens, the stack's, the multiple and break-even."""
    api_rows = []
    for api, multiple in multiples(ctx):
        months = ctx.inputs.plan.figure(
            "cost", "breakeven_months", api, kind="estimate", unit="months"
        )
        api_rows.append(
            [
                api,
                ctx.plan(
                    "cost",
                    "api_usd_per_month",
                    api,
                    kind="price",
                    unit="usd_m",
                    label=f"{api} $/month",
                ),
                ctx.plan(
                    "cost", "usd_per_month", kind="price", unit="usd_m", label="stack $/month"
                ),
                ctx.show(multiple),
                ctx.show(months, "never at this usage"),
            ]
        )
    if not api_rows:
        return []
    return [
        "Against the APIs, the same tokens at the same duty cycle (cached input at the cached "
        "price): the multiple is API $/month ÷ stack $/month; break-even is capex ÷ (API "
        "$/month − power and ops $/month).",
        "",
        *table(["API", "API $/month", "stack $/month", "API ÷ stack", "break-even"], api_rows),
    ]


def _per_workload_month(ctx: Context) -> list[str]:
    """Per workload, its $/1M over the month (its $/h share x 730 h over its month's tokens)
    and each API's $/1M for the same tokens (cached input at the cached price), with the
    multiple API ÷ stack: a workload's tokens priced as its own, not at the stack's blend."""
    plan = ctx.inputs.plan
    apis = list(plan.get("cost", "api_usd_per_month") or {})
    rows = []
    for name in plan.get("cost", "workloads") or {}:
        w = ("cost", "workloads", name)
        month = plan.figure(
            *w,
            "usd_per_million_tokens_with_idle_hours",
            kind="price",
            unit="usd",
            digits=3,
            label=f"{name} $/1M over the month",
        )
        row = [name, ctx.show(month)]
        for api in apis:
            row.append(_api_per_million(ctx, name, api))
        rows.append(row)
    if not rows or not any(c != "—" for row in rows for c in row[1:]):
        return []
    return table(
        ["workload", "$/1M over the month", *(f"{api} $/1M, same tokens" for api in apis)], rows
    )


def _api_per_million(ctx: Context, workload: str, api: str) -> str:
    """The API's price of a month of the workload's tokens per 1M, and its multiple of the
    stack's cost of the same month (the workload's $/h share x 730 h)."""
    plan = ctx.inputs.plan
    w = ("cost", "workloads", workload)
    spend = plan.figure(*w, "api_usd_per_month", api, kind="price", unit="usd_m")
    tokens = [plan.get(*w, "per_month", k) for k in ("input_tokens", "output_tokens")]
    share = plan.figure(*w, "usd_per_hour", kind="price", unit="usd_h")
    hours = plan.get("cost", "hours_per_month")
    numbers = [t for t in tokens if isinstance(t, int | float) and not isinstance(t, bool)]
    if spend is None or len(numbers) != 2 or sum(numbers) <= 0:
        return "—"
    base = f"cost.workloads.{workload}"
    per_million = Figure(
        spend.value / sum(numbers) * 1e6,
        "usd",
        "price",
        Source(
            plan.name,
            f"{spend.source.path} / ({base}.per_month.input_tokens + "
            f"{base}.per_month.output_tokens) x 10^6",
        ),
        f"{api} $/1M, {workload}",
        3,
    )
    shown = ctx.show(per_million)
    if share is None or not isinstance(hours, int | float) or share.value * hours <= 0:
        return shown
    multiple = Figure(
        spend.value / (share.value * float(hours)),
        "x",
        "estimate",
        Source(plan.name, f"{spend.source.path} / ({share.source.path} x cost.hours_per_month)"),
    )
    return f"{shown} ({ctx.show(multiple)} the stack's)"
