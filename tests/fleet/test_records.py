from __future__ import annotations

from array import array

import numpy as np
import pytest

from inhouse.errors import SpecError
from inhouse.fleet import FleetResult, RequestRecord


def record(
    rid: str,
    replica: int,
    arrival: float,
    first: float,
    finish: float,
    out: int,
    runs: tuple[int, ...],
    prompt: int = 1000,
    cached: int = 0,
    ideal: int = 0,
) -> RequestRecord:
    return RequestRecord(
        rid,
        "p",
        replica,
        "load",
        arrival,
        first,
        finish,
        prompt,
        out,
        cached,
        ideal,
        token_runs=runs,
    )


@pytest.fixture
def result() -> FleetResult:
    records = [
        record("a", 0, 0.0, 0.1, 0.5, 5, (0, 5), cached=500, ideal=800),
        record("b", 0, 1.0, 1.2, 1.6, 3, (5, 8), cached=0, ideal=800),
        record("c", 1, 0.5, 0.6, 1.0, 1, (0, 1), cached=100, ideal=100),
        RequestRecord("d", "p", None, "load", 0.7, None, None, 1000, 0, 0, 0, error="refused"),
    ]
    return FleetResult(
        records=records,
        policies={"p": "cache_aware"},
        replicas={"p": 2},
        down={},
        timelines={
            ("p", 0): array("d", [0.1, 0.2, 0.3, 0.4, 0.5, 1.2, 1.4, 1.6]),
            ("p", 1): array("d", [0.6]),
        },
    )


def test_summary_uses_vllm_bench_definitions(result: FleetResult) -> None:
    s = result.summary()
    assert (s["completed"], s["failed"], s["duration"]) == (3, 1, 1.6)
    assert s["request_throughput"] == pytest.approx(3 / 1.6)
    assert s["output_throughput"] == pytest.approx(9 / 1.6)
    assert s["mean_ttft_ms"] == pytest.approx((100 + 200 + 100) / 3)
    assert s["median_ttft_ms"] == pytest.approx(100)
    assert s["p99_ttft_ms"] == pytest.approx(np.percentile([100, 200, 100], 99))
    assert s["std_ttft_ms"] == pytest.approx(np.std([100, 200, 100]))
    # TPOT only for requests with more than one output token
    assert s["mean_tpot_ms"] == pytest.approx((100 + 200) / 2)
    # ITL: every gap, pooled: four of 100 ms (a), two of 200 ms (b)
    assert s["mean_itl_ms"] == pytest.approx(800 / 6)
    assert s["p50_itl_ms"] == pytest.approx(100)
    assert s["p95_itl_ms"] == pytest.approx(200)
    assert s["mean_e2el_ms"] == pytest.approx((500 + 600 + 500) / 3)
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for stat in ("mean", "median", "std", "p50", "p90", "p95", "p99"):
            assert f"{stat}_{metric}_ms" in s


def test_hit_rates_load_balance_and_goodput(result: FleetResult) -> None:
    s = result.summary({"ttft_ms": 150})
    assert s["prefix_cache_hit_rate"] == pytest.approx(600 / 3000)
    assert s["theoretical_hit_rate"] == pytest.approx(1700 / 3000)
    # time-averaged in flight: replica 0 (0.5 + 0.6)/1.6, replica 1 0.5/1.6
    assert s["replica_load_max_over_mean"] == pytest.approx(0.6875 / 0.5)
    assert s["goodput"] == pytest.approx(2 / 1.6)
    assert s["good_request_fraction"] == pytest.approx(2 / 4)
    pool = s["pools"]["p"]  # type: ignore[index]
    assert pool["policy"] == "cache_aware"
    assert [r["requests"] for r in pool["replicas"]] == [2, 1]
    assert result.summary()["goodput"] is None


def test_itl_follows_token_runs_across_a_preemption(result: FleetResult) -> None:
    preempted = record("e", 0, 0.0, 0.1, 1.6, 4, (0, 2, 6, 8))
    assert result.itl_s([preempted]).tolist() == pytest.approx([0.1, 1.4 - 0.2, 0.2])


def test_unknown_slo_keys_name_the_allowed_ones(result: FleetResult) -> None:
    with pytest.raises(SpecError, match="SLO 'ttft' is unknown; use ttft_ms, tpot_ms"):
        result.summary({"ttft": 100})
    with pytest.raises(SpecError, match="must be a positive number"):
        result.summary({"ttft_ms": 0})
