"""vLLM's metric names, types and buckets, as the simulated engine exposes them."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from inhouse.server.metrics import EngineMetrics, EngineSnapshot, build_1_2_5_buckets


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
