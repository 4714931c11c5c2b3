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


class _Series:
    """Makes one registry's `vllm:` series, each as its child labelled with the engine's labels."""

    def __init__(self, registry: CollectorRegistry, labels: dict[str, str]) -> None:
        self.registry = registry
        self.labels = labels

    def counter(self, name: str, doc: str) -> Counter:
        return Counter(f"vllm:{name}", doc, LABELS, registry=self.registry).labels(**self.labels)

    def gauge(self, name: str, doc: str) -> Gauge:
        return Gauge(f"vllm:{name}", doc, LABELS, registry=self.registry).labels(**self.labels)

    def histogram(self, name: str, doc: str, buckets: Sequence[float]) -> Histogram:
        metric = Histogram(f"vllm:{name}", doc, LABELS, buckets=buckets, registry=self.registry)
        return metric.labels(**self.labels)

    def counters(self, name: str, doc: str, label: str, values: tuple[str, ...]) -> list[Counter]:
        metric = Counter(f"vllm:{name}", doc, (*LABELS, label), registry=self.registry)
        return [metric.labels(**self.labels, **{label: v}) for v in values]

    def gauges(self, name: str, doc: str, label: str, values: tuple[str, ...]) -> list[Gauge]:
        metric = Gauge(f"vllm:{name}", doc, (*LABELS, label), registry=self.registry)
        return [metric.labels(**self.labels, **{label: v}) for v in values]


MFU_NOTE = "(for Model Flops Utilization calculations)."
EXTERNAL_NOTE = "cross-instance cache sharing, in terms of number of"


