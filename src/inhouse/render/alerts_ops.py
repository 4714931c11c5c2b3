"""Operational alerts: engine replicas and their KV cache, scheduler and queue; the gateway; the
GPUs (DCGM). Thresholds follow the seeds' SLO table: replica down 30 s, KV > 95% for 60 s (page),
prefix hit rate < 60% for 15 minutes (ticket), ECC double-bit and XID 48/79/95 (page).

The replica alerts (down, missing, below degraded mode) are `alerts_replicas`.
"""

from __future__ import annotations

from collections.abc import Callable

from inhouse.metric_names import LOOP_LAG_PERIOD_S
from inhouse.render.alerts import Alert, Case, RunbookEntry, Series
from inhouse.render.alerts_replicas import ENGINE_GROUP, LOST_MARGIN_S, replica_alerts, up_series
from inhouse.render.alerts_slo import engine_labels
from inhouse.render.alerts_triggers import has_hit_trigger
from inhouse.render.layout import (
    QUEUE_DEPTH_PER_REPLICA,
    EngineLayout,
    rollout_allowance_s,
    slo_of,
)
from inhouse.render.options import RenderOptions
from inhouse.spec.stack import PoolSpec, StackSpec


def kv_alerts(pool: PoolSpec, *, hit_floor: bool = True) -> list[Alert]:
    """KV cache, preemption, prefix-hit (unless the plan's trigger takes its place:
    `hit_floor` False) and queue alerts of one pool."""
    alerts = [kv_full_alert(pool), preemptions_alert(pool)]
    min_rate = slo_of(pool).prefix_hit_rate_min
    if hit_floor and pool.knobs.enable_prefix_caching and min_rate is not None:
        alerts.append(prefix_alert(pool, min_rate))
    alerts.append(queue_alert(pool))
    return alerts


def kv_full_alert(pool: PoolSpec) -> Alert:
    """A replica's KV cache above 95% for a minute: a page."""
    name = pool.client_model_name
    labels = engine_labels(pool)
    kv = "vllm:kv_cache_usage_perc"
    return Alert(
        name="InhouseKVCacheFull",
        group=ENGINE_GROUP,
        expr=f'{kv}{{model_name="{name}"}} > 0.95',
        hold="1m",
        severity="page",
        labels={"pool": pool.name},
        summary="KV cache of {{ $labels.pod }} ({{ $labels.model_name }}) above 95% for 60 s",
        description="New requests wait for KV blocks and running ones are preempted "
        "(recomputed): latency climbs.",
        runbook=RunbookEntry(
            meaning="A replica's KV cache has been over 95% full for a minute. vLLM then "
            "preempts running sequences and recomputes them later.",
            first_promql=f'max by (pod) ({kv}{{model_name="{name}"}})',
            mitigations=(
                "One replica only: routing imbalance (session affinity pinning heavy "
                "sessions); check the routing-decisions panel.",
                "All replicas: too many long contexts for the KV pool; lower max_num_seqs "
                "or max_model_len, use fp8 KV, add a host KV tier or a replica.",
                "Long-prompt flood from one tenant: tighten its token budget at the gateway.",
            ),
            escalate="Sustained with SLO pages: escalate to the capacity owner (re-plan).",
        ),
        cases=(
            Case("full for 2 minutes", "15s", (Series(labels, "0.5 0.97x10", kv),), "2m", labels),
            Case(
                "30 s bursts",
                "15s",
                (Series(labels, "0.5 0.97 0.97 0.5 0.97 0.97 0.5 0.97 0.97 0.5", kv),),
                "2m",
                None,
            ),
        ),
    )


def preemptions_alert(pool: PoolSpec) -> Alert:
    """Preemptions in every 5-minute window for 15 minutes."""
    labels = engine_labels(pool)
    preemptions = f'vllm:num_preemptions_total{{model_name="{pool.client_model_name}"}}'
    return _counter_alert(
        pool,
        name="InhousePreemptionsSustained",
        expr=f"sum by (model_name) (rate({preemptions}[5m])) > 0",
        summary="{{ $labels.model_name }} preempts requests for 15 minutes",
        description="The scheduler keeps evicting running sequences for lack of KV blocks.",
        runbook=RunbookEntry(
            meaning="vLLM has preempted sequences in every 5-minute window for 15 minutes: "
            "KV demand exceeds the cache; preempted work is recomputed, wasting GPU time.",
            first_promql=f"sum by (pod) (rate({preemptions}[5m]))",
            mitigations=(
                "Lower max_num_seqs or max_num_batched_tokens; enable fp8 KV cache.",
                "Check the KV cache dashboard for a few very long requests.",
            ),
            escalate="With SLO pages: capacity owner.",
        ),
        series=lambda v: (Series(labels, v, "vllm:num_preemptions_total"),),
        fire="0+30x30",
        quiet="0x30",
    )


