"""The five dashboards: SLO, engine internals, KV cache, hardware health (DCGM) and tenants.

Every expression reads only names from `metric_names` (vLLM, the gateway, DCGM, `up`) or the
recording rules of prometheus/rules.yaml; a test checks it.
"""

from __future__ import annotations

from inhouse.render.alerts_gpu import hbm_expected_share
from inhouse.render.alerts_triggers import NAMES, rule_threshold
from inhouse.render.grafana import (
    RATE,
    Board,
    Panel,
    Section,
    hist,
    panel,
    quantiles,
    query_variable,
    rate_sum,
    render_boards,
)
from inhouse.render.grafana_cost import cost_board
from inhouse.render.grafana_fleet import fleet_board, latency_board
from inhouse.render.grafana_tenants import tenant_board
from inhouse.render.layout import EngineLayout, nvml_name, slo_of
from inhouse.spec.catalog import get_gpu
from inhouse.spec.stack import PoolSpec, StackSpec
from inhouse.spec.triggers import TOKEN_HISTOGRAMS

MODEL = 'model_name=~"$model_name"'
TENANT = 'tenant=~"$tenant"'
GPU = "{{Hostname}}{{hostname}} GPU {{gpu}}"


def slo_board(stack: StackSpec, engines: EngineLayout) -> Board:
    board = Board(
        "slo",
        "SLO",
        "Latency percentiles against each pool's alarm, errors and error-budget burn. Alerts: "
        "InhouseTTFTP95OverSLO, InhouseITLP95OverSLO, InhouseErrorBudgetBurnFast/Slow.",
    )
    ttft = hist("0.95", "inhouse_gateway_ttft_seconds", by="model")
    board.sections.append(
        (
            "Gateway (what clients see)",
            [
                panel("TTFT p95 by model", "Gateway arrival to first token, LoRA adapters "
                      "included.", (ttft, "{{model}}"), unit="s"),
                panel("Requests by status", "Gateway responses per second by HTTP status.",
                      (rate_sum("inhouse_gateway_requests_total", by="code"), "{{code}}"),
                      unit="reqps"),
            ],
        )
    )  # fmt: skip
    for pool in engines.pools:
        title = f"Pool {pool.name} ({pool.client_model_name})"
        board.sections.append((title, pool_slo_panels(pool)))
    return board


def pool_slo_panels(pool: PoolSpec) -> list[Panel]:
    slo = slo_of(pool)
    sel = f'model_name="{pool.client_model_name}"'
    budget = 1 - slo.availability

    def alarm_s(key: str) -> float | None:
        ms = slo.alarm_ms(key)  # type: ignore[arg-type]
        return None if ms is None else ms / 1000

    gateway_e2e = hist("0.95", "inhouse_gateway_e2e_seconds", f'pool="{pool.name}"', "model")
    burn = [
        (f'inhouse:gateway_error_ratio:rate{w}{{pool="{pool.name}"}} / {budget:g}', w)
        for w in ("1h", "6h")
    ]
    return [
        Panel("TTFT", f"vLLM time to first token; line: alarm {slo.alarm_ms('ttft')} ms.",
              quantiles("vllm:time_to_first_token_seconds", sel), "s", alarm_s("ttft")),
        Panel("ITL", f"vLLM inter-token latency; line: alarm {slo.alarm_ms('itl')} ms.",
              quantiles("vllm:inter_token_latency_seconds", sel), "s", alarm_s("itl")),
        Panel("End-to-end latency", "vLLM request latency; gateway p95 per requested model.",
              (*quantiles("vllm:e2e_request_latency_seconds", sel),
               (gateway_e2e, "gateway {{model}} p95")), "s", alarm_s("e2e")),
        Panel("Error budget burn", f"5xx share / budget ({budget:.4g}): 1 spends the budget "
              "exactly over the SLO window; pages at 14.4 over 1 h and 5 m.",
              tuple(burn), "short", 14.4),
    ]  # fmt: skip


def engine_board(stack: StackSpec, engines: EngineLayout) -> Board:
    del stack
    board = Board(
        "engine",
        "Engine internals",
        "vLLM's scheduler per replica: batch, queue, KV usage, prefix hits, preemptions.",
        variables=[
            query_variable(
                "model_name", "Model", "label_values(vllm:num_requests_running, model_name)"
            )
        ],
    )
    board.sections += [_scheduler_section(), _throughput_section()]
    return board


