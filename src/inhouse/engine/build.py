"""Build an engine replica (config + step model) from catalog names and vLLM-style knobs."""

from __future__ import annotations

from dataclasses import dataclass

from inhouse.engine.config import EngineConfig
from inhouse.engine.core import EngineCore
from inhouse.perf.constants import EngineConstants, get_engine_constants
from inhouse.perf.memory import MemoryPlan, plan_memory
from inhouse.perf.step import StepModel
from inhouse.spec.catalog import GpuSpec, ModelSpec, get_gpu, get_model
from inhouse.spec.quant import Quant, normalize_quant


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    """One engine replica, as a user names it. `None` knobs take the engine's defaults."""

    model: str
    gpu: str = "h100_sxm"
    tp: int = 1
    quant: str = "bf16"
    backend: str = "vllm"
    kv_dtype: str = "auto"
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = True
    scheduling_policy: str = "fcfs"
    block_size: int = 16
    host_kv_gib: float = 0.0


@dataclass(frozen=True, slots=True)
class Replica:
    """Everything resolved: the specs, the memory split, the engine config and step model."""

    spec: ReplicaSpec
    model: ModelSpec
    gpu: GpuSpec
    quant: Quant
    constants: EngineConstants
    memory: MemoryPlan
    config: EngineConfig
    step_model: StepModel

    def new_engine(self) -> EngineCore:
        return EngineCore(self.config, self.step_model)


def build_replica(spec: ReplicaSpec, constants: EngineConstants | None = None) -> Replica:
    """Resolve names, split memory (raising `DoesNotFitError`), and configure the engine."""
    model = get_model(spec.model)
    gpu = get_gpu(spec.gpu)
    quant = normalize_quant(spec.quant)
    consts = constants or get_engine_constants(spec.backend)
    max_num_seqs = spec.max_num_seqs or consts.max_num_seqs
    max_batched = spec.max_num_batched_tokens or consts.max_num_batched_tokens
    max_model_len = spec.max_model_len or model.max_context
    memory = plan_memory(
        model,
        gpu,
        spec.tp,
        quant,
        kv_dtype=spec.kv_dtype,
        gpu_memory_utilization=spec.gpu_memory_utilization,
        max_num_batched_tokens=max_batched,
        max_num_seqs=max_num_seqs,
        block_size=spec.block_size,
        min_kv_tokens=max_model_len if spec.max_model_len else 0,
    )
    host_blocks = 0
    if spec.host_kv_gib > 0:
        per_block = memory.kv_bytes_per_token_per_gpu * spec.tp * spec.block_size
        host_blocks = int(spec.host_kv_gib * 1024**3 // per_block)
    config = EngineConfig(
        num_gpu_blocks=memory.num_blocks,
        block_size=spec.block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_batched,
        max_model_len=max_model_len,
        enable_prefix_caching=spec.enable_prefix_caching,
        scheduling_policy=spec.scheduling_policy,
        num_host_blocks=host_blocks,
        request_overhead_s=consts.request_overhead_s,
        prompt_token_overhead_s=consts.prompt_token_overhead_s,
        mixed_batches=consts.mixed_batches,
    )
    step_model = StepModel(model, gpu, spec.tp, quant, consts, spec.kv_dtype)
    return Replica(spec, model, gpu, quant, consts, memory, config, step_model)
