"""vLLM's metric names, types and buckets, as the simulated engine exposes them."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from inhouse.server.metrics import (
    EngineMetrics,
    EngineSnapshot,
    FinishedRecord,
    build_1_2_5_buckets,
)


def test_1_2_5_buckets() -> None:
    assert build_1_2_5_buckets(512) == [1, 2, 5, 10, 20, 50, 100, 200, 500]
    assert build_1_2_5_buckets(1) == [1]


def test_every_series_has_vllms_labels_and_engine_state_is_synced() -> None:
    metrics = EngineMetrics("tiny", 512, {"block_size": "16"})
    text = metrics.render(EngineSnapshot(2, 3, 0.5, 100, 40, 1)).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["vllm:num_requests_running"].type == "gauge"
    assert families["vllm:prefix_cache_hits"].type == "counter"
    assert families["vllm:time_to_first_token_seconds"].type == "histogram"
    for family in families.values():
        if not family.name.startswith("vllm:"):
            continue
        for sample in family.samples:
            if family.name == "vllm:cache_config_info":  # vLLM's info series: engine, no model
                assert sample.labels["engine"] == "0" and "model_name" not in sample.labels
                continue
            assert sample.labels["model_name"] == "tiny"
            if not family.name.startswith("vllm:admission_rejections"):
                assert sample.labels["engine"] == "0"
    assert 'vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 100.0' in text
    assert 'vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.5' in text
    text = metrics.render(EngineSnapshot(0, 0, 0.0, 150, 40, 1)).decode()
    assert 'vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 150.0' in text
    assert 'vllm:num_preemptions_total{engine="0",model_name="tiny"} 1.0' in text


def test_per_request_histograms_count_as_vllm_counts() -> None:
    """vLLM observes every finished request's mean TPOT (0 with fewer than two tokens) and its
    generated tokens as `request_max_num_generation_tokens` (max over the `n` outputs), not the
    `max_tokens` it asked for (vllm/v1/metrics/stats.py, parallel_sampling.py)."""
    metrics = EngineMetrics("tiny", 512, {"block_size": "16"})

    def record(num_generation_tokens: int, decode_s: float) -> FinishedRecord:
        return FinishedRecord(
            finished_reason="stop",
            num_prompt_tokens=10,
            num_generation_tokens=num_generation_tokens,
            max_tokens=100,
            n=1,
            queue_s=0.0,
            prefill_s=0.1,
            decode_s=decode_s,
            inference_s=0.1 + decode_s,
            e2e_s=0.1 + decode_s,
            num_preemptions=0,
            num_computed_prompt_tokens=10,
        )

    metrics.observe_finished(record(5, 0.2))  # four gaps of 50 ms
    metrics.observe_finished(record(1, 0.0))  # one token: TPOT 0

    def value(name: str) -> float | None:
        return metrics.registry.get_sample_value(name, {"engine": "0", "model_name": "tiny"})

    assert value("vllm:request_time_per_output_token_seconds_count") == 2.0
    assert value("vllm:request_time_per_output_token_seconds_sum") == 0.05
    assert value("vllm:request_max_num_generation_tokens_sum") == 6.0
    assert value("vllm:request_params_max_tokens_sum") == 200.0