def _scheduler_section() -> Section:
    """Batch, queue, KV usage, prefix hits, preemptions and finishes, per replica."""
    hit_rate = (
        f"{rate_sum('vllm:prefix_cache_hits_total', MODEL, 'model_name')} / "
        f"{rate_sum('vllm:prefix_cache_queries_total', MODEL, 'model_name')}"
    )
    return (
        "Scheduler",
        [
            panel("Running requests", "Sequences in the batch.",
                  (f"sum by (pod) (vllm:num_requests_running{{{MODEL}}})", "{{pod}}")),
            panel("Waiting requests", "vLLM's queue; KEDA scales multi-node pools on it.",
                  (f"sum by (pod) (vllm:num_requests_waiting{{{MODEL}}})", "{{pod}}")),
            panel("KV cache usage", "Share of KV blocks in use; pages above 95% for 60 s.",
                  (f"max by (pod) (vllm:kv_cache_usage_perc{{{MODEL}}})", "{{pod}}"),
                  unit="percentunit", threshold=0.95),
            panel("Prefix-cache hit rate", "Prompt tokens served from the cache.",
                  (hit_rate, "{{model_name}}"), unit="percentunit"),
            panel("Preemptions", "Sequences evicted for lack of KV, per second.",
                  (rate_sum("vllm:num_preemptions_total", MODEL, "pod"), "{{pod}}"),
                  unit="ops"),
            panel("Finished requests", "By reason: stop, length, abort, error, repetition.",
                  (rate_sum("vllm:request_success_total", MODEL, "finished_reason"),
                   "{{finished_reason}}"), unit="reqps"),
        ],
    )  # fmt: skip


def _throughput_section() -> Section:
    """Tokens per second and per step, queue, prefill and decode times, replicas up."""
    return (
        "Throughput and phases",
        [
            panel("Tokens per second", "Prefill (prompt) and decode (generation) tokens.",
                  (rate_sum("vllm:prompt_tokens_total", MODEL, "model_name"),
                   "{{model_name}} prompt"),
                  (rate_sum("vllm:generation_tokens_total", MODEL, "model_name"),
                   "{{model_name}} generation")),
            Panel("Tokens per engine step", "Batch size in tokens.",
                  quantiles("vllm:iteration_tokens_total", MODEL)),
            Panel("Queue time", "Time in vLLM's waiting queue.",
                  quantiles("vllm:request_queue_time_seconds", MODEL), "s"),
            panel("Prefill and decode time p95", "Per request.",
                  (hist("0.95", "vllm:request_prefill_time_seconds", MODEL), "prefill"),
                  (hist("0.95", "vllm:request_decode_time_seconds", MODEL), "decode"),
                  unit="s"),
            panel("Replicas up", "Scraped engines per pool and the gateway's view.",
                  ('sum by (job) (up{job=~".+-engine"})', "{{job}} scraped"),
                  ("sum by (pool) (inhouse_gateway_replica_healthy)", "{{pool}} routable")),
        ],
    )  # fmt: skip


def token_length_panel(stack: StackSpec, title: str, what: str, signal: str) -> Panel:
    """p50/p95/p99 of one of vLLM's token-count histograms, with a line at the level of each
    of the plan's re-plan triggers on its p95 (the number in the trigger's rule)."""
    histogram = TOKEN_HISTOGRAMS[signal][0]
    triggers = [t for t in stack.triggers if t.signal == signal]
    lines = tuple(
        (f"vector({rule_threshold(t):.10g})", f"{t.model} re-plan trigger") for t in triggers
    )
    drawn = f"; line: {NAMES[signal]} files a ticket above it on p95" if triggers else ""
    return Panel(title, f"{what}{drawn}.", (*quantiles(histogram, MODEL), *lines))