class EngineMetrics:
    """The registry of one engine server. Not shared between servers (no global state).

    Series are registered in vLLM 0.32's order (the exposition lists them so); a series made and
    never set is one vLLM exports that the simulated engine has no figure for (it shows 0)."""

    def __init__(self, model_name: str, max_model_len: int, cache_info: dict[str, str]) -> None:
        self.registry = registry = CollectorRegistry()
        process_collector.ProcessCollector(registry=registry)
        platform_collector.PlatformCollector(registry=registry)
        gc_collector.GCCollector(registry=registry)
        series = _Series(registry, {"engine": "0", "model_name": model_name})
        self._scheduler_series(series)
        self._token_series(series, model_name)
        self._request_histograms(series, build_1_2_5_buckets(max_model_len))
        info = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            sorted({*cache_info, "engine"}),
            registry=registry,
        )
        info.labels(**cache_info, engine="0").set(1)
        self._lag_series(series)
        self._synced = EngineSnapshot(0, 0, 0.0, 0, 0, 0)

    def _scheduler_series(self, s: _Series) -> None:
        s.counter(
            "estimated_flops_per_gpu",
            f"Estimated number of floating point operations per GPU {MFU_NOTE}",
        )
        s.counter(
            "estimated_read_bytes_per_gpu",
            f"Estimated number of bytes read from memory per GPU {MFU_NOTE}",
        )
        s.counter(
            "estimated_write_bytes_per_gpu",
            f"Estimated number of bytes written to memory per GPU {MFU_NOTE}",
        )
        self.running = s.gauge(
            "num_requests_running", "Number of requests in model execution batches."
        )
        self.waiting = s.gauge(
            "num_requests_waiting", "Number of requests waiting to be processed."
        )
        self.waiting_capacity, _ = s.gauges(
            "num_requests_waiting_by_reason",
            WAITING_BY_REASON_HELP,
            "reason",
            ("capacity", "deferred"),
        )
        awake, _, _ = s.gauges(
            "engine_sleep_state",
            SLEEP_STATE_HELP,
            "sleep_state",
            ("awake", "weights_offloaded", "discard_all"),
        )
        awake.set(1)
        self.kv_usage = s.gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.prefix_queries = s.counter(
            "prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
        )
        self.prefix_hits = s.counter(
            "prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        s.counter(
            "external_prefix_cache_queries",
            f"External prefix cache queries from KV connector {EXTERNAL_NOTE} queried tokens.",
        )
        s.counter(
            "external_prefix_cache_hits",
            f"External prefix cache hits from KV connector {EXTERNAL_NOTE} cached tokens.",
        )
        s.counter(
            "mm_cache_queries", "Multi-modal cache queries, in terms of number of queried items."
        )
        s.counter("mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.")
        self.preemptions = s.counter(
            "num_preemptions", "Cumulative number of preemption from the engine."
        )

    def _token_series(self, s: _Series, model_name: str) -> None:
        self.prompt_tokens = s.counter("prompt_tokens", "Number of prefill tokens processed.")
        self.prompt_compute, self.prompt_cache_hit, _ = s.counters(
            "prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            "source",
            ("local_compute", "local_cache_hit", "external_kv_transfer"),
        )
        self.prompt_cached = s.counter(
            "prompt_tokens_cached", "Number of cached prompt tokens (local + external)."
        )
        self.cached_device, self.cached_host, *_ = s.counters(
            "prompt_tokens_cached_by_source",
            CACHED_BY_SOURCE_HELP,
            "source",
            ("device", "host", "p2p", "disk", "external_unspecified"),
        )
        self.generation_tokens = s.counter(
            "generation_tokens", "Number of generation tokens processed."
        )
        successes = s.counters(
            "request_success",
            "Count of successfully processed requests.",
            "finished_reason",
            FINISHED_REASONS,
        )
        self.success = dict(zip(FINISHED_REASONS, successes, strict=True))
        rejections = Counter(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            ("model_name", "reason"),
            registry=s.registry,
        )
        self.rejected_reqs = rejections.labels(model_name=model_name, reason="max_num_queued_reqs")
        rejections.labels(model_name=model_name, reason="max_num_queued_tokens")

    def _request_histograms(self, s: _Series, tokens: Sequence[float]) -> None:
        """Per-request and per-step histograms; `tokens` are 1-2-5 buckets up to max_model_len."""
        self.req_prompt = s.histogram(
            "request_prompt_tokens", "Number of prefill tokens processed.", tokens
        )
        self.req_generation = s.histogram(
            "request_generation_tokens", "Number of generation tokens processed.", tokens
        )
        self.iteration_tokens = s.histogram(
            "iteration_tokens_total",
            "Histogram of number of tokens per engine_step.",
            ITERATION_TOKENS_BUCKETS,
        )
        self.max_gen = s.histogram(
            "request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            tokens,
        )
        self.params_n = s.histogram(
            "request_params_n", "Histogram of the n request parameter.", PARAMS_N_BUCKETS
        )
        self.params_max_tokens = s.histogram(
            "request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokens
        )
        self.ttft = s.histogram(
            "time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
        self.itl = s.histogram(
            "inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            ITL_BUCKETS,
        )
        self.tpot = s.histogram(
            "request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            ITL_BUCKETS,
        )
        latency = REQUEST_LATENCY_BUCKETS
        self.e2e = s.histogram(
            "e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", latency
        )
        self.queue = s.histogram(
            "request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            latency,
        )
        self.inference = s.histogram(
            "request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            latency,
        )
        self.prefill = s.histogram(
            "request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            latency,
        )
        self.decode = s.histogram(
            "request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            latency,
        )
        self.req_preemptions = s.histogram(
            "request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            NUM_PREEMPTIONS_BUCKETS,
        )
        self.req_kv_computed = s.histogram(
            "request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            tokens,
        )

    def _lag_series(self, s: _Series) -> None:
        """Ours: how late steps are delivered against the simulated clock."""
        labels, registry = s.labels, s.registry
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

    def observe_finished(self, record: FinishedRecord) -> None:
        self.success[record.finished_reason].inc()
        self.req_prompt.observe(record.num_prompt_tokens)
        self.req_generation.observe(record.num_generation_tokens)
        # NOTE: generated tokens (the most of the `n` outputs), not the max_tokens asked for.
        self.max_gen.observe(record.num_generation_tokens)
        self.params_max_tokens.observe(record.max_tokens)
        self.params_n.observe(record.n)
        self.e2e.observe(record.e2e_s)
        self.queue.observe(record.queue_s)
        self.inference.observe(record.inference_s)
        self.prefill.observe(record.prefill_s)
        self.decode.observe(record.decode_s)
        # Every request, as vLLM: 0 when there was no token after the first.
        gaps = record.num_generation_tokens - 1
        self.tpot.observe(record.decode_s / gaps if gaps > 0 else 0.0)
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
