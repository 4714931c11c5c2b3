"""A run stops once it sends more requests than `max_requests` (a closed loop's rate shows only
as it runs), or once its count so far, projected over its duration, passes twice the limit."""

from __future__ import annotations

import pytest

from inhouse.fleet import TooManyRequestsError, simulate_stack
from inhouse.fleet.simulator import PROJECT_EVERY
from inhouse.spec.stack import StackSpec, parse_stack
from inhouse.workload import FixedWorkload


def _stack() -> StackSpec:
    pool = {"name": "p", "model": "Llama-3.1-8B", "replicas": 1}
    return parse_stack({"version": 1, "name": "t", "pools": [pool]})


def _run(max_requests: int | None, duration_s: float = 30.0) -> list[object]:
    workload = FixedWorkload(concurrency=2, input_tokens=64, output_tokens=8)
    result = simulate_stack(
        _stack(), workload, duration_s=duration_s, seed=0, max_requests=max_requests
    )
    return list(result.records)


def test_a_run_past_its_limit_stops_and_says_how_far_it_got() -> None:
    sent = len(_run(None))
    assert sent > 60
    with pytest.raises(TooManyRequestsError) as caught:
        _run(sent // 2)
    assert f"the run sent {sent // 2 + 1:,} requests in its first" in str(caught.value)
    assert f"more than the {sent // 2:,} a run may" in str(caught.value)


def test_a_run_within_its_limit_is_the_same_run() -> None:
    records = _run(None)
    assert _run(len(records)) == records


def test_a_run_headed_far_past_its_limit_stops_early() -> None:
    # Its first PROJECT_EVERY requests, over the whole duration, pass twice the limit: it stops
    # there rather than after the limit's worth of requests.
    with pytest.raises(TooManyRequestsError) as caught:
        _run(3 * PROJECT_EVERY, duration_s=1e12)
    assert f"the run sent {PROJECT_EVERY:,} requests" in str(caught.value)
    assert caught.value.expected > 2 * 3 * PROJECT_EVERY