def _counter_alert(
    pool: PoolSpec,
    *,
    name: str,
    expr: str,
    summary: str,
    description: str,
    runbook: RunbookEntry,
    series: Callable[[str], tuple[Series, ...]],
    fire: str,
    quiet: str,
) -> Alert:
    expect = {"model_name": pool.client_model_name}
    return Alert(
        name=name,
        group=ENGINE_GROUP,
        expr=expr,
        hold="15m",
        severity="ticket",
        labels={"pool": pool.name},
        summary=summary,
        description=description,
        runbook=runbook,
        cases=(
            Case("sustained", "1m", series(fire), "20m", expect),
            Case("none", "1m", series(quiet), "20m", None),
        ),
    )


def prefix_alert(pool: PoolSpec, min_rate: float) -> Alert:
    name = pool.client_model_name
    sel = f'{{model_name="{name}"}}'
    labels = engine_labels(pool)

    def series(hits: str) -> tuple[Series, ...]:
        return (
            Series(labels, hits, "vllm:prefix_cache_hits_total"),
            Series(labels, "0+100x30", "vllm:prefix_cache_queries_total"),
        )

    fire_hits = max(0, round(min_rate * 100) - 30)
    quiet_hits = min(100, round(min_rate * 100) + 20)
    return Alert(
        name="InhousePrefixHitRateLow",
        group=ENGINE_GROUP,
        expr=(
            f"sum by (model_name) (rate(vllm:prefix_cache_hits_total{sel}[15m]))\n/\n"
            f"sum by (model_name) (rate(vllm:prefix_cache_queries_total{sel}[15m]))\n"
            f"< {min_rate:g}"
        ),
        hold="15m",
        severity="ticket",
        labels={"pool": pool.name},
        summary=f"prefix-cache hit rate of {{{{ $labels.model_name }}}} below {min_rate:.0%}",
        description="A router or prompt-shape change: agent traffic normally reuses most of "
        "its prompt.",
        runbook=RunbookEntry(
            meaning=f"Under {min_rate:.0%} of prompt tokens hit the prefix cache for 15 "
            "minutes. Either the gateway stopped sending a session to the replica holding its "
            "prefix (routing policy changed, a replica restarted, the prefix index is too "
            "small), or the prompts changed shape (a timestamp or request id early in the "
            "system prompt breaks every prefix).",
            first_promql=f"sum by (pod) (rate(vllm:prefix_cache_hits_total{sel}[15m])) / "
            f"sum by (pod) (rate(vllm:prefix_cache_queries_total{sel}[15m]))",
            mitigations=(
                "Check the routing decisions panel: prefix_match share fell? Check the "
                "gateway's routing policy in the stack file.",
                "Diff a current system prompt against last week's: move volatile fields to "
                "the end.",
            ),
            escalate="Ticket to the application team owning the prompt, or the gateway owner.",
        ),
        threshold_source=(
            f"stack pools[{pool.name}].slo.prefix_hit_rate_min"
            if pool.slo is not None
            else "render's default SLO"
        )
        + " (default 0.6: the seeds' SLO table); a plan's prefix_hit_rate trigger replaces it",
        cases=(
            Case("hit rate low", "1m", series(f"0+{fire_hits}x30"), "20m", {"model_name": name}),
            Case("hit rate healthy", "1m", series(f"0+{quiet_hits}x30"), "20m", None),
        ),
    )


