"""Prometheus counter deltas, the sweep's search, and the regression table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from inhouse.bench.compare import compare
from inhouse.bench.config import BenchSpec, parse_slo
from inhouse.bench.scrape import ServerCounters, parse_counters
from inhouse.bench.sweep import run_sweep
from inhouse.errors import SpecError

EXPOSITION = """\
# HELP vllm:prefix_cache_queries_total Prefix cache queries.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="tiny"} 500.0
vllm:prefix_cache_hits_total{engine="0",model_name="a b"} 250.0
vllm:prefix_cache_hits_created{engine="0",model_name="tiny"} 1.7e9
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
"""


def test_counters_sum_over_labels() -> None:
    names = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total")
    assert parse_counters(EXPOSITION, names) == {
        "vllm:prefix_cache_queries_total": 1500.0,
        "vllm:prefix_cache_hits_total": 250.0,
    }


def test_server_hit_rate_is_the_delta_ratio() -> None:
    before = [{"url": "a", "queries": 100.0, "hits": 10.0}, {"url": "b", "error": "HTTP 404"}]
    after = [{"url": "a", "queries": 300.0, "hits": 110.0}, {"url": "b", "error": "HTTP 404"}]
    delta = ServerCounters.delta(before, after)
    assert delta["prefix_cache_hit_rate_server"] == pytest.approx(0.5)
    assert delta["engines"][1] == {"url": "b", "error": "HTTP 404"}


def test_slo_parsing_accepts_vllm_goodput_form() -> None:
    assert parse_slo("ttft_ms=800,itl_ms=60") == {"ttft_ms": 800.0, "itl_ms": 60.0}
    assert parse_slo("ttft:800 tpot:50") == {"ttft_ms": 800.0, "tpot_ms": 50.0}
    with pytest.raises(SpecError, match="unknown"):
        parse_slo("latency_ms=3")


def fake_result(rate: float, capacity: float) -> dict[str, Any]:
    return {
        "run": {"percentiles": [50.0, 95.0, 99.0]},
        "good_request_fraction": 1.0 if rate <= capacity else 0.5,
        "request_goodput": min(rate, capacity),
        "request_throughput": rate,
        "client_bottleneck": False,
    }


def test_sweep_doubles_then_bisects_to_the_capacity(tmp_path: Path) -> None:
    rates: list[float] = []

    def run_point(spec: BenchSpec, out: Path) -> dict[str, Any]:
        assert spec.rate is not None and spec.prompt_salt is None
        rates.append(spec.rate)
        return fake_result(spec.rate, capacity=7.0)

    spec = BenchSpec(workload="utility", target="http://x", rate=1.0, slo={"ttft_ms": 1.0})
    sweep = run_sweep(spec, 1.0, [1, 2, 3], tmp_path, run_point, search_steps=4)
    assert rates == [1.0, 2.0, 3.0, 6.0, 12.0, 9.0, 7.5]
    assert sweep["max_rate_meeting_slo"] == 6.0
    assert [p["verdict"] for p in sweep["points"]][-3:] == ["fail", "fail", "fail"]
    assert (tmp_path / "sweep.json").is_file()


def test_a_client_bound_point_stops_the_search_upward(tmp_path: Path) -> None:
    def run_point(spec: BenchSpec, out: Path) -> dict[str, Any]:
        assert spec.rate is not None
        result = fake_result(spec.rate, capacity=100.0)
        result["client_bottleneck"] = spec.rate >= 3.0
        return result

    spec = BenchSpec(workload="utility", target="http://x", rate=1.0, slo={"ttft_ms": 1.0})
    sweep = run_sweep(spec, 1.0, [1, 2, 3], tmp_path, run_point, search_steps=2)
    assert sweep["max_rate_meeting_slo"] == 2.75  # bisected towards 3, never above
    assert max(p["rate"] for p in sweep["points"]) == 3.0


def test_compare_directions() -> None:
    base = {"p99_ttft_ms": 100.0, "request_throughput": 10.0, "prefix_cache_hit_rate_client": 0.5}
    new = {"p99_ttft_ms": 80.0, "request_throughput": 8.0, "prefix_cache_hit_rate_client": 0.5}
    rows = {r.metric: r for r in compare(base, new, 10.0)}
    assert rows["p99_ttft_ms"].status == "improved"
    assert rows["request_throughput"].status == "REGRESSION"
    assert rows["request_throughput"].change_pct == pytest.approx(-20.0)
    assert rows["prefix_cache_hit_rate_client"].status == "ok"
    assert "p50_itl_ms" not in rows


def test_an_interrupted_point_stops_the_sweep_and_is_no_verdict(tmp_path: Path) -> None:
    """Ctrl-C during a point ended that point only: the sweep went on to the next rate (one
    Ctrl-C per point to stop it), and the cut-short point's figures passed or failed it."""
    rates: list[float] = []

    def run_point(spec: BenchSpec, out: Path) -> dict[str, Any]:
        assert spec.rate is not None
        rates.append(spec.rate)
        result = fake_result(spec.rate, capacity=7.0)
        result["run"]["interrupted"] = spec.rate == 2.0
        return result

    spec = BenchSpec(workload="utility", target="http://x", rate=1.0, slo={"ttft_ms": 1.0})
    sweep = run_sweep(spec, 1.0, [1, 2, 3], tmp_path, run_point, search_steps=4)
    assert rates == [1.0, 2.0]
    assert sweep["interrupted"] and sweep["max_rate_meeting_slo"] is None
    assert [p["verdict"] for p in sweep["points"]] == ["pass", "interrupted"]
    assert json.loads((tmp_path / "sweep.json").read_text())["interrupted"]
