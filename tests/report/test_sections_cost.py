"""Section 7: the per-token cost a reader sets beside an API's price is the one the month pays
for, idle hours included, and the rate while traffic flows is labelled as such."""

from __future__ import annotations

import copy
from dataclasses import replace

from inhouse.report.document import build_document
from inhouse.report.figures import format_value
from inhouse.report.inputs import Doc, ReportInputs


def test_the_month_s_cost_per_token_counts_the_idle_hours(inputs: ReportInputs) -> None:
    """The table's $/1M is the stack's $/h over the tokens of an active hour; the stack is paid
    for every hour of the month. Beside the API's monthly multiple (idle hours counted), it
    read a duty cycle's factor cheaper than the month's bill over the month's tokens."""
    cost = inputs.plan.get("cost")
    active, hours = cost["active_hours_per_month"], cost["hours_per_month"]
    assert active < hours  # the example's customer works business hours
    effective = cost["effective_usd_per_million_tokens_with_idle_hours"]
    assert effective > cost["usd_per_million_tokens_blended_all"]
    section = build_document(inputs).markdown.split("## 7. Cost model")[1].split("\n## ")[0]
    assert "$/1M blended while traffic flows" in section
    assert (
        f"Over the month, idle hours included: {format_value(effective, 'usd', 3)} per 1M "
        "tokens, every workload blended" in section
    )


def test_each_workload_has_its_month_s_cost_per_token_against_each_api(
    inputs: ReportInputs,
) -> None:
    """The seeds ask $ per 1M tokens per workload, and against API prices; the month's figure
    (idle hours included) was given blended over every workload only, and the APIs per month
    for the whole stack: a chat workload's tokens and a utility's priced alike."""
    cost = inputs.plan.get("cost")
    section = build_document(inputs).markdown.split("## 7. Cost model")[1].split("\n## ")[0]
    table = section.split("| workload | $/1M over the month |")[1].split("\n\n")[0]
    for name, w in cost["workloads"].items():
        line = next(x for x in table.splitlines() if x.startswith(f"| {name} |"))
        month = w["usd_per_million_tokens_with_idle_hours"]
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[1] == format_value(month, "usd", 3), line
        tokens = w["per_month"]["input_tokens"] + w["per_month"]["output_tokens"]
        for i, (api, spend) in enumerate(w["api_usd_per_month"].items()):
            per_million = spend / tokens * 1e6
            multiple = spend / (w["usd_per_hour"] * cost["hours_per_month"])
            assert cells[2 + i] == (
                f"{format_value(per_million, 'usd', 3)} ({format_value(multiple, 'x')} the stack's)"
            ), (api, line)


def test_the_per_workload_month_table_without_an_api_has_as_many_header_cells_as_columns(
    inputs: ReportInputs,
) -> None:
    """A plan priced against no API: the table is the workload and its month's $/1M, its
    header as wide as its delimiter row (GitHub's Markdown renders no table where they
    differ)."""
    plan = copy.deepcopy(inputs.plan.data)
    plan["cost"].pop("api_usd_per_month", None)
    for w in plan["cost"]["workloads"].values():
        w.pop("api_usd_per_month", None)
    changed = replace(inputs, plan=Doc(inputs.plan.name, plan))
    section = build_document(changed).markdown.split("## 7. Cost model")[1].split("\n## ")[0]
    lines = section.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("| workload | $/1M over the month |"))
    header, separator = lines[at], lines[at + 1]
    assert header == "| workload | $/1M over the month |"
    assert separator == "|---|---|"
