from __future__ import annotations

import pytest

from inhouse.engine import EngineConfig, EngineCore
from inhouse.perf import StepModel, get_engine_constants
from inhouse.spec import get_gpu, get_model, normalize_quant


@pytest.fixture
def step_model() -> StepModel:
    return StepModel(
        get_model("Llama-3.1-8B"),
        get_gpu("h100_sxm"),
        1,
        normalize_quant("bf16"),
        get_engine_constants("vllm"),
    )


@pytest.fixture
def make_engine(step_model: StepModel):
    def make(**overrides: object) -> EngineCore:
        values: dict[str, object] = {"num_gpu_blocks": 4096, "request_overhead_s": 0.0}
        values.update(overrides)
        return EngineCore(EngineConfig(**values), step_model)  # type: ignore[arg-type]

    return make
