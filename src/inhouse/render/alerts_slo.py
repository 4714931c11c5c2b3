"""SLO alerts: p95 TTFT, ITL and e2e over the alarm for five minutes, per workload where the
stack names its workloads (a plan's stack does), else per pool; error-budget burn in
`alerts_burn`.

Each workload's SLO is alerted on the series that carry that workload alone:

* TTFT and e2e from the gateway's histograms by `model`, the name the client sent (a pool's
  served name, alias or LoRA adapter): a utility workload served as adapters on the chat pool
  is held to its own 2 s e2e, and the chat turns, which run for seconds by design, are not.
  A workload whose long prompts have a TTFT of their own (`workloads[].slo.long_ttft_p95_ms`)
  and whose pool sends them to a `long_pool` gets one TTFT alert per pool, on the gateway's
  series by `model` and `pool`: its pool's share at `ttft_*`, the long pool's at `long_ttft_*`,
  and a fallback pool's (both lengths during a failover) at `long_ttft_*`.
  Without a long pool its one series of all prompts is held to the long target.
* ITL from vLLM's histogram by `model_name`, one alert per pool (`alerts_itl`): a fallback
  pool's during a failover too.

A stack without `workloads` keeps the per-pool alerts on vLLM's histograms (`pools[].slo`);
its attached (`url`) pools, whose engines render does not scrape, get TTFT and e2e alerts on the
gateway's histograms by `pool` (the gateway times every answer it relays). No inter-token
latency for them: the gateway does not measure it (`render_notes` says so).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from inhouse.errors import SpecError
from inhouse.metric_names import E2E_BUCKETS_S
from inhouse.render.alerts import Alert, Case, Recording, RunbookEntry, Series
from inhouse.render.layout import EngineLayout, replica_pod, slo_of
from inhouse.spec.slo import LatencyMetric, LatencySlo
from inhouse.spec.stack import PoolSpec, StackSpec
from inhouse.spec.vllm_buckets import ITL_BUCKETS_S, TTFT_BUCKETS_S
from inhouse.spec.workloads import WorkloadSpec

# (key, vLLM histogram, buckets, what it measures)
LATENCIES: tuple[tuple[LatencyMetric, str, tuple[float, ...], str], ...] = (
    ("ttft", "vllm:time_to_first_token_seconds", TTFT_BUCKETS_S, "time to first token"),
    ("itl", "vllm:inter_token_latency_seconds", ITL_BUCKETS_S, "inter-token latency"),
    ("e2e", "vllm:e2e_request_latency_seconds", E2E_BUCKETS_S, "end-to-end latency"),
)
# The gateway's histograms by requested model: what each workload's clients see.
GATEWAY_LATENCIES: dict[LatencyMetric, tuple[str, tuple[float, ...]]] = {
    "ttft": ("inhouse_gateway_ttft_seconds", TTFT_BUCKETS_S),
    "e2e": ("inhouse_gateway_e2e_seconds", E2E_BUCKETS_S),
}
WHAT = {key: what for key, _, _, what in LATENCIES}
ALERT_NAMES = {"ttft": "InhouseTTFTP95OverSLO", "itl": "InhouseITLP95OverSLO"}
GROUP = "inhouse-slo"


def engine_labels(pool: PoolSpec, replica: int = 0) -> dict[str, str]:
    """Labels of a vLLM series as Prometheus stores it after a ServiceMonitor scrape."""
    return {
        "model_name": pool.client_model_name,
        "engine": "0",
        "namespace": "ns",
        "job": f"{pool.name}-engine",
        "instance": f"10.0.0.{replica + 1}:8000",
        "pod": replica_pod(pool.name, replica),
    }


def gateway_labels(pool: PoolSpec, model: str) -> dict[str, str]:
    """Labels of a gateway series for one requested model, after a scrape."""
    return {
        "tenant": "acme",
        "model": model,
        "pool": pool.name,
        "namespace": "ns",
        "job": "gateway",
        "instance": "10.0.1.1:8000",
        "pod": "gateway-0",
    }


def p95_record(metric: str, by: str = "") -> str:
    """The recording of a histogram's 5-minute p95; `by` other than its usual grouping (e.g.
    `pool` for the gateway's histograms, grouped by `model` otherwise) goes in the name."""
    name = metric.removeprefix("vllm:").removeprefix("inhouse_")
    return f"inhouse:{name}{f'_by_{by}' if by else ''}:p95_5m"


def attached_pools(stack: StackSpec) -> list[PoolSpec]:
    """Pools whose engines run elsewhere (`engine: url`): render neither runs nor scrapes them."""
    return [pool for pool in stack.pools if stack.engine_of(pool) == "url"]


