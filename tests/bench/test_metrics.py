"""Metric definitions against hand-made timings (bench-metrics.md §8, vLLM 0.32's code)."""

from __future__ import annotations

import numpy as np
import pytest

from inhouse.bench.metrics import (
    Outcome,
    RequestResult,
    meets_slo,
    peak_metrics,
    percentile_key,
    stats_ms,
    summarize,
)


def result(
    index: int,
    *,
    t_sched: float,
    t_send: float,
    ttft: float,
    itl: list[float],
    completion_tokens: int | None,
    prompt_tokens: int | None = 100,
    cached: int | None = 0,
    client_prompt: int = 100,
    ideal: int = 0,
    session: str | None = None,
    success: bool = True,
) -> RequestResult:
    outcome = Outcome(index, t_sched, t_send=t_send, success=success, status=200)
    if success:
        outcome.ttft_s = ttft
        outcome.itl_s = itl
        outcome.latency_s = ttft + sum(itl)
        outcome.num_chunks = outcome.num_token_chunks = len(itl) + 1
        outcome.completion_tokens = completion_tokens
        outcome.prompt_tokens = prompt_tokens
        outcome.cached_tokens = cached
        outcome.ttft_content_s = ttft
        outcome.t_done = t_send + outcome.latency_s
    else:
        outcome.error = "HTTP 500: boom"
    return RequestResult(outcome, f"r{index}", client_prompt, ideal, 4, session)


@pytest.fixture
def three() -> list[RequestResult]:
    # Request 0: sent 0.5 ms late; TTFT 100 ms; 3 chunks after it, 10/20/30 ms apart.
    # Request 1: sent on time; TTFT 200 ms; one later chunk 40 ms after it.
    # Request 2: failed.
    return [
        result(
            0,
            t_sched=0.0,
            t_send=0.0005,
            ttft=0.1,
            itl=[0.01, 0.02, 0.03],
            completion_tokens=4,
            cached=50,
            ideal=60,
            session="a",
        ),
        result(
            1,
            t_sched=1.0,
            t_send=1.0,
            ttft=0.2,
            itl=[0.04],
            completion_tokens=2,
            prompt_tokens=120,
            cached=0,
            ideal=0,
            session="b",
        ),
        result(2, t_sched=2.0, t_send=2.0, ttft=0.0, itl=[], completion_tokens=None, success=False),
    ]


def test_ttft_tpot_itl_e2el_follow_vllm(three: list[RequestResult]) -> None:
    out = summarize(three, duration_s=2.0, percentiles=(50, 99))
    assert out["completed"] == 2 and out["failed"] == 1
    assert out["mean_ttft_ms"] == pytest.approx(150.0)
    # TPOT excludes the first token: (e2el - ttft) / (n_out - 1) per request, averaged.
    tpot0 = (0.06) / 3 * 1000  # 20 ms
    tpot1 = (0.04) / 1 * 1000  # 40 ms
    assert out["mean_tpot_ms"] == pytest.approx((tpot0 + tpot1) / 2)
    assert out["median_tpot_ms"] == pytest.approx(30.0)
    # ITL: every chunk gap pooled over requests, percentiles as numpy's default (linear).
    pooled = np.array([10.0, 20.0, 30.0, 40.0])
    assert out["mean_itl_ms"] == pytest.approx(25.0)
    assert out["p99_itl_ms"] == pytest.approx(float(np.percentile(pooled, 99)))
    assert out["std_itl_ms"] == pytest.approx(float(np.std(pooled)))  # ddof 0
    assert out["mean_e2el_ms"] == pytest.approx((160.0 + 240.0) / 2)
    assert out["p50_e2el_ms"] == pytest.approx(200.0)


def test_throughput_uses_server_prompt_tokens(three: list[RequestResult]) -> None:
    out = summarize(three, duration_s=2.0)
    assert out["total_input_tokens"] == 220  # usage.prompt_tokens, as vLLM 0.32
    assert out["total_input_tokens_client"] == 200
    assert out["total_output_tokens"] == 6
    assert out["request_throughput"] == pytest.approx(1.0)
    assert out["output_throughput"] == pytest.approx(3.0)
    assert out["total_token_throughput"] == pytest.approx(113.0)


def test_extensions_are_anchored_at_the_schedule(three: list[RequestResult]) -> None:
    out = summarize(three, duration_s=2.0, percentiles=(50,))
    assert out["mean_client_queue_time_ms"] == pytest.approx(0.25)
    assert out["mean_ttft_sched_ms"] == pytest.approx(150.25)
    assert out["mean_e2el_sched_ms"] == pytest.approx(200.25)


