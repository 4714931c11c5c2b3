"""What each dashboard is for, and for each alert the panel a person opens first.

The runbook and docs/render.md print these; a test checks that every page alert has an entry
and that each named panel exists on its dashboard.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DashboardUse:
    key: str  # grafana/<key>.json
    title: str
    shows: str


@dataclass(frozen=True, slots=True)
class FirstLook:
    dashboard: str  # a DashboardUse key
    panel: str  # the panel's title on that dashboard
    look_for: str


DASHBOARDS: tuple[DashboardUse, ...] = (
    DashboardUse("fleet", "Fleet overview", "start here: request rate, latency percentiles, "
                 "error rate, rejections, replicas up against plan, per-replica health and "
                 "restarts, the hottest GPU, GPU errors, node CPU and memory"),
    DashboardUse("slo", "SLO", "per pool TTFT/ITL/e2e p50/p95/p99 against the alarm line, "
                 "gateway TTFT by model, status codes, error-budget burn"),
    DashboardUse("latency", "Latency deep dive", "per replica TTFT, ITL, queue wait, prefill "
                 "and decode p95; the TTFT split into queue and prefill; the gateway's share"),
    DashboardUse("engine", "Engine internals", "vLLM's scheduler: running, waiting, KV usage, "
                 "prefix hits, preemptions, finish reasons, tokens/s, step size"),
    DashboardUse("kv-cache", "KV cache", "KV blocks used and free per replica, cache size, "
                 "prefix hit rate, preemptions (vLLM counts no evictions), prompt and output "
                 "length against the plan's re-plan triggers, the router's prefix index and "
                 "routing decisions"),
    DashboardUse("hardware", "Hardware health (DCGM)", "ECC (double and single bit), XID, "
                 "temperature, power, throttling, SM/tensor/HBM activity, HBM bandwidth "
                 "against expected, clocks, HBM used, NVLink; node CPU, memory, disk, network"),
    DashboardUse("cost", "Cost and SLO", "$ per 1M tokens from the plan's $/hour, per pool and "
                 "tenant; error-budget burn over 1 h, 6 h, 7 d; requests within the TTFT target"),
    DashboardUse("tenants", "Tenants and business", "requests, tokens, cost in range, SLA "
                 "adherence (TTFT target, availability), TTFT p95, rejections per tenant"),
)  # fmt: skip

FIRST_LOOK: dict[str, FirstLook] = {
    "InhouseTTFTP95OverSLO": FirstLook("latency", "TTFT p95 per replica",
        "one replica high (a bad GPU, a hot prefix) or all of them (load: check Queue wait)"),
    "InhouseITLP95OverSLO": FirstLook("latency", "Mean ITL per replica",
        "one replica slow (throttled GPU: Hardware) or every one (batch too large)"),
    "InhouseE2EP95OverSLO": FirstLook("latency", "Prefill and decode p95 per replica",
        "which phase grew: prefill (long prompts) or decode (output length, ITL)"),
    "InhouseErrorBudgetBurnFast": FirstLook("fleet", "Error rate by pool",
        "which pool returns 5xx, and whether Replicas up against plan dropped with it"),
    "InhouseErrorBudgetBurnSlow": FirstLook("cost", "Error budget burn",
        "whether the 7-day burn is above 1: the budget runs out before the window ends"),
    "InhouseEngineReplicaDown": FirstLook("fleet", "Per-replica health",
        "which pod is 0 and whether the gateway stopped routing to it"),
    "InhouseEngineReplicasMissing": FirstLook("fleet", "Replicas up against plan",
        "how many replicas are gone; then the pods' events in Kubernetes"),
    "InhouseEnginePoolBelowDegraded": FirstLook("fleet", "Replicas up against plan",
        "how many of the pool's replicas are down together; then Per-replica health for which"),
    "InhouseEngineReplicaFlapping": FirstLook("fleet", "Replica restarts (1 h)",
        "which replica restarts, and whether others follow (a bad deploy) or it alone (its GPU "
        "or node: the Hardware row); then `kubectl logs --previous` of that pod"),
    "InhouseKVCacheFull": FirstLook("kv-cache", "KV blocks used and free per replica",
        "one replica full (routing imbalance: Router row) or all (more sessions than planned)"),
    "InhouseGatewayDown": FirstLook("fleet", "Request rate by pool",
        "whether traffic stopped entirely (every request fails while no gateway is up)"),
    "InhouseGPUDoubleBitECC": FirstLook("hardware", "Double-bit ECC errors (1 h)",
        "which GPU (Hostname, gpu) to cordon, and whether XID 48 followed"),
    "InhouseGPUFatalXid": FirstLook("hardware", "Last XID",
        "the XID and GPU; 79 is a GPU off the bus, 48/95 memory faults"),
    "InhousePreemptionsSustained": FirstLook("kv-cache", "Preemptions and evictions",
        "which replica preempts, next to its KV usage"),
    "InhousePrefixHitRateLow": FirstLook("kv-cache", "Prefix hit rate per replica",
        "uneven rates (the router splits sessions) or all low (the prompt shape changed)"),
    "InhouseReplanPromptsLonger": FirstLook("kv-cache", "Prompt length",
        "how long p95 has been above the trigger's line, and whether p50 rose with it (every "
        "prompt grew) or stayed (a longer tail)"),
    "InhouseReplanOutputsLonger": FirstLook("kv-cache", "Output length",
        "how long p95 has been above the trigger's line, and whether p50 rose with it (every "
        "answer grew) or stayed (a longer tail); then KV usage, which longer answers hold longer"),
    "InhouseQueueBacklog": FirstLook("engine", "Waiting requests",
        "a growing queue on every replica: capacity; on one: routing"),
    "InhouseGPUTemperatureHigh": FirstLook("hardware", "GPU temperature",
        "one GPU (fan) or the whole node (airflow)"),
    "InhouseGPUPowerAtLimit": FirstLook("hardware", "Power draw", "GPUs at the limit line"),
    "InhouseGPUHBMBandwidthLow": FirstLook("hardware", "HBM bandwidth",
        "the GPU below its expected line, then SM and memory clocks for throttling"),
    "InhouseGatewayEventLoopLagging": FirstLook("tenants", "Gateway event-loop lag p99",
        "which gateway pod lags; then its CPU on the Fleet overview's node panels"),
    "InhouseGatewayDiscoveryFailing": FirstLook("fleet", "Per-replica health",
        "the pool's routable slots against its scraped pods: a pod scraped but never routable "
        "is one the gateway has not found"),
}  # fmt: skip


def dashboard_title(key: str) -> str:
    for board in DASHBOARDS:
        if board.key == key:
            return board.title
    raise KeyError(key)


def first_look_line(alert_name: str) -> str | None:
    look = FIRST_LOOK.get(alert_name)
    if look is None:
        return None
    return (
        f"**Look first.** Dashboard *{dashboard_title(look.dashboard)}* "
        f"(`grafana/{look.dashboard}.json`), panel *{look.panel}*: {look.look_for}."
    )
