"""SLO alerts per pool: p95 TTFT, ITL and e2e over the alarm for five minutes, and error-budget
burn (Google SRE workbook multiwindow burn rates: 14.4x over 1 h and 5 m pages, 6x over 6 h and
30 m files a ticket). Latency comes from vLLM's histograms by `model_name`; errors from the
gateway's `inhouse_gateway_requests_total` by `pool`.
"""

from __future__ import annotations

from inhouse.errors import SpecError
from inhouse.render.alerts import Alert, Case, Recording, RunbookEntry, Series
from inhouse.render.layout import engine_pools, slo_of
from inhouse.render.metric_names import E2E_BUCKETS_S
from inhouse.spec.stack import PoolSpec, StackSpec
from inhouse.spec.vllm_buckets import ITL_BUCKETS_S, TTFT_BUCKETS_S

# (key, vLLM histogram, buckets, what it measures)
LATENCIES = (
    ("ttft", "vllm:time_to_first_token_seconds", TTFT_BUCKETS_S, "time to first token"),
    ("itl", "vllm:inter_token_latency_seconds", ITL_BUCKETS_S, "inter-token latency"),
    ("e2e", "vllm:e2e_request_latency_seconds", E2E_BUCKETS_S, "end-to-end latency"),
)
BURN_WINDOWS = ("5m", "30m", "1h", "6h")
GROUP = "inhouse-slo"


def engine_labels(pool: PoolSpec, replica: int = 0) -> dict[str, str]:
    """Labels of a vLLM series as Prometheus stores it after a ServiceMonitor scrape."""
    return {
        "model_name": pool.client_model_name,
        "engine": "0",
        "namespace": "ns",
        "job": f"{pool.name}-engine",
        "instance": f"10.0.0.{replica + 1}:8000",
        "pod": f"{pool.name}-r{replica}",
    }


def latency_recordings() -> list[Recording]:
    return [
        Recording(
            f"inhouse:{metric.removeprefix('vllm:')}:p95_5m",
            GROUP,
            f"histogram_quantile(0.95, sum by (le, model_name) (rate({metric}_bucket[5m])))",
        )
        for _, metric, _, _ in LATENCIES
    ]


def burn_recordings() -> list[Recording]:
    return [
        Recording(
            f"inhouse:gateway_error_ratio:rate{window}",
            GROUP,
            f'sum by (pool) (rate(inhouse_gateway_requests_total{{code=~"5.."}}[{window}]))\n'
            f"/\nsum by (pool) (rate(inhouse_gateway_requests_total[{window}]))",
        )
        for window in BURN_WINDOWS
    ]


def _le(bound: float) -> str:
    return str(float(bound))


def latency_cases(
    pool: PoolSpec, metric: str, buckets: tuple[float, ...], alarm_s: float
) -> tuple[Case, ...]:
    """Fire: every observation in the bucket just above the alarm, so the p95 interpolates above
    it. Silent: every observation at or below the alarm's bucket."""
    above = [b for b in buckets if b >= alarm_s]
    below = [b for b in buckets if b <= alarm_s]
    if len(above) < 2 or not below:
        raise SpecError(
            f"pool {pool.name!r}: an alarm of {alarm_s * 1000:g} ms for {metric} is outside "
            f"vLLM's histogram buckets ({buckets[0]:g}..{buckets[-1]:g} s); pick one inside"
        )
    base = engine_labels(pool)

    def bucket(le: str, values: str) -> Series:
        return Series({**base, "le": le}, values, f"{metric}_bucket")

    fire = (
        bucket(_le(above[0]), "0x60"),
        bucket(_le(above[1]), "0+10x60"),
        bucket("+Inf", "0+10x60"),
    )
    quiet = (bucket(_le(below[-1]), "0+10x60"), bucket("+Inf", "0+10x60"))
    expect = {"model_name": pool.client_model_name}
    return (
        Case("p95 above the alarm for 10 minutes", "15s", fire, "10m", expect),
        Case("p95 below the alarm", "15s", quiet, "10m", None),
    )


def latency_alert(
    pool: PoolSpec, key: str, metric: str, buckets: tuple[float, ...], what: str
) -> Alert | None:
    slo = slo_of(pool)
    alarm_ms = slo.alarm_ms(key)  # type: ignore[arg-type]
    if alarm_ms is None:
        return None
    target_ms = getattr(slo, f"{key}_p95_ms")
    alarm_s = alarm_ms / 1000
    record = f"inhouse:{metric.removeprefix('vllm:')}:p95_5m"
    target = f"target {target_ms:g} ms, " if target_ms is not None else ""
    name = {"ttft": "InhouseTTFTP95OverSLO", "itl": "InhouseITLP95OverSLO"}.get(
        key, "InhouseE2EP95OverSLO"
    )
    return Alert(
        name=name,
        group=GROUP,
        expr=f'{record}{{model_name="{pool.client_model_name}"}} > {alarm_s:g}',
        hold="5m",
        severity="page",
        labels={"pool": pool.name},
        summary=f"p95 {what} of {{{{ $labels.model_name }}}} above {alarm_ms:g} ms for 5 minutes",
        description=(
            f"Pool {pool.name}: SLO {target}alarm {alarm_ms:g} ms. Users of this model "
            "see slow responses now."
        ),
        runbook=_latency_runbook(key, metric, what),
        cases=latency_cases(pool, metric, buckets, alarm_s),
    )


