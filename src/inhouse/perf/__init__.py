"""Performance model: memory accounting and the step-time model, calibrated per engine."""

from inhouse.perf.constants import EngineConstants, get_engine_constants, known_backends
from inhouse.perf.memory import (
    MemoryPlan,
    kv_bytes_per_token,
    kv_bytes_per_token_per_gpu,
    plan_memory,
    weight_bytes,
)
from inhouse.perf.step import StepModel, StepShape

__all__ = [
    "EngineConstants",
    "MemoryPlan",
    "StepModel",
    "StepShape",
    "get_engine_constants",
    "known_backends",
    "kv_bytes_per_token",
    "kv_bytes_per_token_per_gpu",
    "plan_memory",
    "weight_bytes",
]