def queue_alert(pool: PoolSpec) -> Alert:
    name = pool.client_model_name
    labels = engine_labels(pool)
    metric = "vllm:num_requests_waiting"
    return Alert(
        name="InhouseQueueBacklog",
        group=ENGINE_GROUP,
        expr=f'avg by (model_name) ({metric}{{model_name="{name}"}}) > {QUEUE_DEPTH_PER_REPLICA}',
        hold="5m",
        severity="ticket",
        labels={"pool": pool.name},
        summary="{{ $labels.model_name }} has a waiting queue for 5 minutes",
        description=f"More than {QUEUE_DEPTH_PER_REPLICA} requests wait per replica: demand "
        "exceeds the pool's batch capacity.",
        runbook=RunbookEntry(
            meaning="Requests wait inside vLLM for a batch slot (max_num_seqs) or KV blocks. "
            "Multi-node pools should be scaling out on this same signal.",
            first_promql=f'sum by (pod) ({metric}{{model_name="{name}"}})',
            mitigations=(
                "Multi-node: check the KEDA ScaledObject (`kubectl get scaledobject`) reached "
                "its maxReplicaCount or cannot schedule pods.",
                "Single node: shift batch tenants off-peak or lower their priority.",
            ),
            escalate="Daily recurrence: capacity owner (re-run inhouse plan with the new load).",
        ),
        cases=(
            Case("backlog", "15s", (Series(labels, "30x40", metric),), "8m", {"model_name": name}),
            Case("short queue", "15s", (Series(labels, "5x40", metric),), "8m", None),
        ),
    )


def gateway_alerts(ns: str) -> list[Alert]:
    sel = f'namespace="{ns}", job="gateway"'
    return [
        Alert(
            name="InhouseGatewayDown",
            group=ENGINE_GROUP,
            expr=f"absent(up{{{sel}}} == 1)",
            hold="30s",
            severity="page",
            summary="no inhouse gateway replica is up",
            description="Every client request fails: the gateway is the only way in.",
            runbook=RunbookEntry(
                meaning="No gateway replica answers /metrics: clients cannot reach any model.",
                first_promql=f"up{{{sel}}}",
                mitigations=(
                    "`kubectl -n NS get pods -l app.kubernetes.io/component=gateway`, then its "
                    "logs: a bad ConfigMap (stack file) or a missing tenant-keys Secret?",
                    "Roll back the last gateway ConfigMap or image change.",
                ),
                escalate="Immediately to the platform owner: full outage.",
            ),
            cases=(
                Case(
                    "gateway down",
                    "15s",
                    (up_series(ns, "gateway", {"instance": "10.0.1.1:8080"}, "0x10"),),
                    "1m30s",
                    {},
                ),
                Case(
                    "gateway up",
                    "15s",
                    (up_series(ns, "gateway", {"instance": "10.0.1.1:8080"}, "1x10"),),
                    "1m30s",
                    None,
                ),
            ),
        ),
        loop_lag_alert(ns),
    ]


def discovery_alert(ns: str) -> Alert:
    """A gateway cannot resolve a scaled pool's headless Service for 5 minutes: it routes to
    the pods it last knew (the gateway's `discovery`), new pods get no traffic."""
    metric = "inhouse_gateway_discovery_failed_lookups"
    sel = f'namespace="{ns}", job="gateway"'
    pod = {"namespace": ns, "job": "gateway", "pod": "gateway-0", "pool": "long"}
    return Alert(
        name="InhouseGatewayDiscoveryFailing",
        group=ENGINE_GROUP,
        expr=f"max by (namespace, pool) ({metric}{{{sel}}}) > 0",
        hold="5m",
        severity="ticket",
        summary="the gateway cannot resolve pool {{ $labels.pool }}'s Service",
        description="It routes to the pods it last knew: pods started since get no requests, "
        "and requests to pods gone since fail and are retried elsewhere.",
        runbook=RunbookEntry(
            meaning="The gateway's lookups of a scaled pool's headless Service "
            "(`<pool>-engine.<namespace>.svc.cluster.local`) fail: DNS errors, timeouts or no "
            "address at all. Until one succeeds, the pool's replica slots keep their last "
            "addresses, so a scale-up adds no capacity and a rescheduled pod is lost to it.",
            first_promql=f"{metric}{{{sel}}}",
            mitigations=(
                "`kubectl -n NS logs deploy/gateway | grep 'cannot resolve'` says the error; "
                "`kubectl -n kube-system get pods -l k8s-app=kube-dns` for CoreDNS itself.",
                "`kubectl -n NS get endpoints <pool>-engine`: no ready pod at all answers no "
                "address (then it is the pool, not DNS: InhouseEngineReplicasMissing).",
                "A NetworkPolicy that blocks the gateway's egress to kube-dns (UDP and TCP 53).",
            ),
            escalate="Replica alerts or the TTFT SLO firing as well: page the platform owner.",
        ),
        cases=(
            Case("lookups failing", "15s", (Series(pod, "0+1x40", metric),), "7m",
                 {"namespace": ns, "pool": "long"}),
            Case("one failed lookup, then resolving", "15s",
                 (Series(pod, "0 1 0x38", metric),), "7m", None),
        ),
    )  # fmt: skip


