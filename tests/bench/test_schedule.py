"""Arrival schedules: vLLM's algorithm bit for bit, and the three sources."""

from __future__ import annotations

import math

import numpy as np
import pytest

from inhouse.bench.schedule import (
    ClosedSource,
    RanDry,
    ScheduleSource,
    TimedSource,
    vllm_arrival_offsets,
)
from inhouse.workload import make_workload


def vllm_reference(n: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """vLLM 0.32 `get_request`'s precomputation, after `np.random.seed(seed)` in main."""
    np.random.seed(seed)
    delay_ts = []
    for _ in range(n):
        theta = 1.0 / (rate * burstiness)
        delay_ts.append(np.random.gamma(shape=burstiness, scale=theta))
    for i in range(1, len(delay_ts)):
        delay_ts[i] += delay_ts[i - 1]
    factor = (n / rate) / delay_ts[-1]
    return [d * factor for d in delay_ts]


@pytest.mark.parametrize("burstiness", [1.0, 0.5, 3.0])
def test_offsets_equal_vllms(burstiness: float) -> None:
    ours = vllm_arrival_offsets(200, 7.0, burstiness, seed=3)
    assert ours == vllm_reference(200, 7.0, burstiness, 3)
    assert ours[-1] == pytest.approx(200 / 7.0)


def test_constant_and_infinite_rates() -> None:
    assert vllm_arrival_offsets(3, math.inf) == [0.0, 0.0, 0.0]
    assert vllm_arrival_offsets(4, 2.0, math.inf) == pytest.approx([0.5, 1.0, 1.5, 2.0])


def test_schedule_source_takes_content_in_order_and_its_own_times() -> None:
    run = make_workload("utility").start(block_size=16, seed=0, duration_s=math.inf)
    source = ScheduleSource(run, [0.5, 1.0])
    assert source.next_time_s(0.0) == 0.5
    first, at = source.pop(0.0)
    assert (first.request_id, at) == ("utility-0", 0.5)
    source.pop(0.0)
    assert math.isinf(source.next_time_s(0.0)) and source.is_exhausted


def test_schedule_source_keeps_a_closed_loop_generator_going() -> None:
    run = make_workload("fixed", {"concurrency": "1"}).start(
        block_size=16, seed=0, duration_s=math.inf
    )
    source = ScheduleSource(run, [0.1 * i for i in range(5)])
    assert [source.pop(0.0)[0].request_id for _ in range(5)] == [f"fixed-{i}" for i in range(5)]


def test_closed_source_keeps_c_in_flight() -> None:
    run = make_workload("utility").start(block_size=16, seed=0, duration_s=math.inf)
    source = ClosedSource(run, concurrency=2, max_requests=3)
    a, _ = source.pop(0.0)
    source.pop(0.0)
    assert math.isinf(source.next_time_s(0.1))
    source.complete(a, 0.2, True)
    assert source.next_time_s(0.3) == 0.3
    source.pop(0.3)
    assert source.is_exhausted


def test_timed_source_stops_after_n_and_sessions_follow_completions() -> None:
    wl = make_workload("agent", {"sessions": "1", "min_turns": "2", "max_turns": "2"})
    run = wl.start(block_size=16, seed=0, duration_s=100.0)
    source = TimedSource(run, max_requests=5)
    first, at = source.pop(0.0)
    assert first.session_key == "s0"
    assert math.isinf(source.next_time_s(at))  # the next turn waits for the answer
    source.complete(first, at + 1.0, True)
    second, at2 = source.pop(0.0)
    assert second.session_key == "s0" and at2 >= at + 1.0 + 0.5


def test_ran_dry_is_raised_when_the_trace_ends() -> None:
    from inhouse.workload import TraceRow, TraceWorkload

    run = TraceWorkload((TraceRow(0.0, 32, 4),)).start(block_size=16, seed=0, duration_s=1e9)
    source = ScheduleSource(run, [0.0, 1.0])
    source.pop(0.0)
    with pytest.raises(RanDry):
        source.pop(0.0)
    assert source.is_exhausted