def latency_recordings(stack: StackSpec) -> list[Recording]:
    out = [
        Recording(
            p95_record(metric),
            GROUP,
            f"histogram_quantile(0.95, sum by (le, model_name) (rate({metric}_bucket[5m])))",
        )
        for _, metric, _, _ in LATENCIES
    ]
    if stack.workloads:
        out += [
            Recording(
                p95_record(metric),
                GROUP,
                f"histogram_quantile(0.95, sum by (le, model) (rate({metric}_bucket[5m])))",
            )
            for metric, _ in GATEWAY_LATENCIES.values()
        ]
        if any(long_pool_of(stack, w) for w in stack.workloads):
            metric, _ = GATEWAY_LATENCIES["ttft"]
            out.append(
                Recording(
                    p95_record(metric, "model_pool"),
                    GROUP,
                    "histogram_quantile(0.95, sum by (le, model, pool) "
                    f"(rate({metric}_bucket[5m])))",
                )
            )
    elif attached_pools(stack):
        out += [
            Recording(
                p95_record(metric, "pool"),
                GROUP,
                f"histogram_quantile(0.95, sum by (le, pool) (rate({metric}_bucket[5m])))",
            )
            for metric, _ in GATEWAY_LATENCIES.values()
        ]
    return out


@dataclass(frozen=True, slots=True)
class LatencyTarget:
    """One latency alert to write: which series, which alarm, and where the alarm came from."""

    key: LatencyMetric
    metric: str
    record: str  # the recording of its p95 (`p95_record`)
    buckets: tuple[float, ...]
    select: Mapping[str, str]  # the labels the recording keeps, and their values
    series_labels: Mapping[str, str]  # a scraped series of that metric, for the cases
    labels: Mapping[str, str]  # the alert's own labels
    scope: str  # "pool chat", "workload utility (model utility)"
    slo: LatencySlo
    source: str


def _le(bound: float) -> str:
    return str(float(bound))


def histogram_cases(
    series_labels: Mapping[str, str],
    metric: str,
    buckets: Sequence[float],
    threshold: float,
    expect: Mapping[str, str],
    scope: str,
    *,
    timing: tuple[str, int, str] = ("15s", 60, "10m"),
) -> tuple[Case, ...]:
    """Cases for `histogram_quantile(q, ...) > threshold`, any q: fire with every observation in
    the bucket just above the threshold (the quantile interpolates above it), stay silent with
    every observation at or below the threshold's bucket. `timing`: (sample interval, number
    of samples, evaluation time)."""
    above = [b for b in buckets if b >= threshold]
    below = [b for b in buckets if b <= threshold]
    if len(above) < 2 or not below:
        raise SpecError(
            f"{scope}: a threshold of {threshold:g} for {metric} is outside the histogram's "
            f"buckets ({buckets[0]:g}..{buckets[-1]:g}); pick one inside"
        )
    interval, samples, at = timing

    def bucket(le: float | str, values: str) -> Series:
        le_text = le if isinstance(le, str) else _le(le)
        return Series({**series_labels, "le": le_text}, values, f"{metric}_bucket")

    rising = f"0+10x{samples}"
    fire = (bucket(above[0], f"0x{samples}"), bucket(above[1], rising), bucket("+Inf", rising))
    quiet = (bucket(below[-1], rising), bucket("+Inf", rising))
    return (
        Case("above the threshold, sustained", interval, fire, at, dict(expect)),
        Case("below the threshold", interval, quiet, at, None),
    )


def latency_cases(target: LatencyTarget, alarm_s: float) -> tuple[Case, ...]:
    """p95 above the alarm for 10 minutes, and below it."""
    try:
        return histogram_cases(
            target.series_labels,
            target.metric,
            target.buckets,
            alarm_s,
            target.select,
            target.scope,
        )
    except SpecError:
        raise SpecError(
            f"{target.scope}: an alarm of {alarm_s * 1000:g} ms for {target.metric} is outside "
            f"the histogram's buckets ({target.buckets[0]:g}..{target.buckets[-1]:g} s); pick "
            "one inside"
        ) from None


