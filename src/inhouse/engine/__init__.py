"""Simulated engine core: paged KV with prefix caching, a vLLM-V1-style scheduler, in given time."""

from inhouse.engine.build import Replica, ReplicaSpec, build_replica
from inhouse.engine.config import EngineConfig
from inhouse.engine.core import EngineCore, StepResult
from inhouse.engine.request import FinishReason, Request, Status

__all__ = [
    "EngineConfig",
    "EngineCore",
    "FinishReason",
    "Replica",
    "ReplicaSpec",
    "Request",
    "Status",
    "StepResult",
    "build_replica",
]