def loop_lag_alert(ns: str) -> Alert:
    """The gateway's event loop runs its lag timer over 25 ms late in more than 5% of ticks
    for 10 minutes: every request and streamed chunk through that replica waits as long."""
    metric = "inhouse_gateway_event_loop_lag_seconds"
    sel = f'namespace="{ns}", job="gateway"'
    pod = {"namespace": ns, "job": "gateway", "pod": "gateway-0"}

    def series(late_per_tick: float) -> tuple[Series, ...]:
        ticks = round(15 / LOOP_LAG_PERIOD_S)  # timer ticks between samples 15 s apart
        late = round(ticks * late_per_tick)
        return (
            Series(pod, f"0+{ticks}x60", f"{metric}_count"),
            Series({**pod, "le": "0.025"}, f"0+{ticks - late}x60", f"{metric}_bucket"),
        )

    return Alert(
        name="InhouseGatewayEventLoopLagging",
        group=ENGINE_GROUP,
        expr=(
            f'1 - sum by (namespace, pod) (rate({metric}_bucket{{{sel}, le="0.025"}}[5m]))\n'
            f"/ sum by (namespace, pod) (rate({metric}_count{{{sel}}}[5m]))\n> 0.05"
        ),
        hold="10m",
        severity="ticket",
        summary="gateway {{ $labels.pod }}: event loop over 25 ms late in over 5% of ticks",
        description="The gateway process cannot keep up: its added latency grows for every "
        "request it serves.",
        runbook=RunbookEntry(
            meaning="One gateway replica's Python event loop is busy or stalled: its core is "
            "saturated (too many streamed chunks per second for one process), the node is "
            "CPU-throttled (a CPU limit below what it uses), or something blocks the loop.",
            first_promql=f"histogram_quantile(0.99, sum by (pod, le) "
            f"(rate({metric}_bucket{{{sel}}}[5m])))",
            mitigations=(
                "Compare the pod's CPU use with its limit (`container_cpu_cfs_throttled_"
                "periods_total`): raise the limit or remove it.",
                "Add gateway replicas (the Deployment's `replicas`; limits stay exact with the "
                "Redis store) so each process relays fewer chunks per second.",
                "Turned on prompt logging or tracing recently? Both cost CPU per request.",
            ),
            escalate="TTFT SLO alerts firing as well: page the platform owner.",
        ),
        cases=(
            Case(
                "a tenth of ticks late",
                "15s",
                series(0.1),
                "15m",
                {"pod": "gateway-0", "namespace": ns},
            ),
            Case("one tick in a hundred late", "15s", series(0.01), "15m", None),
        ),
    )


def engine_rules(
    stack: StackSpec, engines: EngineLayout, ns: str, options: RenderOptions
) -> list[Alert]:
    alerts: list[Alert] = []
    allowances = {
        pool.name: rollout_allowance_s(
            stack, engines, pool, options.prestop_sleep_s, options.dns_ttl_s
        )
        for pool in engines.pools
    }
    cover_s = max((s for s, _ in allowances.values()), default=0) + LOST_MARGIN_S + 120
    for pool in engines.pools:
        alerts += replica_alerts(pool, ns, allowances[pool.name], cover_s)
        alerts += kv_alerts(pool, hit_floor=not has_hit_trigger(stack, pool))
    alerts += gateway_alerts(ns)
    if any(unit.replica_index is None for unit in engines.units):  # a pool the gateway finds
        alerts.append(discovery_alert(ns))  # by DNS (a scaled pool: `k8s_cluster.endpoints`)
    return alerts
