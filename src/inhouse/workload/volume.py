"""How much work a run of a workload is, before it runs.

* `expected_requests`: what an open loop sends in `duration_s` at `rate_scale` — its rate times
  the scale times the duration (open-loop agent sessions: the session rate times the mean
  turns); a trace: its rows that arrive before the duration ends. None for a closed loop, whose
  rate follows from the latencies the run measures.
* `num_clients`: a closed loop's clients (agent sessions, `fixed` clients) as the run builds
  them, one by one, before the first request.
"""

from __future__ import annotations

import bisect

from inhouse.workload.agent import AgentWorkload
from inhouse.workload.arrivals import Arrivals
from inhouse.workload.base import Workload
from inhouse.workload.synthetic import FixedWorkload
from inhouse.workload.traces import MAX_TRACE_TOKENS, TraceWorkload

# Clients a closed loop may build, and prefixes a workload builds one by one before its first
# request (apps' system prompts, tasks' instructions, prefix groups): the planner's own bounds.
MAX_CLIENTS = 100_000
MAX_PREFIX_GROUPS = 100_000
PREFIX_GROUP_KEYS = ("num_apps", "num_tasks", "num_groups")
# The longest median or p95 length a workload parameter may ask for (a trace row's bound): each
# request hashes its prompt block by block, so a stray digit hung the run on its first request.
MAX_LENGTH_TOKENS = MAX_TRACE_TOKENS


def expected_requests(workload: Workload, duration_s: float, rate_scale: float) -> float | None:
    if isinstance(workload, TraceWorkload):
        times = [row.arrival_s / rate_scale for row in workload.rows]
        return float(bisect.bisect_left(times, duration_s))
    if isinstance(workload, AgentWorkload):
        if workload.session_rate_per_s <= 0:
            return None
        turns = (workload.min_turns + workload.max_turns) / 2
        return workload.session_rate_per_s * rate_scale * duration_s * turns
    arrivals = getattr(workload, "arrivals", None)
    if isinstance(arrivals, Arrivals) and not arrivals.is_closed:
        return arrivals.rate_per_s * rate_scale * duration_s
    return None


def num_clients(workload: Workload, rate_scale: float) -> int | None:
    if isinstance(workload, AgentWorkload) and workload.session_rate_per_s <= 0:
        return max(1, round(workload.sessions * rate_scale))
    if isinstance(workload, FixedWorkload):
        return max(1, round(workload.concurrency * rate_scale))
    return None