def kv_board(stack: StackSpec, engines: EngineLayout) -> Board:
    board = Board(
        "kv-cache",
        "KV cache",
        "KV usage and prefix reuse per replica, and the router's view of it: the cache-aware "
        "routing loop end to end.",
        variables=[
            query_variable(
                "model_name", "Model", "label_values(vllm:kv_cache_usage_perc, model_name)"
            )
        ],
    )
    hits = rate_sum("vllm:prefix_cache_hits_total", MODEL, "pod")
    queries = rate_sum("vllm:prefix_cache_queries_total", MODEL, "pod")
    board.sections.append(
        (
            "Engine KV cache",
            [
                panel("KV blocks used and free per replica", "Shares of the replica's KV "
                      "blocks (its block count: the table below); 1 used = full.",
                      (f"vllm:kv_cache_usage_perc{{{MODEL}}}", "{{pod}} used"),
                      (f"1 - vllm:kv_cache_usage_perc{{{MODEL}}}", "{{pod}} free"),
                      unit="percentunit", threshold=0.95),
                panel("KV cache size per replica", "vLLM's cache config: blocks and block "
                      "size (tokens) per replica, as labels.",
                      ("max by (pod, num_gpu_blocks, block_size) (vllm:cache_config_info)",
                       "{{pod}}: {{num_gpu_blocks}} blocks of {{block_size}}"), kind="table"),
                panel("Prefix hit rate per replica", "Uneven rates: the router splits sessions.",
                      (f"{hits} / {queries}", "{{pod}}"), unit="percentunit"),
                panel("Prefix-cache tokens", "Queried and hit prompt tokens per second.",
                      (rate_sum("vllm:prefix_cache_queries_total", MODEL), "queried"),
                      (rate_sum("vllm:prefix_cache_hits_total", MODEL), "hit")),
                Panel("Preemptions per request", "How often a request was recomputed.",
                      quantiles("vllm:request_num_preemptions", MODEL)),
                panel("Preemptions and evictions", "Sequences preempted per second. vLLM 0.32 "
                      "counts no prefix-block evictions: a falling hit rate while usage stays "
                      "high is what evictions look like.",
                      (rate_sum("vllm:num_preemptions_total", MODEL, "pod"), "{{pod}} preempted"),
                      unit="ops"),
                token_length_panel(stack, "Prompt length", "Prompt tokens per request",
                                   "prompt_tokens_p95"),
                token_length_panel(stack, "Output length", "Generated tokens per request",
                                   "output_tokens_p95"),
            ],
        )
    )  # fmt: skip
    board.sections.append(
        (
            "Router",
            [
                panel("Prefix index blocks", "Blocks the gateway's prefix index gives a replica.",
                      ("sum by (pool, replica) (inhouse_gateway_prefix_index_blocks)",
                       "{{pool}} {{replica}}")),
                panel("Routing decisions", "What chose the replica: prefix, load, affinity...",
                      (rate_sum("inhouse_gateway_routing_decisions_total", by="pool, reason"),
                       "{{pool}} {{reason}}"), unit="ops"),
            ],
        )
    )  # fmt: skip
    return board


