"""Engine gauges sampled during a run: the busiest series per scrape, statistics over samples."""

from __future__ import annotations

import asyncio

import pytest

from inhouse.bench.gauges import GaugeSampler, parse_gauges

EXPOSITION = """# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="chat"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="chat"} 0.5
vllm:num_requests_running{model_name="chat"} 12.0
vllm:num_requests_waiting{model_name="chat"} 0.0
vllm:kv_cache_usage_perc_other 9
"""


def test_parse_keeps_the_busiest_series() -> None:
    assert parse_gauges(EXPOSITION) == {
        "kv_cache_usage_perc": 0.5,
        "num_requests_running": 12.0,
        "num_requests_waiting": 0.0,
    }


def test_summary_statistics() -> None:
    sampler = GaugeSampler(["http://x/metrics"])
    sampler.samples["kv_cache_usage_perc"] = [0.1, 0.2, 0.3, 0.4]
    summary = sampler.summary()
    assert summary["kv_cache_usage_perc"] == {
        "samples": 4,
        "mean": pytest.approx(0.25),
        "p50": pytest.approx(0.25),
        "p95": pytest.approx(0.385),
        "max": 0.4,
    }
    assert summary["num_requests_waiting"] is None


def test_an_unreachable_engine_gives_no_samples_and_no_error() -> None:
    async def go() -> dict:
        sampler = GaugeSampler(["http://127.0.0.1:9/metrics"], interval_s=0.05)
        sampler.start()
        await asyncio.sleep(0.2)
        await sampler.stop()
        return sampler.summary()

    assert asyncio.run(go())["kv_cache_usage_perc"] is None
