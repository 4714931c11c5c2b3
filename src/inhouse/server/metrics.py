"""vLLM's Prometheus metrics, by vLLM's names, types, labels and buckets (vLLM 0.32/0.33 V1).

Every engine series carries `model_name` (the first served model name) and `engine` ("0").
Counters are exported with `_total` (and `_created`) by `prometheus_client`, as vLLM's are.
Gauges and the engine's own cumulative counters (prefix-cache tokens, preemptions) are read from
the engine core at scrape time; per-request and per-token histograms are observed as requests
progress. Our own series (host lag) use the `inhouse:` prefix so vLLM's namespace stays exact.
Source of every name and bucket: shared/reference/vllm-api-and-ops.md §1 and metrics_0.32.txt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    gc_collector,
    generate_latest,
    platform_collector,
    process_collector,
)

from inhouse.spec.vllm_buckets import (
    ITERATION_TOKENS_BUCKETS,
    ITL_BUCKETS_S,
    REQUEST_LATENCY_BUCKETS_S,
    TTFT_BUCKETS_S,
    build_1_2_5_buckets,
)

TTFT_BUCKETS = TTFT_BUCKETS_S
ITL_BUCKETS = ITL_BUCKETS_S
REQUEST_LATENCY_BUCKETS = REQUEST_LATENCY_BUCKETS_S
PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
NUM_PREEMPTIONS_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
LAG_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LABELS = ("engine", "model_name")


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """What the scrape reads from the engine core."""

    num_running: int
    num_waiting: int
    kv_usage: float
    prefix_queries: int
    prefix_hits: int
    num_preemptions: int


@dataclass(frozen=True, slots=True)
class FinishedRecord:
    """One finished request's timings (seconds) and counts, for the per-request histograms."""

    finished_reason: str
    num_prompt_tokens: int
    num_generation_tokens: int
    max_tokens: int
    n: int
    queue_s: float
    prefill_s: float
    decode_s: float
    inference_s: float
    e2e_s: float
    num_preemptions: int
    num_computed_prompt_tokens: int


