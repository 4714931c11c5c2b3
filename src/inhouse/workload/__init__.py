"""Request streams as data: synthetic workloads, trace replay, arrival processes.

See docs/simulate.md for every workload's parameters.
"""

from inhouse.workload.agent import AgentWorkload
from inhouse.workload.arrivals import Arrivals, Lengths
from inhouse.workload.base import Workload, WorkloadRun, WorkRequest, ideal_cached_tokens
from inhouse.workload.registry import (
    WORKLOADS,
    make_workload,
    workload_names,
    workload_params,
)
from inhouse.workload.synthetic import (
    FixedWorkload,
    LongContextWorkload,
    SharedPrefixWorkload,
    UtilityWorkload,
)
from inhouse.workload.traces import TraceRow, TraceWorkload, parse_azure, parse_mooncake

__all__ = [
    "WORKLOADS",
    "AgentWorkload",
    "Arrivals",
    "FixedWorkload",
    "Lengths",
    "LongContextWorkload",
    "SharedPrefixWorkload",
    "TraceRow",
    "TraceWorkload",
    "UtilityWorkload",
    "WorkRequest",
    "Workload",
    "WorkloadRun",
    "ideal_cached_tokens",
    "make_workload",
    "parse_azure",
    "parse_mooncake",
    "workload_names",
    "workload_params",
]
