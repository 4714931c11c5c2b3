"""The virtual-clock fleet simulator: workload → pool → policy → engine replicas → records."""

from inhouse.fleet.events import EventKind, EventQueue
from inhouse.fleet.records import SLO_KEYS, FleetResult, RequestRecord, check_slo
from inhouse.fleet.simulator import Fleet, replica_spec_for_pool, simulate_stack

__all__ = [
    "SLO_KEYS",
    "EventKind",
    "EventQueue",
    "Fleet",
    "FleetResult",
    "RequestRecord",
    "check_slo",
    "replica_spec_for_pool",
    "simulate_stack",
]
