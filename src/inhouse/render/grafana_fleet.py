"""Fleet overview (the first page a person opens) and the latency deep dive (TTFT against ITL
against queue wait, per replica).

Every expression reads only names from `metric_names` or the recording rules; the live-query
test runs each against a real Prometheus.
"""

from __future__ import annotations

from inhouse.render.alerts_replicas import FLAP_RESTARTS, FLAP_WINDOW
from inhouse.render.grafana import (
    QUANTILES,
    RATE,
    Board,
    Section,
    hist,
    mean,
    panel,
    query_variable,
    rate_sum,
)
from inhouse.render.layout import EngineLayout
from inhouse.spec.stack import StackSpec

REQUESTS = "inhouse_gateway_requests_total"
MODEL = 'model_name=~"$model_name"'
ENGINES = 'job=~".+-engine"'
RESTARTS_PANEL = "Replica restarts (1 h)"


def error_share(by: str, selector: str = "") -> str:
    """Share of responses that were 5xx, written as 1 - ok/all so that a healthy stack shows 0
    (a 5xx-only numerator has no series at all until the first error)."""
    sep = "," if selector else ""
    ok = rate_sum(REQUESTS, f'{selector}{sep}code!~"5.."', by)
    return f"1 - ({ok} / {rate_sum(REQUESTS, selector, by)})"


def fleet_board(stack: StackSpec, engines: EngineLayout) -> Board:
    board = Board(
        "fleet",
        "Fleet overview",
        "Start here: is traffic flowing, fast and error-free, and is every replica up? Each "
        "page alert names the panel to look at first (runbook.md).",
    )
    board.sections += [_traffic_section(), _replicas_section(engines), _hardware_section()]
    return board


def _traffic_section() -> Section:
    """What clients see, from the gateway's metrics: rate, TTFT, e2e, errors, rejections."""
    gateway_ttft = tuple((hist(q, "inhouse_gateway_ttft_seconds"), name) for q, name in QUANTILES)
    return (
        "Traffic (gateway: what clients see)",
        [
            panel("Request rate by pool", "Responses per second, any status.",
                  (rate_sum(REQUESTS, by="pool"), "{{pool}}"), unit="reqps"),
            panel("TTFT percentiles", "Gateway arrival to first token, all pools.",
                  *gateway_ttft, unit="s"),
            panel("End-to-end p95 by pool", "Gateway arrival to the last byte.",
                  (hist("0.95", "inhouse_gateway_e2e_seconds", by="pool"), "{{pool}}"),
                  unit="s"),
            panel("Error rate by pool", "Share of responses that were 5xx (0 when none).",
                  (error_share("pool"), "{{pool}}"), unit="percentunit"),
            panel("Rejections by reason", "Refused before an engine: limits, budgets, "
                  "long prompts, bad keys.",
                  (rate_sum("inhouse_gateway_rejections_total", by="reason"), "{{reason}}"),
                  unit="reqps"),
        ],
    )  # fmt: skip


def _replicas_section(engines: EngineLayout) -> Section:
    """Replicas up against the plan, their health, restarts, batch and KV cache."""
    planned = [
        (f'sum(up{{job="{pool.name}-engine"}})', f"{pool.name} up") for pool in engines.pools
    ]
    planned += [(f"vector({pool.replicas})", f"{pool.name} planned") for pool in engines.pools]
    return (
        "Replicas",
        [
            panel("Replicas up against plan", "Scraped engines per pool and the plan's "
                  "replica count.", *planned),
            panel("Per-replica health", "1: Prometheus scrapes it / the gateway routes to it.",
                  (f"up{{{ENGINES}}}", "{{pod}} scraped"),
                  ("inhouse_gateway_replica_healthy", "{{pool}} {{replica}} routable")),
            panel(RESTARTS_PANEL, f"Times each replica's process restarted in the last "
                  f"{FLAP_WINDOW}; pages at {FLAP_RESTARTS} (a rollout makes 1).",
                  (f"changes(process_start_time_seconds{{{ENGINES}}}[{FLAP_WINDOW}])",
                   "{{pod}} {{instance}}"), threshold=FLAP_RESTARTS),
            panel("Running and waiting per replica", "vLLM's batch and queue.",
                  ("sum by (pod) (vllm:num_requests_running)", "{{pod}} running"),
                  ("sum by (pod) (vllm:num_requests_waiting)", "{{pod}} waiting")),
            panel("KV cache usage per replica", "Pages above 95% for 60 s.",
                  ("max by (pod) (vllm:kv_cache_usage_perc)", "{{pod}}"),
                  unit="percentunit", threshold=0.95),
        ],
    )  # fmt: skip


