"""Every metric name the rendered rules and dashboards may use, as data.

Four sources, each checked by a test:

* `GATEWAY_METRICS` — the contract for the inhouse gateway's `/metrics`. The gateway implements
  exactly these names, types, labels and buckets; rules and dashboards use nothing else of it.
* `VLLM_METRICS` — the vLLM V1 series we read, as exposed (counters with `_total`, histograms
  with `_bucket`/`_sum`/`_count`). tests/render checks each against a real vLLM 0.32 `/metrics`
  capture.
* `DCGM_METRICS` — dcgm-exporter's field names; `enabled_by_default` False marks the ones its
  default collectors CSV leaves commented out, which the rendered collectors ConfigMap enables.
* `NODE_METRICS` — node_exporter's series (the live-query test scrapes a real one).

Plus `up`, which Prometheus writes for every scrape target. `metric_names_in_promql` pulls the
metric names out of an expression so the tests can check rules and dashboards against this list.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from inhouse.spec.vllm_buckets import REQUEST_LATENCY_BUCKETS_S, TTFT_BUCKETS_S

MetricKind = Literal["counter", "gauge", "histogram"]

# vLLM's own bucket lists: the gateway uses the same ones so that its quantiles and vLLM's
# compare bucket for bucket.
E2E_BUCKETS_S = REQUEST_LATENCY_BUCKETS_S
LOOP_LAG_PERIOD_S = 0.05  # the gateway's lag timer is due this often
LOOP_LAG_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


def replica_label(index: int) -> str:
    """The `replica` label of replica `index` of a pool, as the gateway writes it on its series
    (`0`, `1`, ...; the pool is its own label); the ServiceMonitor derives the same from a
    static replica's pod name, and render's synthetic series use it."""
    return str(index)


@dataclass(frozen=True, slots=True)
class MetricDef:
    """One metric family. `name` is the exposed name (counters end in `_total`)."""

    name: str
    kind: MetricKind
    labels: tuple[str, ...]
    help: str
    buckets: tuple[float, ...] = ()

    def series_names(self) -> tuple[str, ...]:
        if self.kind == "histogram":
            return (f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count")
        return (self.name,)


GATEWAY_METRICS: tuple[MetricDef, ...] = (
    MetricDef(
        "inhouse_gateway_requests_total",
        "counter",
        ("tenant", "model", "pool", "replica", "code"),
        "Requests the gateway answered, by tenant, requested model, pool, replica that served it "
        "('' when none did) and HTTP status code ('200', '429', '503', ...).",
    ),
    MetricDef(
        "inhouse_gateway_tokens_total",
        "counter",
        ("tenant", "model", "kind"),
        "Tokens billed to a tenant; kind is 'prompt' or 'completion' (from the engine's usage).",
    ),
    MetricDef(
        "inhouse_gateway_ttft_seconds",
        "histogram",
        ("tenant", "model", "pool"),
        "Time from request arrival at the gateway to the first streamed token.",
        TTFT_BUCKETS_S,
    ),
    MetricDef(
        "inhouse_gateway_e2e_seconds",
        "histogram",
        ("tenant", "model", "pool"),
        "Time from request arrival at the gateway to the last byte of the response.",
        E2E_BUCKETS_S,
    ),
    MetricDef(
        "inhouse_gateway_rejections_total",
        "counter",
        ("tenant", "reason"),
        "Requests refused before reaching an engine; reason is one of 'rate_limit', "
        "'token_budget', 'prompt_too_long', 'queue_full', 'unauthorized', 'unknown_model'.",
    ),
    MetricDef(
        "inhouse_gateway_queue_depth",
        "gauge",
        ("pool",),
        "Requests admitted by the gateway and waiting for a replica of the pool.",
    ),
    MetricDef(
        "inhouse_gateway_routing_decisions_total",
        "counter",
        ("pool", "replica", "reason"),
        "Replica choices; reason names what decided: 'prefix_match', 'least_loaded', "
        "'session_affinity', 'round_robin', 'long_prompt', 'fallback'.",
    ),
    MetricDef(
        "inhouse_gateway_prefix_index_blocks",
        "gauge",
        ("pool", "replica"),
        "Prefix blocks the router's bounded index currently attributes to a replica.",
    ),
    MetricDef(
        "inhouse_gateway_event_loop_lag_seconds",
        "histogram",
        (),
        f"How late the gateway's event loop ran a timer due every {1000 * LOOP_LAG_PERIOD_S:g} "
        "ms: every request and "
        "every streamed chunk waits as long (a busy core, a long garbage collection, a stall).",
        LOOP_LAG_BUCKETS_S,
    ),
    MetricDef(
        "inhouse_gateway_replica_healthy",
        "gauge",
        ("pool", "replica"),
        "1 while the gateway routes to the replica (health checks pass, not draining), else 0.",
    ),
    MetricDef(
        "inhouse_gateway_discovery_addresses",
        "gauge",
        ("pool",),
        "Addresses of a scaled pool's DNS name (its headless Service) in the gateway's replica "
        "slots.",
    ),
    MetricDef(
        "inhouse_gateway_discovery_failed_lookups",
        "gauge",
        ("pool",),
        "Lookups of a scaled pool's DNS name in a row that failed (an error, a timeout, no "
        "address); 0 once it resolves. Meanwhile the gateway routes to the addresses it last "
        "knew, and new pods get nothing.",
    ),
)

# The vLLM V1 series the rules and dashboards read (the vllm: ones labelled model_name and
# engine; process_start_time_seconds is prometheus_client's process collector, unlabelled, which
# vLLM's /metrics serves too: the flapping-replica alert counts its changes).
VLLM_METRICS: tuple[str, ...] = (
    "process_start_time_seconds",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:time_to_first_token_seconds_bucket",
    "vllm:inter_token_latency_seconds_bucket",
    "vllm:e2e_request_latency_seconds_bucket",
    "vllm:e2e_request_latency_seconds_sum",
    "vllm:e2e_request_latency_seconds_count",
    "vllm:request_queue_time_seconds_bucket",
    "vllm:request_prefill_time_seconds_bucket",
    "vllm:request_decode_time_seconds_bucket",
    "vllm:request_prompt_tokens_bucket",
    "vllm:request_generation_tokens_bucket",
    "vllm:request_num_preemptions_bucket",
    "vllm:iteration_tokens_total_bucket",
    "vllm:time_to_first_token_seconds_sum",
    "vllm:time_to_first_token_seconds_count",
    "vllm:inter_token_latency_seconds_sum",
    "vllm:inter_token_latency_seconds_count",
    "vllm:request_queue_time_seconds_sum",
    "vllm:request_queue_time_seconds_count",
    "vllm:request_prefill_time_seconds_sum",
    "vllm:request_prefill_time_seconds_count",
    "vllm:cache_config_info",
)

# node_exporter's series the dashboards read (its default collectors: cpu, meminfo,
# filesystem, netdev); the live-query test scrapes a real node_exporter for them.
NODE_METRICS: tuple[str, ...] = (
    "node_cpu_seconds_total",
    "node_memory_MemAvailable_bytes",
    "node_memory_MemTotal_bytes",
    "node_filesystem_avail_bytes",
    "node_filesystem_size_bytes",
    "node_network_receive_bytes_total",
    "node_network_transmit_bytes_total",
)


@dataclass(frozen=True, slots=True)
class DcgmField:
    name: str
    kind: Literal["counter", "gauge"]
    help: str
    enabled_by_default: bool


# dcgm-exporter etc/default-counters.csv (NVIDIA/dcgm-exporter @ d5e5f510).
DCGM_METRICS: tuple[DcgmField, ...] = (
    DcgmField("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", True),
    DcgmField("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", True),
    DcgmField("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", True),
    DcgmField("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", True),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", True),
    DcgmField(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        True,
    ),
    DcgmField("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", True),
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", True),
    DcgmField("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", True),
    DcgmField("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", True),
    DcgmField("DCGM_FI_DEV_FB_FREE", "gauge", "Frame buffer memory free (in MiB).", True),
    DcgmField("DCGM_FI_DEV_FB_USED", "gauge", "Frame buffer memory used (in MiB).", True),
    DcgmField(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes.",
        True,
    ),
    DcgmField(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors.",
        True,
    ),
    DcgmField(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors.",
        True,
    ),
    DcgmField(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed.", True
    ),
    DcgmField(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "Ratio of time the graphics engine is active.",
        True,
    ),
    DcgmField(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        True,
    ),
    DcgmField(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        True,
    ),
    DcgmField(
        "DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over PCIe.", True
    ),
    DcgmField("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over PCIe.", True),
    DcgmField(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Total number of single-bit volatile ECC errors.",
        False,
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        False,
    ),
    DcgmField(
        "DCGM_FI_DEV_POWER_VIOLATION",
        "counter",
        "Throttling duration due to power constraints (in us).",
        False,
    ),
    DcgmField(
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "counter",
        "Throttling duration due to thermal constraints (in us).",
        False,
    ),
    DcgmField(
        "DCGM_EXP_XID_ERRORS_COUNT",
        "gauge",
        "Count of XID Errors within user-specified time window (see xid-count-window-size).",
        False,
    ),
)

PROMETHEUS_SYNTHETIC: tuple[str, ...] = ("up",)


def gateway_series_names() -> frozenset[str]:
    return frozenset(n for m in GATEWAY_METRICS for n in m.series_names())


def dcgm_series_names() -> frozenset[str]:
    return frozenset(f.name for f in DCGM_METRICS)


def known_series_names() -> frozenset[str]:
    """Every raw series name rules and dashboards may read."""
    return (
        gateway_series_names()
        | frozenset(VLLM_METRICS)
        | dcgm_series_names()
        | frozenset(NODE_METRICS)
        | frozenset(PROMETHEUS_SYNTHETIC)
    )


def exposition_series_names(text: str) -> frozenset[str]:
    """Series names in a Prometheus text exposition (e.g. a captured vLLM `/metrics`)."""
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return frozenset(names)


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_VARIABLE = re.compile(r"\$\{?\w+\}?")
_IDENT = re.compile(r"(?<![\w.:$])([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?")
_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "inf", "nan"}
    | {"group_left", "group_right", "atan2"}
)


def metric_names_in_promql(expr: str) -> frozenset[str]:
    """The metric names a PromQL expression reads (functions, labels and keywords left out).

    A small scanner, not a parser: it drops strings, label matchers, ranges, grouping clauses
    and Grafana variables, then keeps identifiers not followed by `(`. `promtool check rules`
    checks the syntax; this only feeds the name check.
    """
    text = _STRING.sub(" ", expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _VARIABLE.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return frozenset(names)


def unknown_names(exprs: Iterable[str], also_known: Iterable[str] = ()) -> dict[str, list[str]]:
    """Names used in `exprs` that no source defines, each with the expressions using it."""
    known = known_series_names() | frozenset(also_known)
    unknown: dict[str, list[str]] = {}
    for expr in exprs:
        for name in sorted(metric_names_in_promql(expr) - known):
            unknown.setdefault(name, []).append(expr)
    return unknown
