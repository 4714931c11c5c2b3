"""The cost sheet: plan.json's cost arithmetic as live spreadsheet formulas, and a CSV twin.

All inputs sit in one block at the top (prices, power, duty cycle, each workload's traffic and
its share of replica time from the planner, API prices); every figure below is a formula over
them: node $/h (capex amortized + power x PUE + ops), stack $/h and $/month, per workload $/h,
$/1M tokens blended, input and output, $/request, $/1M over the month (idle hours included),
API $/month and $/1M for its tokens and the multiple of its stack share; API $/month,
break-even months and the API ÷ stack multiple. A customer types their own duty cycle and
prices and the rest recomputes.

Each row is built as an `X`: its value and its formula together, from the same operations, so
the CSV (values) and the XLSX (formulas) cannot disagree. `plan/cost.py` documents the model.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

HOURS_PER_YEAR = 8760.0
HOURS_PER_MONTH = HOURS_PER_YEAR / 12.0


@dataclass(frozen=True, slots=True)
class X:
    """A value with the spreadsheet formula that computes it."""

    value: float
    text: str

    def _op(self, other: X | float, op: str) -> X:
        o = other if isinstance(other, X) else X(float(other), repr(float(other)))
        value = {"+": self.value + o.value, "-": self.value - o.value, "*": self.value * o.value}
        if op == "/":
            result = self.value / o.value if o.value else 0.0
            return X(result, f"IF({o.text}=0,0,{self.text}/{o.text})")
        return X(value[op], f"({self.text}{op}{o.text})")

    def __add__(self, other: X | float) -> X:
        return self._op(other, "+")

    def __sub__(self, other: X | float) -> X:
        return self._op(other, "-")

    def __mul__(self, other: X | float) -> X:
        return self._op(other, "*")

    def __truediv__(self, other: X | float) -> X:
        return self._op(other, "/")


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    value: float | str | None  # None: a heading; a str: a formula's text result ("never")
    formula: str | None  # None: an input
    unit: str
    note: str = ""
    key: str = ""  # what the row is (for tests and the CSV): e.g. "cost.usd_per_hour"


@dataclass
class Sheet:
    rows: list[Row] = field(default_factory=list)
    first_row: int = 3  # rows 1-2: title and header

    def _cell(self) -> str:
        return f"B{self.first_row + len(self.rows)}"

    def heading(self, text: str) -> None:
        self.rows.append(Row(text, None, None, ""))

    def input(self, label: str, value: float, unit: str, note: str, key: str = "") -> X:
        ref = self._cell()
        self.rows.append(Row(label, float(value), None, unit, note, key))
        return X(float(value), ref)

    def calc(self, label: str, expr: X, unit: str, key: str = "", note: str = "") -> X:
        ref = self._cell()
        self.rows.append(Row(label, expr.value, "=" + expr.text, unit, note, key))
        return X(expr.value, ref)

    def breakeven(self, capex: X, saving: X, key: str) -> None:
        """Months until owning beats the API: capex / (API - power, ops, rent), and "never"
        where that saving is not positive (as plan.json's `breakeven_months` is null): a
        division would print 0 months at no saving and negative months at a loss."""
        never = saving.value <= 0
        self.rows.append(
            Row(
                "break-even",
                "never" if never else capex.value / saving.value,
                f'=IF({saving.text}<=0,"never",{capex.text}/{saving.text})',
                "months",
                "capex / (API - power, ops, rent); never when the API costs no more than those",
                key,
            )
        )


def _hardware(sheet: Sheet, plan: Mapping[str, Any], blank_prices: bool) -> tuple[X, X, X]:
    """Node inputs and costs; returns (stack $/h, capex $, opex $/h)."""
    stack, capex_total, opex = X(0.0, "0"), X(0.0, "0"), X(0.0, "0")
    used = {h["gpu"]: h for h in plan.get("hardware") or []}
    for i, offer in enumerate(plan["requirements"]["hardware"]):
        if offer["gpu"] not in used:
            continue

        def price(value: Any) -> float:
            return 0.0 if blank_prices else float(value or 0.0)

        src = f"plan.json requirements.hardware[{i}]"
        sheet.heading(f"Inputs: {offer['gpu']} ({offer['pricing']})")
        nodes = sheet.input("nodes", used[offer["gpu"]]["nodes"], "nodes", "plan.json hardware")
        if offer["pricing"] == "hourly":
            gpus = sheet.input(
                "GPUs rented", used[offer["gpu"]]["gpus_used"], "GPUs", "plan.json hardware"
            )
            rent = sheet.input(
                "rent per GPU-hour", price(offer["usd_per_gpu_hour"]), "$/GPU-h", src
            )
            rent_h = sheet.calc("rent $/h", gpus * rent, "$/h")
            stack = stack + rent_h
            opex = opex + rent_h
            continue
        capex = sheet.input("capex per node", price(offer["capex_usd_per_node"]), "$", src)
        years = sheet.input("amortization", offer["amortization_years"], "years", src)
        kw = sheet.input("power per node (peak)", offer["effective_power_kw_per_node"], "kW", src)
        frac = sheet.input("average draw / peak", offer["avg_power_fraction"], "", src)
        pue = sheet.input("PUE", offer["pue"], "", src)
        kwh = sheet.input("electricity", price(offer["usd_per_kwh"]), "$/kWh", src)
        ops = sheet.input("ops per node-year", price(offer["ops_usd_per_node_year"]), "$/y", src)
        sheet.heading(f"Node cost: {offer['gpu']}")
        c = sheet.calc("capex amortized", capex / (years * HOURS_PER_YEAR), "$/h")
        p = sheet.calc("power x PUE", kw * frac * pue * kwh, "$/h")
        o = sheet.calc("ops", ops / HOURS_PER_YEAR, "$/h")
        node = sheet.calc(
            "node all-in", c + p + o, "$/h", key=f"hardware.{offer['gpu']}.node_usd_per_hour"
        )
        stack = stack + node * nodes
        capex_total = capex_total + capex * nodes
        opex = opex + (p + o) * nodes
    return stack, capex_total, opex


def _workloads(
    sheet: Sheet, plan: Mapping[str, Any], stack_h: X, active_h: X, blank: bool
) -> dict[str, dict[str, X]]:
    out: dict[str, dict[str, X]] = {}
    total = float(plan["cost"]["usd_per_hour"]) or 1.0
    for name, w in plan["cost"]["workloads"].items():
        t = _workload_inputs(sheet, name, w, total, blank)
        usd = _workload_cost(sheet, name, t, stack_h, active_h)
        out[name] = {"in": t["in"], "cached": t["cached"], "out": t["out"], "usd_h": usd}
    return out


def _workload_inputs(
    sheet: Sheet, name: str, w: Mapping[str, Any], total: float, blank: bool
) -> dict[str, X]:
    """The workload's input block: its token and request rates at average load, and its shares
    of the stack's replica time and of its own time in prefill, from the planner."""
    load = w["at_average_load"]
    share = float(w["usd_per_hour"]) / total
    in_usd_h = (
        (w["usd_per_million_tokens"]["input"] or 0.0) * load["input_tokens_per_s"] * 3600 / 1e6
    )
    prefill = in_usd_h / float(w["usd_per_hour"]) if w["usd_per_hour"] else 0.0
    src = f"plan.json cost.workloads.{name}"
    zero = (lambda v: 0.0) if blank else float
    sheet.heading(f"Inputs: workload {name} (average load, active hours)")
    tin = sheet.input("input tokens/s", zero(load["input_tokens_per_s"]), "tok/s", src)
    tcached = sheet.input(
        "cached input tokens/s", zero(load["cached_input_tokens_per_s"]), "tok/s", src
    )
    tout = sheet.input("output tokens/s", zero(load["output_tokens_per_s"]), "tok/s", src)
    rps = sheet.input("requests/s", zero(load["requests_per_s"]), "req/s", src)
    sh = sheet.input(
        "share of the stack's replica time",
        zero(share),
        "",
        src + ".usd_per_hour / cost.usd_per_hour (planner)",
    )
    pf = sheet.input(
        "prefill share of its time",
        zero(prefill),
        "",
        src + " (planner: prefill vs decode time)",
    )
    return {"in": tin, "cached": tcached, "out": tout, "rps": rps, "share": sh, "prefill": pf}


def _workload_cost(sheet: Sheet, name: str, t: Mapping[str, X], stack_h: X, active_h: X) -> X:
    """The workload's cost block: its $/h share, $/1M and $/request; returns the $/h share."""
    tin, tout, rps, pf = t["in"], t["out"], t["rps"], t["prefill"]
    sheet.heading(f"Cost: workload {name}")
    usd = sheet.calc(
        "$/h share", stack_h * t["share"], "$/h", key=f"cost.workloads.{name}.usd_per_hour"
    )
    k = f"cost.workloads.{name}.usd_per_million_tokens"
    sheet.calc(
        "$/1M tokens, blended", usd / ((tin + tout) * 3600.0) * 1e6, "$/1M", key=f"{k}.blended"
    )
    sheet.calc("$/1M input tokens", usd * pf / (tin * 3600.0) * 1e6, "$/1M", key=f"{k}.input")
    sheet.calc(
        "$/1M output tokens",
        (usd - usd * pf) / (tout * 3600.0) * 1e6,
        "$/1M",
        key=f"{k}.output",
    )
    sheet.calc(
        "$/request at load",
        usd / (rps * 3600.0),
        "$",
        key=f"cost.workloads.{name}.usd_per_request",
    )
    # NOTE: the stack is paid for every hour of the month, requests come in the active ones.
    sheet.calc(
        "$/request with idle hours",
        usd * HOURS_PER_MONTH / (rps * 3600.0 * active_h),
        "$",
        key=f"cost.workloads.{name}.usd_per_request_with_idle_hours",
    )
    sheet.calc(
        "$/1M tokens with idle hours",
        usd * HOURS_PER_MONTH / ((tin + tout) * 3600.0 * active_h) * 1e6,
        "$/1M",
        key=f"cost.workloads.{name}.usd_per_million_tokens_with_idle_hours",
    )
    return usd


def build_sheet(plan: Mapping[str, Any], *, blank_prices: bool = False) -> Sheet:
    """The sheet; `blank_prices` (the public template) zeroes every price and every figure of
    the customer's traffic: the duty cycle, the token rates and the planner's shares of it."""
    sheet = Sheet()
    usage = plan["requirements"]["usage"]
    zero = (lambda v: 0.0) if blank_prices else float
    sheet.heading("Inputs: duty cycle")
    hpd = sheet.input(
        "active hours per day", zero(usage["active_hours_per_day"]), "h", "requirements usage"
    )
    dpm = sheet.input(
        "active days per month", zero(usage["active_days_per_month"]), "d", "requirements usage"
    )
    stack_h, capex, opex = _hardware(sheet, plan, blank_prices)
    sheet.heading("Stack")
    stack = sheet.calc("stack all-in", stack_h, "$/h", key="cost.usd_per_hour")
    month = sheet.calc(
        "stack per month (730 h)", stack * HOURS_PER_MONTH, "$/month", key="cost.usd_per_month"
    )
    active = sheet.calc(
        "active hours per month", hpd * dpm, "h", key="requirements.usage.active_hours_per_month"
    )
    tokens = _workloads(sheet, plan, stack, active, blank_prices)
    opex_m = sheet.calc("power + ops + rent per month", opex * HOURS_PER_MONTH, "$/month")
    capex_c = sheet.calc("capex", capex, "$", key="cost.capex_usd")
    for i, api in enumerate(plan["requirements"].get("api_prices") or []):
        prices = _api_prices(sheet, i, api, blank_prices)
        sheet.heading(f"Against API {api['name']}")
        spend = _api_spend(sheet, api["name"], prices, tokens, active)
        api_m = sheet.calc(
            "API spend per month", spend, "$/month", key=f"cost.api_usd_per_month.{api['name']}"
        )
        sheet.breakeven(capex_c, api_m - opex_m, key=f"cost.breakeven_months.{api['name']}")
        sheet.calc("API / stack per month", api_m / month, "x", key=f"multiple.{api['name']}")
    return sheet


def _api_prices(sheet: Sheet, i: int, api: Mapping[str, Any], blank: bool) -> tuple[X, X, X]:
    """The API's input block: its input, cached input and output prices per 1M tokens."""
    src = f"plan.json requirements.api_prices[{i}]"
    zero = (lambda v: 0.0) if blank else float
    sheet.heading(f"Inputs: API {api['name']}")
    pin = sheet.input("input", zero(api["input_usd_per_million"]), "$/1M", src)
    cached_price = api.get("cached_input_usd_per_million")
    pc = sheet.input(
        "cached input",
        zero(cached_price if cached_price is not None else api["input_usd_per_million"]),
        "$/1M",
        src + ("" if cached_price is not None else " (no cached price: the input price)"),
    )
    pout = sheet.input("output", zero(api["output_usd_per_million"]), "$/1M", src)
    return pin, pc, pout


def _api_spend(
    sheet: Sheet,
    api: str,
    prices: tuple[X, X, X],
    tokens: Mapping[str, Mapping[str, X]],
    active: X,
) -> X:
    """Per workload, the API's price of its month of tokens, per 1M and as a multiple of its
    stack share; returns the API's spend over every workload."""
    pin, pc, pout = prices
    spend = X(0.0, "0")
    for name, t in tokens.items():
        per_s = (t["in"] - t["cached"]) * pin + t["cached"] * pc + t["out"] * pout
        mine = sheet.calc(
            f"{name}: API spend per month",
            per_s * 3600.0 * active / 1e6,
            "$/month",
            key=f"cost.workloads.{name}.api_usd_per_month.{api}",
        )
        sheet.calc(
            f"{name}: API $/1M tokens (the same tokens)",
            mine / ((t["in"] + t["out"]) * 3600.0 * active) * 1e6,
            "$/1M",
        )
        sheet.calc(
            f"{name}: API / its stack share per month",
            mine / (t["usd_h"] * HOURS_PER_MONTH),
            "x",
        )
        spend = spend + mine
    return spend


def to_csv(sheet: Sheet) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["row", "label", "value", "unit", "formula", "key", "note"])
    for i, row in enumerate(sheet.rows):
        value = (
            ""
            if row.value is None
            else row.value
            if isinstance(row.value, str)
            else repr(row.value)
        )
        writer.writerow(
            [sheet.first_row + i, row.label, value, row.unit, row.formula or "", row.key, row.note]
        )
    return buffer.getvalue()


def to_xlsx(sheet: Sheet, title: str) -> bytes:
    from openpyxl import Workbook
    from openpyxl.styles import Font

    book = Workbook()
    ws = book.active
    ws.title = "cost"
    ws["A1"] = title
    ws["A1"].font = Font(bold=True, size=13)
    for col, text in enumerate(("item", "value", "unit", "source / note"), start=1):
        ws.cell(2, col, text).font = Font(bold=True)
    for i, row in enumerate(sheet.rows):
        r = sheet.first_row + i
        ws.cell(r, 1, row.label)
        if row.value is None:
            ws.cell(r, 1).font = Font(bold=True)
            continue
        ws.cell(r, 2, row.formula if row.formula else row.value)
        ws.cell(r, 3, row.unit)
        ws.cell(r, 4, row.note or row.key)
    for letter, width in (("A", 38), ("B", 18), ("C", 10), ("D", 70)):
        ws.column_dimensions[letter].width = width
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()
