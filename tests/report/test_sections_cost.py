"""Section 7: the per-token cost a reader sets beside an API's price is the one the month pays
for, idle hours included, and the rate while traffic flows is labelled as such."""

from __future__ import annotations

from inhouse.report.document import build_document
from inhouse.report.figures import format_value
from inhouse.report.inputs import ReportInputs


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