def hardware_board(stack: StackSpec, engines: EngineLayout) -> Board:
    powers = sorted({get_gpu(p.gpu).power_w for p in engines.pools})
    board = Board(
        "hardware",
        "Hardware health (DCGM)",
        "dcgm-exporter: ECC, XID, temperature, power, utilization, memory, NVLink.",
    )
    dbe = "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[1h])"
    remap = "increase(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS[1h])"
    board.sections.append(
        (
            "Health",
            [
                panel("Double-bit ECC errors (1 h)", "Any increase pages: hardware retirement.",
                      (dbe, GPU), (remap, GPU + " remapped"), threshold=0.5),
                panel("Single-bit ECC errors (1 h)", "Corrected; a steady climb on one GPU "
                      "predicts double-bit errors.",
                      ("increase(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL[1h])", GPU)),
                panel("Last XID", "48, 79 and 95 page; others are mostly application errors.",
                      ("DCGM_FI_DEV_XID_ERRORS", GPU)),
                panel("GPU temperature", "Ticket above 85 C for 5 minutes.",
                      ("DCGM_FI_DEV_GPU_TEMP", GPU), unit="celsius", threshold=85),
                panel("Power draw", "Against the board's power limit.",
                      ("DCGM_FI_DEV_POWER_USAGE", GPU), unit="watt",
                      threshold=powers[0] if len(powers) == 1 else None),
                panel("Throttling", "Share of time clocks were capped by power or heat.",
                      (f"rate(DCGM_FI_DEV_POWER_VIOLATION[{RATE}]) / 1e6", GPU + " power"),
                      (f"rate(DCGM_FI_DEV_THERMAL_VIOLATION[{RATE}]) / 1e6", GPU + " thermal"),
                      unit="percentunit"),
            ],
        )
    )  # fmt: skip
    board.sections.append(
        (
            "Utilization",
            [
                panel("GPU utilization", "Time a kernel ran.",
                      ("DCGM_FI_DEV_GPU_UTIL", GPU), unit="percent"),
                panel("SM, tensor and memory activity", "Graphics engine (SMs busy), tensor "
                      "pipes, HBM interface.",
                      ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", GPU + " SM"),
                      ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", GPU + " tensor"),
                      ("DCGM_FI_PROF_DRAM_ACTIVE", GPU + " HBM"), unit="percentunit"),
                hbm_bandwidth_panel(engines),
                panel("SM and memory clocks", "A clock below its peers is throttling.",
                      ("DCGM_FI_DEV_SM_CLOCK", GPU + " SM"),
                      ("DCGM_FI_DEV_MEM_CLOCK", GPU + " memory"), unit="megahertz"),
                panel("HBM used", "vLLM takes gpu_memory_utilization of it at start.",
                      ("DCGM_FI_DEV_FB_USED", GPU + " used"),
                      ("DCGM_FI_DEV_FB_FREE", GPU + " free"), unit="decmbytes"),
                panel("NVLink traffic", "Tensor-parallel all-reduces.",
                      (f"rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL[{RATE}])", GPU)),
            ],
        )
    )  # fmt: skip
    board.sections.append(("Node (node_exporter)", node_panels()))
    return board


def hbm_bandwidth_panel(engines: EngineLayout) -> Panel:
    """Achieved HBM bandwidth (DRAM activity x the GPU's peak) against what decode reaches
    while kernels run (the perf model's eta_bw x peak x graphics-engine activity)."""
    targets = []
    for gpu in sorted({get_gpu(p.gpu).name for p in engines.pools}):
        spec = get_gpu(gpu)
        sel = f'{{modelName="{nvml_name(gpu)}"}}'
        peak = spec.hbm_bw_tbps * 1e12
        targets.append((f"DCGM_FI_PROF_DRAM_ACTIVE{sel} * {peak:g}", GPU))
        targets.append(
            (
                f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{sel} * {hbm_expected_share() * peak:.4g}",
                GPU + " expected",
            )
        )
    return Panel(
        "HBM bandwidth",
        "Achieved (DRAM activity x peak) against expected while kernels run; the ticket "
        "InhouseGPUHBMBandwidthLow files below 80% of expected under load.",
        tuple(targets),
        "Bps",
    )


def node_panels() -> list[Panel]:
    fs = 'fstype!~"tmpfs|overlay|squashfs"'
    return [
        panel("CPU busy", "Tokenizers, the API server, the gateway: all on these cores.",
              (f'1 - avg by (instance) (rate(node_cpu_seconds_total{{mode="idle"}}[{RATE}]))',
               "{{instance}}"), unit="percentunit"),
        panel("Memory available", "Host KV tier and page cache live here.",
              ("node_memory_MemAvailable_bytes / node_memory_MemTotal_bytes", "{{instance}}"),
              unit="percentunit"),
        panel("Least free filesystem", "The NVMe weight cache must hold the next model.",
              (f"min by (instance) (node_filesystem_avail_bytes{{{fs}}} / "
               f"node_filesystem_size_bytes{{{fs}}})", "{{instance}}"), unit="percentunit"),
        panel("Network", "Received and sent bytes per second, per device.",
              (f"rate(node_network_receive_bytes_total[{RATE}])", "{{instance}} {{device}} in"),
              (f"rate(node_network_transmit_bytes_total[{RATE}])",
               "{{instance}} {{device}} out"), unit="Bps"),
    ]  # fmt: skip


BOARDS = (
    fleet_board,
    slo_board,
    latency_board,
    engine_board,
    kv_board,
    hardware_board,
    cost_board,
    tenant_board,
)


def render_grafana(stack: StackSpec, engines: EngineLayout) -> dict[str, str]:
    return render_boards(stack, [make(stack, engines) for make in BOARDS])