def _hardware_section() -> Section:
    """GPU temperature and errors, node CPU and memory."""
    return (
        "Hardware",
        [
            panel("Hottest GPU per node", "Ticket above 85 C for 5 minutes.",
                  ("max by (Hostname) (DCGM_FI_DEV_GPU_TEMP)", "{{Hostname}}"),
                  unit="celsius", threshold=85),
            panel("GPU errors", "Double-bit ECC errors in 24 h; GPUs whose last XID is "
                  "not 0.",
                  ("sum(increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[24h]))", "ECC DBE (24 h)"),
                  ("sum(DCGM_FI_DEV_XID_ERRORS != bool 0)", "GPUs with an XID")),
            panel("Node CPU busy", "Share of CPU time not idle, per node.",
                  ("1 - avg by (instance) (rate(node_cpu_seconds_total"
                   f'{{mode="idle"}}[{RATE}]))', "{{instance}}"), unit="percentunit"),
            panel("Node memory available", "MemAvailable / MemTotal, per node.",
                  ("node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes",
                   "{{instance}}"), unit="percentunit"),
        ],
    )  # fmt: skip


def latency_board(stack: StackSpec, engines: EngineLayout) -> Board:
    del stack
    board = Board(
        "latency",
        "Latency deep dive",
        "Where a request's time goes, per replica: queue wait, prefill (TTFT) and decode (ITL), "
        "and the gateway's own share.",
        variables=[
            query_variable(
                "model_name",
                "Model",
                "label_values(vllm:time_to_first_token_seconds_count, model_name)",
            )
        ],
    )
    board.sections += [_per_replica_section(), _time_split_section()]
    return board


def _per_replica_section() -> Section:
    """p95 of TTFT, ITL, queue wait, prefill and decode, per replica, from vLLM."""
    return (
        "Per replica (p95)",
        [
            panel("TTFT p95 per replica", "vLLM: arrival at the engine to first token.",
                  (hist("0.95", "vllm:time_to_first_token_seconds", MODEL, "pod"),
                   "{{pod}}"), unit="s"),
            panel("ITL p95 per replica", "vLLM: time between output tokens.",
                  (hist("0.95", "vllm:inter_token_latency_seconds", MODEL, "pod"),
                   "{{pod}}"), unit="s"),
            panel("Queue wait p95 per replica", "Time in vLLM's waiting queue.",
                  (hist("0.95", "vllm:request_queue_time_seconds", MODEL, "pod"),
                   "{{pod}}"), unit="s"),
            panel("Prefill and decode p95 per replica", "Per request, after the queue.",
                  (hist("0.95", "vllm:request_prefill_time_seconds", MODEL, "pod"),
                   "{{pod}} prefill"),
                  (hist("0.95", "vllm:request_decode_time_seconds", MODEL, "pod"),
                   "{{pod}} decode"), unit="s"),
        ],
    )  # fmt: skip


def _time_split_section() -> Section:
    """Means: the TTFT split into queue and prefill, the gateway's share, ITL, step size."""
    gateway_mean = mean("inhouse_gateway_ttft_seconds", by="pool")
    engine_mean = mean("vllm:time_to_first_token_seconds", by="pool")
    return (
        "Where the time goes (means)",
        [
            panel("TTFT split", "Mean queue wait and prefill against mean TTFT: TTFT "
                  "well above their sum is scheduling (chunked prefill, batch contention).",
                  (mean("vllm:request_queue_time_seconds", MODEL, "model_name"),
                   "{{model_name}} queue"),
                  (mean("vllm:request_prefill_time_seconds", MODEL, "model_name"),
                   "{{model_name}} prefill"),
                  (mean("vllm:time_to_first_token_seconds", MODEL, "model_name"),
                   "{{model_name}} TTFT"), unit="s"),
            panel("Gateway share of TTFT", "Mean TTFT the client sees minus the engine's: "
                  "routing, the gateway's queue, the network.",
                  (f"({gateway_mean}) - ({engine_mean})", "{{pool}}"), unit="s"),
            panel("Mean ITL per replica", "Rises with the running batch (capped by "
                  "max_num_seqs); one replica above the rest is a slow GPU or a hot prefix.",
                  (mean("vllm:inter_token_latency_seconds", MODEL, "pod"), "{{pod}}"),
                  unit="s"),
            panel("Tokens per engine step", "p50 and p95 of the tokens in a step.",
                  (hist("0.5", "vllm:iteration_tokens_total", MODEL, "pod"), "{{pod}} p50"),
                  (hist("0.95", "vllm:iteration_tokens_total", MODEL, "pod"),
                   "{{pod}} p95")),
        ],
    )  # fmt: skip
