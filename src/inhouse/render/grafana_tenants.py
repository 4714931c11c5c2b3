"""The business/tenant dashboard: requests, tokens, cost and SLA adherence per tenant."""

from __future__ import annotations

from inhouse.render.grafana import (
    RATE,
    Board,
    Panel,
    hist,
    le_label,
    panel,
    query_variable,
    rate_sum,
)
from inhouse.render.grafana_cost import ttft_bound_s, usd_per_hour_variable
from inhouse.render.layout import EngineLayout
from inhouse.spec.stack import StackSpec

TENANT = 'tenant=~"$tenant"'


def tenant_board(stack: StackSpec, engines: EngineLayout) -> Board:
    board = Board(
        "tenants",
        "Tenants and business",
        "Requests, tokens, cost and SLA adherence per tenant, from the gateway. Cost splits the "
        "plan's all-in usd_per_hour by each tenant's share of tokens.",
        variables=[
            query_variable(
                "tenant", "Tenant", "label_values(inhouse_gateway_requests_total, tenant)"
            ),
            usd_per_hour_variable(stack),
        ],
    )
    tokens = f"sum by (tenant) (increase(inhouse_gateway_tokens_total{{{TENANT}}}[$__range]))"
    all_tokens = "scalar(sum(increase(inhouse_gateway_tokens_total[$__range])))"
    requests = rate_sum("inhouse_gateway_requests_total", TENANT, "tenant")
    board.sections.append(
        (
            "Usage",
            [
                panel("Requests per tenant", "Per second.", (requests, "{{tenant}}"),
                      unit="reqps"),
                panel("Tokens per tenant", "Prompt and completion tokens per second.",
                      (rate_sum("inhouse_gateway_tokens_total", TENANT, "tenant, kind"),
                       "{{tenant}} {{kind}}")),
                panel("Tokens in range", "Tokens billed over the dashboard's time range.",
                      (tokens, "{{tenant}}"), kind="bargauge"),
                panel("Cost in range (USD)", "usd_per_hour x hours of the range x the "
                      "tenant's share of tokens.",
                      (f"$usd_per_hour * $__range_s / 3600 * {tokens} / {all_tokens}",
                       "{{tenant}}"), unit="currencyUSD", kind="bargauge"),
            ],
        )
    )  # fmt: skip
    board.sections.append(("SLA adherence per tenant", sla_panels(stack, engines)))
    board.sections.append(
        (
            "Service per tenant",
            [
                panel("TTFT p95 per tenant", "As the gateway measures it.",
                      (hist("0.95", "inhouse_gateway_ttft_seconds", TENANT, "tenant"),
                       "{{tenant}}"), unit="s"),
                panel("Rejections", "Refused at the gateway: limits, budgets, long prompts.",
                      (rate_sum("inhouse_gateway_rejections_total", TENANT, "tenant, reason"),
                       "{{tenant}} {{reason}}"), unit="reqps"),
                panel("Gateway queue", "Admitted requests waiting for a replica, per pool.",
                      ("sum by (pool) (inhouse_gateway_queue_depth)", "{{pool}}")),
                panel("Gateway event-loop lag p99", "How late each gateway process ran its "
                      "lag timer: what every request and chunk through it waits.",
                      ("histogram_quantile(0.99, sum by (pod, le) (rate("
                       f"inhouse_gateway_event_loop_lag_seconds_bucket[{RATE}])))", "{{pod}}"),
                      unit="s"),
            ],
        )
    )  # fmt: skip
    return board


def sla_panels(stack: StackSpec, engines: EngineLayout) -> list[Panel]:
    """Per pool: the share of each tenant's requests within the TTFT target (gateway
    histogram, the largest bucket within it), and the share without a 5xx."""
    ttft = []
    for pool in engines.pools:
        bound = ttft_bound_s(pool)
        if bound is None:
            continue
        sel = f'{TENANT},pool="{pool.name}"'
        bucket = f'{sel},le="{le_label(bound)}"'
        within = rate_sum("inhouse_gateway_ttft_seconds_bucket", bucket, "tenant", "$__range")
        everything = rate_sum("inhouse_gateway_ttft_seconds_count", sel, "tenant", "$__range")
        ttft.append((f"{within} / {everything}", f"{{{{tenant}}}} {pool.name}"))
    ok = rate_sum("inhouse_gateway_requests_total", f'{TENANT},code!~"5.."', "tenant", "$__range")
    everything = rate_sum("inhouse_gateway_requests_total", TENANT, "tenant", "$__range")
    panels = [
        panel("Availability", "Share of the tenant's responses without a 5xx (1 when none).",
              (f"{ok} / {everything}", "{{tenant}}"), unit="percentunit"),
    ]  # fmt: skip
    if ttft:
        panels.insert(0, panel("Within the TTFT target", "Share of the tenant's requests whose "
                               "first token came within the pool's target, over the range.",
                               *ttft, unit="percentunit", threshold=0.95))  # fmt: skip
    return panels