def test_goodput_and_good_fraction(three: list[RequestResult]) -> None:
    out = summarize(three, duration_s=2.0, slo={"ttft_ms": 150.0, "tpot_ms": 50.0})
    assert out["request_goodput"] == pytest.approx(0.5)  # only request 0, per second
    assert out["good_request_fraction"] == pytest.approx(1 / 3)  # the failure counts against
    assert summarize(three, 2.0)["request_goodput"] is None


def test_itl_slo_bounds_the_mean_chunk_gap(three: list[RequestResult]) -> None:
    assert meets_slo(three[0], {"itl_ms": 20.0})  # mean of 10, 20, 30
    assert not meets_slo(three[0], {"itl_ms": 19.9})


def test_tpot_counts_zero_for_one_token_in_goodput() -> None:
    one = result(0, t_sched=0, t_send=0, ttft=0.1, itl=[], completion_tokens=1)
    assert one.tpot_s == 0.0
    assert meets_slo(one, {"tpot_ms": 0.001})
    out = summarize([one], 1.0)
    assert out["mean_tpot_ms"] == 0.0  # no request with N_out > 1: vLLM's np.mean(0)


def test_output_tokens_fall_back_to_chunks() -> None:
    r = result(0, t_sched=0, t_send=0, ttft=0.1, itl=[0.01, 0.01], completion_tokens=None)
    assert r.output_len == 3
    assert summarize([r], 1.0)["output_tokens_source"] == "chunks (1 requests)"


def test_hit_rates_client_and_theoretical(three: list[RequestResult]) -> None:
    out = summarize(three, 2.0)
    assert out["prefix_cache_hit_rate_client"] == pytest.approx(50 / 220)
    assert out["theoretical_hit_rate"] == pytest.approx(60 / 200)
    assert out["hit_rate_efficiency_client"] == pytest.approx((50 / 220) / 0.3)
    sessions = out["prefix_cache_hit_rate_per_session"]
    assert sessions is not None and sessions["sessions"] == 2.0


def test_percentile_keys_and_empty_lists() -> None:
    assert percentile_key(99) == "99" and percentile_key(99.9) == "99.9"
    assert stats_ms("x", [], (99.9,)) == {
        "mean_x_ms": 0.0,
        "median_x_ms": 0.0,
        "std_x_ms": 0.0,
        "p99.9_x_ms": 0.0,
    }


def test_peak_metrics_count_chunks_in_one_second_buckets() -> None:
    a = result(0, t_sched=0, t_send=0.0, ttft=0.5, itl=[0.2, 0.2, 0.2], completion_tokens=4)
    b = result(1, t_sched=0, t_send=0.9, ttft=0.05, itl=[0.05], completion_tokens=2)
    # Chunks at 0.5, 0.7, 0.9 | 1.1 (a) and 0.95, 1.0 (b): bucket 0 has 4, bucket 1 has 2.
    assert peak_metrics([a, b]) == (4.0, 2)


def test_the_role_chunk_flag_compares_each_request_with_itself() -> None:
    """No request waited between its first chunk and its first content; the flag compared
    the mean TTFT of all requests with the mean first-content time of those with content, so
    a fast request with an empty answer raised it."""
    slow = result(0, t_sched=0, t_send=0, ttft=1.0, itl=[0.01], completion_tokens=2)
    empty = result(1, t_sched=0, t_send=0, ttft=0.01, itl=[], completion_tokens=0)
    empty.outcome.ttft_content_s = None  # its one chunk carried no content
    assert summarize([slow, empty], 2.0)["ttft_role_chunk_artifact"] is False
    slow.outcome.ttft_content_s = 1.002  # a 2 ms gap: flagged
    assert summarize([slow, empty], 2.0)["ttft_role_chunk_artifact"] is True


def test_streams_that_arrived_in_one_read_are_counted_and_named() -> None:
    """Behind a buffering proxy (nginx `proxy_buffering on`) a whole stream arrives in one read:
    TTFT is its E2EL and its ITL samples are 0, and nothing said so."""
    from inhouse.bench.report import console_lines

    buffered = result(0, t_sched=0, t_send=0, ttft=0.5, itl=[0.0, 0.0, 0.0], completion_tokens=4)
    # The role chunk and the first token in one read (vLLM sends them together): streamed.
    streamed = result(1, t_sched=0, t_send=0, ttft=0.1, itl=[0.0, 0.02, 0.02], completion_tokens=3)
    out = summarize([buffered, streamed], 1.0)
    assert out["num_streams_in_one_read"] == 1
    out["run"] = {"percentiles": [99.0]}
    assert any("1 of 2 streamed answers arrived in one read" in line for line in console_lines(out))
