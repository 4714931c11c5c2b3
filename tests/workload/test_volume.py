from __future__ import annotations

import pytest

from inhouse.workload import (
    AgentWorkload,
    Arrivals,
    FixedWorkload,
    TraceRow,
    TraceWorkload,
    UtilityWorkload,
)
from inhouse.workload.volume import expected_requests, num_clients


def test_an_open_loop_sends_its_rate_times_the_scale_times_the_duration() -> None:
    workload = UtilityWorkload(arrivals=Arrivals("poisson", rate_per_s=4.0))
    assert expected_requests(workload, 300.0, 2.5) == pytest.approx(4.0 * 2.5 * 300.0)
    assert num_clients(workload, 2.5) is None


def test_open_agent_sessions_send_their_mean_turns() -> None:
    workload = AgentWorkload(session_rate_per_s=0.5, min_turns=2, max_turns=6)
    assert expected_requests(workload, 100.0, 2.0) == pytest.approx(0.5 * 2.0 * 100.0 * 4)
    assert num_clients(workload, 2.0) is None


def test_a_closed_loop_has_clients_and_no_expected_count() -> None:
    assert expected_requests(AgentWorkload(sessions=10), 100.0, 1.0) is None
    assert num_clients(AgentWorkload(sessions=10), 2.5) == 25
    assert num_clients(FixedWorkload(concurrency=16), 0.01) == 1


def test_a_trace_sends_the_rows_that_arrive_in_time() -> None:
    rows = tuple(TraceRow(float(t), 10, 10) for t in (0, 1, 2, 3, 10))
    trace = TraceWorkload(rows)
    assert expected_requests(trace, 2.5, 1.0) == 3  # 0, 1, 2
    assert expected_requests(trace, 2.5, 2.0) == 4  # 0, 0.5, 1, 1.5
