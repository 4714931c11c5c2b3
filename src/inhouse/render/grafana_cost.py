"""Cost and SLO: dollars per 1M tokens from the plan's own all-in $/hour, per pool and per
tenant, and the error budget's burn over 1 h, 6 h and 7 days.

Cost is the stack's `observability.usd_per_hour` (what `inhouse plan` computed: hardware
amortization, power, operations) divided over the tokens the gateway served; a pool's share is
its GPUs' share of the stack's. Idle capacity is paid for too, so the figure falls as traffic
grows: that is the point of sizing.
"""

from __future__ import annotations

from inhouse.render.grafana import RATE, Board, Panel, le_label, panel, rate_sum, textbox
from inhouse.render.layout import EngineLayout, slo_of
from inhouse.spec.stack import PoolSpec, StackSpec
from inhouse.spec.vllm_buckets import TTFT_BUCKETS_S

TOKENS = "inhouse_gateway_tokens_total"
REQUESTS = "inhouse_gateway_requests_total"
BURN_WINDOWS = ("1h", "6h", "7d")
USD = "$usd_per_hour"


def usd_per_hour_variable(stack: StackSpec) -> dict[str, object]:
    figure = stack.observability.usd_per_hour
    return textbox(
        "usd_per_hour",
        "USD per hour (all-in)",
        f"{figure:g}" if figure is not None else "0",
        "The stack's all-in cost per hour from the plan (observability.usd_per_hour); "
        "0 when the stack file has none: set it from your cost sheet.",
    )


def ttft_bound_s(pool: PoolSpec) -> float | None:
    """The largest TTFT bucket bound at or under the pool's TTFT target (requests in it surely
    met it); None when the pool states no TTFT target or it is under the first bucket."""
    target_ms = slo_of(pool).ttft_p95_ms
    if target_ms is None:
        return None
    bounds = [b for b in TTFT_BUCKETS_S if b <= target_ms / 1000 + 1e-12]
    return max(bounds) if bounds else None


def model_regex(pool: PoolSpec) -> str:
    return "|".join(pool.model_names)


def pool_share(engines: EngineLayout, pool: PoolSpec) -> float:
    gpus = {p.name: p.tp * p.replicas for p in engines.pools}
    return gpus[pool.name] / sum(gpus.values())


def cost_board(stack: StackSpec, engines: EngineLayout) -> Board:
    board = Board(
        "cost",
        "Cost and SLO",
        "Dollars per 1M tokens from the plan's all-in $/hour, per pool and tenant; error "
        "budget burn over 1 h, 6 h and 7 days (1 = spending exactly the budget).",
        variables=[usd_per_hour_variable(stack)],
    )
    all_tokens = rate_sum(TOKENS)
    per_pool = []
    for pool in engines.pools:
        tokens = rate_sum(TOKENS, f'model=~"{model_regex(pool)}"')
        share = pool_share(engines, pool)
        per_pool.append((f"{USD} * {share:.4g} / ({tokens} * 3600) * 1e6", pool.name))
    tenant_share = f"sum by (tenant) (rate({TOKENS}[{RATE}])) / scalar({all_tokens})"
    in_range = f"increase({TOKENS}[$__range])"
    range_share = f"sum by (tenant) ({in_range}) / scalar(sum({in_range}))"
    board.sections.append(
        (
            "Cost",
            [
                panel("$ per 1M tokens (all-in)", "The stack's $/hour over the tokens served "
                      "per hour, prompt and completion.",
                      (f"{USD} / ({all_tokens} * 3600) * 1e6", "stack"), *per_pool,
                      unit="currencyUSD"),
                panel("$ per hour by tenant", "The stack's $/hour split by each tenant's share "
                      "of tokens.", (f"{USD} * {tenant_share}", "{{tenant}}"),
                      unit="currencyUSD"),
                panel("Cost in range by tenant", "$/hour x hours of the range x the tenant's "
                      "token share.",
                      (f"{USD} * $__range_s / 3600 * {range_share}", "{{tenant}}"),
                      unit="currencyUSD", kind="bargauge"),
            ],
        )
    )  # fmt: skip
    for pool in engines.pools:
        board.sections.append((f"SLO: pool {pool.name} ({pool.client_model_name})",
                               slo_panels(pool)))  # fmt: skip
    return board


def slo_panels(pool: PoolSpec) -> list[Panel]:
    slo = slo_of(pool)
    budget = 1 - slo.availability
    sel = f'pool="{pool.name}"'
    burns = tuple(
        (
            f'(1 - sum(increase({REQUESTS}{{{sel},code!~"5.."}}[{w}])) / '
            f"sum(increase({REQUESTS}{{{sel}}}[{w}]))) / {budget:g}",
            w,
        )
        for w in BURN_WINDOWS
    )
    burn = panel("Error budget burn", f"5xx share / budget ({budget:.4g}) over 1 h, 6 h, "
                 "7 d; above 1 the budget runs out before the SLO window ends.", *burns,
                 threshold=1)  # fmt: skip
    bound = ttft_bound_s(pool)
    if bound is None:
        return [burn]
    model = f'model_name="{pool.client_model_name}"'
    bucket = f'{model},le="{le_label(bound)}"'
    within = tuple(
        (
            f"sum(rate(vllm:time_to_first_token_seconds_bucket{{{bucket}}}[{w}])) / "
            f"sum(rate(vllm:time_to_first_token_seconds_count{{{model}}}[{w}]))",
            w,
        )
        for w in BURN_WINDOWS
    )
    return [
        burn,
        panel("Requests within the TTFT target", f"Share with TTFT <= {bound * 1000:g} ms "
              f"(the largest bucket within the {slo.ttft_p95_ms} ms target); the SLO wants "
              "0.95.", *within, unit="percentunit", threshold=0.95),
    ]  # fmt: skip
