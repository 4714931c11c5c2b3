"""The virtual-clock fleet simulator: workload → pool → policy → engine replicas → records."""

from inhouse.fleet.events import EventKind, EventQueue
from inhouse.fleet.records import SLO_KEYS, FleetResult, RequestRecord, check_slo
from inhouse.fleet.simulator import (
    MAX_SIMULATED_REQUESTS,
    Fleet,
    TooManyRequestsError,
    replica_spec_for_pool,
    simulate_stack,
)

__all__ = [
    "MAX_SIMULATED_REQUESTS",
    "SLO_KEYS",
    "EventKind",
    "EventQueue",
    "Fleet",
    "FleetResult",
    "RequestRecord",
    "TooManyRequestsError",
    "check_slo",
    "replica_spec_for_pool",
    "simulate_stack",
]
