"""Error-budget burn (Google SRE workbook multiwindow burn rates: 14.4x over 1 h and 5 m pages,
6x over 6 h and 30 m files a ticket), from the gateway's `inhouse_gateway_requests_total`: per
workload by the requested `model` where the stack names its workloads, else per pool. Attached
(`url`) pools are covered too: the gateway counts every answer. The page also needs
`MIN_FAILED_TO_PAGE` failed requests in its hour, so a handful of 5xx at night does not page.
"""

from __future__ import annotations

from collections.abc import Mapping

from inhouse.metric_names import replica_label
from inhouse.render.alerts import Alert, Case, Recording, RunbookEntry, Series
from inhouse.render.layout import slo_of
from inhouse.spec.stack import PoolSpec, StackSpec

BURN_WINDOWS = ("5m", "30m", "1h", "6h")
GROUP = "inhouse-slo"
METRIC = "inhouse_gateway_requests_total"
MIN_FAILED_TO_PAGE = 10  # see the NOTE below
# (name, budget factor, long window, short window, for, severity, promtool eval time, fewest
# failed requests in the long window)
BURNS = (
    ("InhouseErrorBudgetBurnFast", 14.4, "1h", "5m", "2m", "page", "10m", MIN_FAILED_TO_PAGE),
    ("InhouseErrorBudgetBurnSlow", 6.0, "6h", "30m", "15m", "ticket", "20m", 0),
)
# NOTE: the page also needs 10 failed requests in its hour. At night a pool may see a few dozen
# requests an hour, where 3 failures are a 15% error ratio, ten times the 1.44% a 99.9% SLO
# pages at: without a floor a handful of 5xx wakes someone. A floor on failures rather than on
# traffic: a request floor high enough to mute 3 failures (3 / 1.44% = 209 an hour) would mute
# a total outage of a quiet pool too, while a pool down at even one request a minute reaches 10
# failures in 10 minutes. The ticket keeps no floor: it waits for working hours anyway.


def _record(by: str, window: str) -> str:
    suffix = "" if by == "pool" else "_by_model"
    return f"inhouse:gateway_error_ratio{suffix}:rate{window}"


def burn_recordings(stack: StackSpec) -> list[Recording]:
    """Error ratios by pool (the dashboards read them) and, with workloads, by model. A pool or
    model that answered without a single 5xx records 0, not nothing (`or ... * 0`): no data
    would read as "unknown" on a dashboard and hide it from the ratio's own checks."""
    kinds = ("pool", "model") if stack.workloads else ("pool",)
    return [
        Recording(
            _record(by, window),
            GROUP,
            f'(sum by ({by}) (rate({METRIC}{{code=~"5.."}}[{window}]))\n'
            f"or sum by ({by}) (rate({METRIC}[{window}])) * 0)\n"
            f"/\nsum by ({by}) (rate({METRIC}[{window}]))",
        )
        for by in kinds
        for window in BURN_WINDOWS
    ]


def burn_alerts(
    *,
    by: str,
    value: str,
    availability: float,
    series_labels: Mapping[str, str],
    labels: Mapping[str, str],
    scope: str,
    source: str,
) -> list[Alert]:
    budget = 1 - availability

    def series(errors: str, ok: str = "0+100x30") -> tuple[Series, ...]:
        return (
            Series({**series_labels, "code": "200"}, ok, METRIC),
            Series({**series_labels, "code": "500"}, errors, METRIC),
        )

    alerts = []
    for name, factor, long, short, hold, severity, at, min_failed in BURNS:
        threshold = f"{factor * budget:.6g}"
        sel = f'{{{by}="{value}"}}'
        expr = (
            f"{_record(by, long)}{sel} > {threshold}\nand\n{_record(by, short)}{sel} > {threshold}"
        )
        cases: tuple[Case, ...] = (
            Case("1 in 11 requests fails", "1m", series("0+10x30"), at, {by: value}),
            Case("no failures", "1m", series("0x30"), at, None),
        )
        if min_failed:
            failed = f'{METRIC}{{{by}="{value}", code=~"5.."}}'
            expr += f"\nand\nsum by ({by}) (increase({failed}[{long}])) >= {min_failed}"
            # A request every 3 minutes, three of them failing: a high ratio, few failures.
            quiet_night = series("0x25 1 2 3x13", ok="0+0.33x40")
            cases += (Case("three failures in a quiet hour", "1m", quiet_night, "31m", None),)
        alerts.append(
            Alert(
                name=name,
                group=GROUP,
                expr=expr,
                hold=hold,
                severity=severity,  # type: ignore[arg-type]
                labels=dict(labels),
                summary=f"{scope} spends its error budget {factor:g}x too fast",
                description=(
                    f"5xx share over {long} and {short} above {threshold} ({factor:g} x the "
                    f"{budget:.4g} budget of a {availability:g} availability SLO)."
                ),
                runbook=_burn_runbook(factor, long),
                cases=cases,
                threshold_source=f"{source}; {factor:g}x the budget over {long} and {short} "
                "(SRE workbook multiwindow burn rate)"
                + (f", at least {min_failed} failed requests over {long}" if min_failed else ""),
            )
        )
    return alerts


def pool_burn_alerts(pool: PoolSpec) -> list[Alert]:
    source = f"stack pools[{pool.name}].slo.availability" if pool.slo else "render's default SLO"
    labels = {"tenant": "acme", "model": pool.client_model_name, "pool": pool.name}
    return burn_alerts(
        by="pool",
        value=pool.name,
        availability=slo_of(pool).availability,
        series_labels={**labels, "replica": replica_label(0)},
        labels={"pool": pool.name},
        scope=f"pool {pool.name}",
        source=source,
    )


def stack_burn_alerts(stack: StackSpec) -> list[Alert]:
    if not stack.workloads:
        return [a for pool in stack.pools for a in pool_burn_alerts(pool)]
    alerts = []
    for workload in stack.workloads:
        pool = stack.pool_of_workload(workload)
        labels = {"tenant": "acme", "model": workload.model, "pool": pool.name}
        alerts += burn_alerts(
            by="model",
            value=workload.model,
            availability=workload.slo.availability,
            series_labels={**labels, "replica": replica_label(0)},
            labels={"pool": pool.name, "workload": workload.name},
            scope=f"workload {workload.name} (model {workload.model})",
            source=f"stack workloads[{workload.name}].slo.availability",
        )
    return alerts


def _burn_runbook(factor: float, window: str) -> RunbookEntry:
    return RunbookEntry(
        meaning=f"The share of gateway responses with a 5xx status is {factor:g} times what the "
        f"availability SLO allows, over {window} and recently: at this rate the monthly "
        "budget is gone in days (fast) or weeks (slow).",
        first_promql=f'sum by (model, pool, replica, code) (rate({METRIC}{{code=~"5.."}}[5m]))',
        mitigations=(
            "Errors from one replica: drain it; the gateway retries elsewhere.",
            "503 from every replica: engines full or draining; check replica health and queue.",
            "500 'cannot schedule new futures after shutdown': requests reached an engine during "
            "its drain; check the preStop sleep covers the gateway's discovery interval.",
        ),
        escalate="Fast burn for 30 minutes, or any burn with no replica-level cause: page the "
        "platform owner; consider freezing deploys until the budget recovers.",
    )