# (attribute, name, help, kind, buckets) of every plain engine series, in vLLM 0.32's order;
# kind is "counter", "gauge" or a histogram bucket family. Attribute "" = exported, never set.
_TOKENS = "tokens"  # 1-2-5 buckets up to max_model_len
_SERIES: tuple[tuple[str, str, str, str], ...] = (
    (
        "",
        "estimated_flops_per_gpu",
        "Estimated number of floating point operations per GPU "
        "(for Model Flops Utilization calculations).",
        "counter",
    ),
    (
        "",
        "estimated_read_bytes_per_gpu",
        "Estimated number of bytes read from memory per GPU "
        "(for Model Flops Utilization calculations).",
        "counter",
    ),
    (
        "",
        "estimated_write_bytes_per_gpu",
        "Estimated number of bytes written to memory per GPU "
        "(for Model Flops Utilization calculations).",
        "counter",
    ),
    ("running", "num_requests_running", "Number of requests in model execution batches.", "gauge"),
    ("waiting", "num_requests_waiting", "Number of requests waiting to be processed.", "gauge"),
)
_SERIES_AFTER_SLEEP: tuple[tuple[str, str, str, str], ...] = (
    ("kv_usage", "kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "gauge"),
    (
        "prefix_queries",
        "prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        "counter",
    ),
    (
        "prefix_hits",
        "prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        "counter",
    ),
    (
        "",
        "external_prefix_cache_queries",
        "External prefix cache queries from KV connector "
        "cross-instance cache sharing, in terms of number of queried tokens.",
        "counter",
    ),
    (
        "",
        "external_prefix_cache_hits",
        "External prefix cache hits from KV connector "
        "cross-instance cache sharing, in terms of number of cached tokens.",
        "counter",
    ),
    (
        "",
        "mm_cache_queries",
        "Multi-modal cache queries, in terms of number of queried items.",
        "counter",
    ),
    ("", "mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.", "counter"),
    (
        "preemptions",
        "num_preemptions",
        "Cumulative number of preemption from the engine.",
        "counter",
    ),
    ("prompt_tokens", "prompt_tokens", "Number of prefill tokens processed.", "counter"),
)
_HISTOGRAMS: tuple[tuple[str, str, str, str], ...] = (
    ("req_prompt", "request_prompt_tokens", "Number of prefill tokens processed.", _TOKENS),
    (
        "req_generation",
        "request_generation_tokens",
        "Number of generation tokens processed.",
        _TOKENS,
    ),
    (
        "iteration_tokens",
        "iteration_tokens_total",
        "Histogram of number of tokens per engine_step.",
        "iteration",
    ),
    (
        "max_gen",
        "request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        _TOKENS,
    ),
    ("params_n", "request_params_n", "Histogram of the n request parameter.", "n"),
    (
        "params_max_tokens",
        "request_params_max_tokens",
        "Histogram of the max_tokens request parameter.",
        _TOKENS,
    ),
    ("ttft", "time_to_first_token_seconds", "Histogram of time to first token in seconds.", "ttft"),
    ("itl", "inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", "itl"),
    (
        "tpot",
        "request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        "itl",
    ),
    (
        "e2e",
        "e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        "latency",
    ),
    (
        "queue",
        "request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        "latency",
    ),
    (
        "inference",
        "request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        "latency",
    ),
    (
        "prefill",
        "request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        "latency",
    ),
    (
        "decode",
        "request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        "latency",
    ),
    (
        "req_preemptions",
        "request_num_preemptions",
        "Histogram of the number of times a request was preempted.",
        "preemptions",
    ),
    (
        "req_kv_computed",
        "request_prefill_kv_computed_tokens",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        _TOKENS,
    ),
)
WAITING_BY_REASON_HELP = (
    "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
    "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked "
    "status). Sum of all reasons equals vllm:num_requests_waiting."
)
SLEEP_STATE_HELP = (
    "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
    "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2."
)
CACHED_BY_SOURCE_HELP = (
    "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host "
    "(offloaded to DRAM), disk, p2p (transferred from another vLLM instance) or "
    "external_unspecified. Counted at admission; sums to vllm:prefix_cache_hits + "
    "vllm:external_prefix_cache_hits."
)


class EngineMetrics:
    """The registry of one engine server. Not shared between servers (no global state)."""

    # Series made from the tables above (labelled children).
    running: Gauge
    waiting: Gauge
    kv_usage: Gauge
    prefix_queries: Counter
    prefix_hits: Counter
    preemptions: Counter
    prompt_tokens: Counter
    req_prompt: Histogram
    req_generation: Histogram
    iteration_tokens: Histogram
    max_gen: Histogram
    params_n: Histogram
    params_max_tokens: Histogram
    ttft: Histogram
    itl: Histogram
    tpot: Histogram
    e2e: Histogram
    queue: Histogram
    inference: Histogram
    prefill: Histogram
    decode: Histogram
    req_preemptions: Histogram
    req_kv_computed: Histogram

    def __init__(self, model_name: str, max_model_len: int, cache_info: dict[str, str]) -> None:
        self.registry = registry = CollectorRegistry()
        process_collector.ProcessCollector(registry=registry)
        platform_collector.PlatformCollector(registry=registry)
        gc_collector.GCCollector(registry=registry)
        self._labels = labels = {"engine": "0", "model_name": model_name}
        buckets: dict[str, Sequence[float]] = {
            _TOKENS: build_1_2_5_buckets(max_model_len),
            "iteration": ITERATION_TOKENS_BUCKETS,
            "n": PARAMS_N_BUCKETS,
            "ttft": TTFT_BUCKETS,
            "itl": ITL_BUCKETS,
            "latency": REQUEST_LATENCY_BUCKETS,
            "preemptions": NUM_PREEMPTIONS_BUCKETS,
        }

        def add(series: tuple[tuple[str, str, str, str], ...]) -> None:
            for attr, name, doc, kind in series:
                metric: Counter | Gauge | Histogram
                if kind == "counter":
                    metric = Counter(f"vllm:{name}", doc, LABELS, registry=registry)
                elif kind == "gauge":
                    metric = Gauge(f"vllm:{name}", doc, LABELS, registry=registry)
                else:
                    metric = Histogram(
                        f"vllm:{name}", doc, LABELS, buckets=buckets[kind], registry=registry
                    )
                child = metric.labels(**labels)
                if attr:
                    setattr(self, attr, child)

        def family(
            kind: type[Counter] | type[Gauge],
            name: str,
            doc: str,
            label: str,
            values: tuple[str, ...],
        ) -> list[Any]:
            metric = kind(f"vllm:{name}", doc, (*LABELS, label), registry=registry)
            return [metric.labels(**labels, **{label: v}) for v in values]

        add(_SERIES)
        self.waiting_capacity, _ = family(
            Gauge,
            "num_requests_waiting_by_reason",
            WAITING_BY_REASON_HELP,
            "reason",
            ("capacity", "deferred"),
        )
        awake, _, _ = family(
            Gauge,
            "engine_sleep_state",
            SLEEP_STATE_HELP,
            "sleep_state",
            ("awake", "weights_offloaded", "discard_all"),
        )
        awake.set(1)
        add(_SERIES_AFTER_SLEEP)
        self.prompt_compute, self.prompt_cache_hit, _ = family(
            Counter,
            "prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            "source",
            ("local_compute", "local_cache_hit", "external_kv_transfer"),
        )
        self.prompt_cached = Counter(
            "vllm:prompt_tokens_cached",
            "Number of cached prompt tokens (local + external).",
            LABELS,
            registry=registry,
        ).labels(**labels)
        self.cached_device, self.cached_host, *_ = family(
            Counter,
            "prompt_tokens_cached_by_source",
            CACHED_BY_SOURCE_HELP,
            "source",
            ("device", "host", "p2p", "disk", "external_unspecified"),
        )
        self.generation_tokens = Counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            LABELS,
            registry=registry,
        ).labels(**labels)
        self.success = dict(
            zip(
                FINISHED_REASONS,
                family(
                    Counter,
                    "request_success",
                    "Count of successfully processed requests.",
                    "finished_reason",
                    FINISHED_REASONS,
                ),
                strict=True,
            )
        )
        rejections = Counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ("model_name", "reason"),
            registry=registry,
        )
        self.rejected_reqs = rejections.labels(model_name=model_name, reason="max_num_queued_reqs")
        rejections.labels(model_name=model_name, reason="max_num_queued_tokens")
        add(_HISTOGRAMS)
        info = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            sorted({*cache_info, "engine"}),
            registry=registry,
        )
        info.labels(**cache_info, engine="0").set(1)
        # Ours: how late steps are delivered against the simulated clock.
        self.lag = Gauge(
            "inhouse:engine_clock_lag_seconds",
            "How late the last engine step was delivered against the simulated clock.",
            LABELS,
            registry=registry,
        ).labels(**labels)
        self.lag_hist = Histogram(
            "inhouse:engine_step_lag_seconds",
            "Lateness of each engine step against the simulated clock.",
            LABELS,
            buckets=LAG_BUCKETS,
            registry=registry,
        ).labels(**labels)
        self.lagging_steps = Counter(
            "inhouse:engine_lagging_steps",
            "Engine steps delivered later than the lag tolerance (the host could not keep pace).",
            LABELS,
            registry=registry,
        ).labels(**labels)
        self.stretched = Counter(
            "inhouse:engine_stretched_seconds",
            "Simulated time given up because the host fell behind by more than the catch-up "
            "window: client timings were stretched by this much.",
            LABELS,
            registry=registry,
        ).labels(**labels)
        self._synced = EngineSnapshot(0, 0, 0.0, 0, 0, 0)

    def observe_finished(self, record: FinishedRecord) -> None:
        self.success[record.finished_reason].inc()
        self.req_prompt.observe(record.num_prompt_tokens)
        self.req_generation.observe(record.num_generation_tokens)
        self.max_gen.observe(record.max_tokens)
        self.params_max_tokens.observe(record.max_tokens)
        self.params_n.observe(record.n)
        self.e2e.observe(record.e2e_s)
        self.queue.observe(record.queue_s)
        self.inference.observe(record.inference_s)
        self.prefill.observe(record.prefill_s)
        self.decode.observe(record.decode_s)
        if record.num_generation_tokens > 1:
            self.tpot.observe(record.decode_s / (record.num_generation_tokens - 1))
        self.req_preemptions.observe(record.num_preemptions)
        self.req_kv_computed.observe(record.num_computed_prompt_tokens)

    def observe_prefilled(self, num_prompt_tokens: int, num_cached: int, num_host: int) -> None:
        """A request's prompt is done: vLLM counts its tokens by where they came from."""
        self.prompt_tokens.inc(num_prompt_tokens)
        self.prompt_compute.inc(num_prompt_tokens - num_cached)
        self.prompt_cache_hit.inc(num_cached)
        self.prompt_cached.inc(num_cached)
        self.cached_device.inc(num_cached - num_host)
        self.cached_host.inc(num_host)

    def render(self, snapshot: EngineSnapshot) -> bytes:
        """The exposition text, after bringing engine-state series up to date."""
        self.running.set(snapshot.num_running)
        self.waiting.set(snapshot.num_waiting)
        self.waiting_capacity.set(snapshot.num_waiting)
        self.kv_usage.set(snapshot.kv_usage)
        last = self._synced
        self.prefix_queries.inc(max(0, snapshot.prefix_queries - last.prefix_queries))
        self.prefix_hits.inc(max(0, snapshot.prefix_hits - last.prefix_hits))
        self.preemptions.inc(max(0, snapshot.num_preemptions - last.num_preemptions))
        self._synced = snapshot
        return generate_latest(self.registry)