def _latency_runbook(key: str, metric: str, what: str) -> RunbookEntry:
    causes = {
        "ttft": "queueing (waiting requests), long prefills, a cold prefix cache or a lost replica",
        "itl": "batches too large for the GPU (max_num_seqs), preemptions, or prefills stalling "
        "decodes (chunked prefill off or a large token budget)",
        "e2e": "long outputs, queueing or slow decode",
    }[key]
    return RunbookEntry(
        meaning=f"The 5-minute p95 {what} of a pool has been above its alarm for 5 minutes. "
        f"Usual causes: {causes}.",
        first_promql=f"histogram_quantile(0.95, sum by (le, pod) (rate({metric}_bucket[5m])))",
        mitigations=(
            "One pod much worse than the rest: drain it (`kubectl delete pod`) and check its GPU "
            "(hardware dashboard).",
            "All pods and `vllm:num_requests_waiting` high: load beyond capacity; shed or "
            "deprioritize batch tenants at the gateway, add a replica (multi-node: raise KEDA's "
            "maxReplicaCount), or run the degraded-mode plan.",
            "Prefix hit rate dropped at the same time: see InhousePrefixHitRateLow.",
            "Preemptions rising: see InhousePreemptionsSustained (KV pressure).",
        ),
        escalate="Not back under the alarm 30 minutes after mitigation, or a replica is lost "
        "with no spare GPUs: escalate to the platform owner and tell the customer's contact "
        "the degraded-mode SLO is in force.",
    )


def burn_alerts(pool: PoolSpec) -> list[Alert]:
    budget = 1 - slo_of(pool).availability
    labels = {"tenant": "acme", "model": pool.client_model_name, "pool": pool.name}
    replica = {**labels, "replica": f"{pool.name}-r0"}

    def series(errors: str) -> tuple[Series, ...]:
        metric = "inhouse_gateway_requests_total"
        return (
            Series({**replica, "code": "200"}, "0+100x30", metric),
            Series({**replica, "code": "500"}, errors, metric),
        )

    expect = {"pool": pool.name}
    alerts = []
    for name, factor, long, short, hold, severity, at in (
        ("InhouseErrorBudgetBurnFast", 14.4, "1h", "5m", "2m", "page", "10m"),
        ("InhouseErrorBudgetBurnSlow", 6.0, "6h", "30m", "15m", "ticket", "20m"),
    ):
        threshold = f"{factor * budget:.6g}"
        sel = f'{{pool="{pool.name}"}}'
        alerts.append(
            Alert(
                name=name,
                group=GROUP,
                expr=(
                    f"inhouse:gateway_error_ratio:rate{long}{sel} > {threshold}\n"
                    f"and\ninhouse:gateway_error_ratio:rate{short}{sel} > {threshold}"
                ),
                hold=hold,
                severity=severity,  # type: ignore[arg-type]
                labels={"pool": pool.name},
                summary=f"pool {{{{ $labels.pool }}}} spends its error budget {factor:g}x too fast",
                description=(
                    f"5xx share over {long} and {short} above {threshold} ({factor:g} x the "
                    f"{budget:.4g} budget of a {slo_of(pool).availability:g} availability SLO)."
                ),
                runbook=_burn_runbook(factor, long),
                cases=(
                    Case("1 in 11 requests fails", "1m", series("0+10x30"), at, expect),
                    Case("no failures", "1m", series("0x30"), at, None),
                ),
            )
        )
    return alerts


def _burn_runbook(factor: float, window: str) -> RunbookEntry:
    return RunbookEntry(
        meaning=f"The share of gateway responses with a 5xx status is {factor:g} times what the "
        f"pool's availability SLO allows, over {window} and recently: at this rate the monthly "
        "budget is gone in days (fast) or weeks (slow).",
        first_promql="sum by (pool, replica, code) "
        '(rate(inhouse_gateway_requests_total{code=~"5.."}[5m]))',
        mitigations=(
            "Errors from one replica: drain it; the gateway retries elsewhere.",
            "503 from every replica: engines full or draining; check replica health and queue.",
            "500 'cannot schedule new futures after shutdown': requests reached an engine during "
            "its drain; check the preStop sleep covers the gateway's discovery interval.",
        ),
        escalate="Fast burn for 30 minutes, or any burn with no replica-level cause: page the "
        "platform owner; consider freezing deploys until the budget recovers.",
    )


def slo_rules(stack: StackSpec) -> tuple[list[Recording], list[Alert]]:
    alerts: list[Alert] = []
    for pool in engine_pools(stack):
        for key, metric, buckets, what in LATENCIES:
            alert = latency_alert(pool, key, metric, buckets, what)
            if alert is not None:
                alerts.append(alert)
    for pool in stack.pools:  # the gateway's errors cover attached (url) pools too
        alerts += burn_alerts(pool)
    return latency_recordings() + burn_recordings(), alerts