def latency_alert(target: LatencyTarget) -> Alert | None:
    alarm_ms = target.slo.alarm_ms(target.key)
    if alarm_ms is None:
        return None
    target_ms = target.slo.target_ms(target.key)
    alarm_s = alarm_ms / 1000
    label, *others = target.select
    matchers = ",".join(f'{k}="{v}"' for k, v in target.select.items())
    on = "".join(f" on {k} {{{{ $labels.{k} }}}}" for k in others)
    what = WHAT[target.key]
    stated = f"target {target_ms:g} ms, " if target_ms is not None else ""
    return Alert(
        name=ALERT_NAMES.get(target.key, "InhouseE2EP95OverSLO"),
        group=GROUP,
        expr=f"{target.record}{{{matchers}}} > {alarm_s:g}",
        hold="5m",
        severity="page",
        labels=dict(target.labels),
        summary=(
            f"p95 {what} of {{{{ $labels.{label} }}}}{on} above {alarm_ms:g} ms for 5 minutes"
        ),
        description=(
            f"{target.scope[0].upper()}{target.scope[1:]}: SLO {stated}alarm {alarm_ms:g} ms. "
            "Its users see slow responses now."
        ),
        runbook=_latency_runbook(target.key, target.metric, what),
        cases=latency_cases(target, alarm_s),
        threshold_source=target.source,
    )


def _latency_runbook(key: str, metric: str, what: str) -> RunbookEntry:
    causes = {
        "ttft": "queueing (waiting requests), long prefills, a cold prefix cache or a lost replica",
        "itl": "batches too large for the GPU (max_num_seqs), preemptions, or prefills stalling "
        "decodes (chunked prefill off or a large token budget)",
        "e2e": "long outputs, queueing or slow decode",
    }[key]
    by = "model" if metric.startswith("inhouse_gateway") else "pod"
    failover = (
        (
            'A fallback pool (the description says "during a failover"): its primary pool is '
            "down or saturated and the fallback decodes the primary's traffic "
            '(`sum by (pool) (rate(inhouse_gateway_routing_decisions_total{reason="fallback"}'
            "[5m]))`); bring the primary back (InhouseEnginePoolBelowDegraded, its waiting "
            "requests), shed batch tenants at the gateway meanwhile, and tell the customer's "
            "contact the degraded-mode SLO is in force.",
        )
        if key == "itl"
        else ()
    )
    return RunbookEntry(
        meaning=f"The 5-minute p95 {what} of a workload (or, in a stack without workloads, a "
        f"pool) has been above its alarm for 5 minutes. Usual causes: {causes}.",
        first_promql=f"histogram_quantile(0.95, sum by (le, {by}) (rate({metric}_bucket[5m])))",
        mitigations=(
            "One pod much worse than the rest: drain it (`kubectl delete pod`) and check its GPU "
            "(hardware dashboard).",
            "All pods and `vllm:num_requests_waiting` high: load beyond capacity; shed or "
            "deprioritize batch tenants at the gateway, add a replica (multi-node: raise KEDA's "
            "maxReplicaCount), or run the degraded-mode plan.",
            "Prefix hit rate dropped at the same time: see InhousePrefixHitRateLow.",
            "Preemptions rising: see InhousePreemptionsSustained (KV pressure).",
            *failover,
        ),
        escalate="Not back under the alarm 30 minutes after mitigation, or a replica is lost "
        "with no spare GPUs: escalate to the platform owner and tell the customer's contact "
        "the degraded-mode SLO is in force.",
    )


def _slo_source(pool: PoolSpec) -> str:
    """Where a pool's latency targets come from, for a rule's threshold_source."""
    if pool.slo is not None:
        return f"stack pools[{pool.name}].slo"
    return "render's default SLO (the seeds' interactive chat row; the pool has no slo)"


def engine_target(
    pool: PoolSpec,
    latency: tuple[LatencyMetric, str, tuple[float, ...], str],
    labels: Mapping[str, str],
    scope: str,
    slo: LatencySlo,
    source: str,
) -> LatencyTarget:
    """A latency (a `LATENCIES` row) of the pool on vLLM's series, by its served name."""
    key, metric, buckets, _ = latency
    select = {"model_name": pool.client_model_name}
    return LatencyTarget(
        key, metric, p95_record(metric), buckets, select, engine_labels(pool), labels, scope,
        slo, source,
    )  # fmt: skip


def pool_targets(pool: PoolSpec) -> list[LatencyTarget]:
    """A stack without workloads: every latency of the pool on vLLM's series."""
    source = _slo_source(pool)
    labels, scope, slo = {"pool": pool.name}, f"pool {pool.name}", slo_of(pool)
    return [
        engine_target(pool, latency, labels, scope, slo, f"{source}.{latency[0]}_alarm_ms")
        for latency in LATENCIES
    ]


def long_pool_of(stack: StackSpec, workload: WorkloadSpec) -> PoolSpec | None:
    """The pool the length rule sends the workload's long prompts to, where they have a TTFT
    target of their own (None: one TTFT series for all its prompts)."""
    pool = stack.pool_of_workload(workload)
    if workload.slo.long_ttft_p95_ms is None or pool.long_pool is None:
        return None
    return stack.pool(pool.long_pool)


def workload_targets(workload: WorkloadSpec, pool: PoolSpec) -> list[LatencyTarget]:
    """TTFT and e2e of one workload, on the gateway's series for its model name. Its long
    prompts' own TTFT target, with no long pool to tell them apart, holds the series of all
    prompts (the short target would page on the long prompts a healthy stack serves)."""
    slos: dict[LatencyMetric, tuple[LatencySlo, str]] = {
        "ttft": (workload.slo, "ttft_alarm_ms"),
        "e2e": (workload.slo, "e2e_alarm_ms"),
    }
    if workload.slo.long_ttft_p95_ms is not None:
        slos["ttft"] = (workload.slo.for_long_prompts(), "long_ttft_alarm_ms")
    return [
        LatencyTarget(
            key,
            metric,
            p95_record(metric),
            buckets,
            {"model": workload.model},
            gateway_labels(pool, workload.model),
            {"pool": pool.name, "workload": workload.name},
            f"workload {workload.name} (model {workload.model}, pool {pool.name})",
            slos[key][0],
            _workload_source(workload, slos[key][1]),
        )
        for key, (metric, buckets) in GATEWAY_LATENCIES.items()
    ]


def _workload_source(workload: WorkloadSpec, field: str) -> str:
    return (
        f"stack workloads[{workload.name}].slo.{field}, written by `inhouse plan` from the "
        f"requirements' {workload.name} slo"
    )


def split_ttft_targets(
    stack: StackSpec, workload: WorkloadSpec, pool: PoolSpec, long_pool: PoolSpec
) -> list[LatencyTarget]:
    """A workload split by its pool's length rule: each pool's share of its first tokens, on
    the gateway's series by model and pool, at the target of the prompts that pool serves. A
    `fallback` of either pool serves both lengths during a failover, which the gateway does not
    tell apart there: its share is held to the long target, as one pool for all prompts is."""
    metric, buckets = GATEWAY_LATENCIES["ttft"]
    threshold = f"{pool.long_prompt_tokens:,}"
    long_slo = workload.slo.for_long_prompts()
    parts = [
        (pool, workload.slo, "ttft_alarm_ms", f"prompts up to {threshold} tokens"),
        (long_pool, long_slo, "long_ttft_alarm_ms", f"prompts above {threshold} tokens"),
    ]
    for name in dict.fromkeys(p.fallback for p in (pool, long_pool) if p.fallback is not None):
        if name not in (pool.name, long_pool.name):
            parts.append((stack.pool(name), long_slo, "long_ttft_alarm_ms",
                          "prompts of either length on a fallback pool"))  # fmt: skip
    out = []
    for serving, slo, field, prompts in parts:
        out.append(
            LatencyTarget(
                "ttft",
                metric,
                p95_record(metric, "model_pool"),
                buckets,
                {"model": workload.model, "pool": serving.name},
                gateway_labels(serving, workload.model),
                {"pool": serving.name, "workload": workload.name},
                f"workload {workload.name}, its {prompts} (model {workload.model}, pool "
                f"{serving.name})",
                slo,
                _workload_source(workload, field),
            )
        )
    return out


def attached_pool_targets(pool: PoolSpec) -> list[LatencyTarget]:
    """A stack without workloads, an attached pool: TTFT and e2e on the gateway's series for
    the pool (render scrapes no engine of it)."""
    source = _slo_source(pool)
    return [
        LatencyTarget(
            key,
            metric,
            p95_record(metric, "pool"),
            buckets,
            {"pool": pool.name},
            gateway_labels(pool, pool.client_model_name),
            {"pool": pool.name},
            f"pool {pool.name} (engine url, timed at the gateway)",
            slo_of(pool),
            f"{source}.{key}_alarm_ms",
        )
        for key, (metric, buckets) in GATEWAY_LATENCIES.items()
    ]


def latency_alerts(stack: StackSpec, engines: EngineLayout) -> list[Alert]:
    """The pools' latency alerts, or the workloads' TTFT and e2e (their pools' ITL:
    `alerts_itl.pool_itl_alerts`)."""
    targets: list[LatencyTarget] = []
    if not stack.workloads:
        for pool in engines.pools:
            targets += pool_targets(pool)
        for pool in attached_pools(stack):
            targets += attached_pool_targets(pool)
    else:
        for workload in stack.workloads:
            pool = stack.pool_of_workload(workload)
            mine = workload_targets(workload, pool)
            long_pool = long_pool_of(stack, workload)
            if long_pool is not None:
                mine = [t for t in mine if t.key != "ttft"]
                mine += split_ttft_targets(stack, workload, pool, long_pool)
            targets += mine
    alerts = [latency_alert(t) for t in targets]
    return [a for a in alerts if a is not None]
