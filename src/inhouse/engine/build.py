"""Build an engine replica (config + step model) from catalog names and vLLM-style knobs."""

from __future__ import annotations

from dataclasses import dataclass

from inhouse.engine.config import EngineConfig
from inhouse.engine.core import EngineCore
from inhouse.perf.constants import EngineConstants, get_engine_constants
from inhouse.perf.memory import MemoryPlan, plan_memory
from inhouse.perf.step import StepModel
from inhouse.spec.catalog import GpuSpec, ModelSpec, get_gpu, get_model
from inhouse.spec.parallel import ParallelLayout, check_layout
from inhouse.spec.quant import WeightQuants, resolve_weight_quants


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
    enable_chunked_prefill: bool = True
    scheduling_policy: str = "fcfs"
    block_size: int = 16
    host_kv_gib: float = 0.0
    # Parallel layout beyond plain TP (see `inhouse.spec.parallel`); 0 derives plain TP.
    attention_dp: int = 1
    moe_tp: int = 0
    moe_ep: int = 0
    pp: int = 1
    # Per-part quantization modes as the calibration corpus names them ("" = `quant`).
    gemm_quant: str = ""
    moe_quant: str = ""

    def layout_for(self, model: ModelSpec) -> ParallelLayout:
        """The layout; a dense model's expert fields are meaningless and ignored."""
        if not model.is_moe:
            return ParallelLayout(tp=self.tp, attention_dp=self.attention_dp, pp=self.pp)
        return ParallelLayout(self.tp, self.attention_dp, self.moe_tp, self.moe_ep, self.pp)


@dataclass(frozen=True, slots=True)
class Replica:
    """Everything resolved: the specs, the memory split, the engine config and step model."""

    spec: ReplicaSpec
    model: ModelSpec
    gpu: GpuSpec
    quant: WeightQuants
    layout: ParallelLayout
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
    quant = resolve_weight_quants(spec.quant, model.is_moe, spec.gemm_quant, spec.moe_quant)
    layout = spec.layout_for(model)
    check_layout(layout, model)
    consts = constants or get_engine_constants(spec.backend)
    max_num_seqs = spec.max_num_seqs or consts.max_num_seqs
    max_batched = spec.max_num_batched_tokens or consts.batched_tokens_for(gpu.hbm_gb)
    # NOTE: each attention-DP group runs its own scheduler with the engine's per-group
    # defaults; the simulated core schedules the replica as one, with their sums.
    max_num_seqs *= layout.attention_dp
    max_batched *= layout.attention_dp
    max_model_len = spec.max_model_len or model.max_context
    memory = plan_memory(
        model,
        gpu,
        layout,
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
    if memory.max_num_seqs is not None:
        max_num_seqs = min(max_num_seqs, memory.max_num_seqs)
    config = EngineConfig(
        num_gpu_blocks=memory.num_blocks,
        block_size=spec.block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_batched,
        max_model_len=max_model_len,
        enable_prefix_caching=spec.enable_prefix_caching,
        enable_chunked_prefill=spec.enable_chunked_prefill,
        scheduling_policy=spec.scheduling_policy,
        num_host_blocks=host_blocks,
        request_overhead_s=consts.request_overhead_s,
        prompt_token_overhead_s=consts.prompt_token_overhead_s,
        output_token_overhead_s=consts.output_token_overhead_s,
        reserve_new_tokens=consts.reserve_new_tokens,
        mixed_batches=consts.mixed_batches,
    )
    step_model = StepModel(model, gpu, layout, quant, consts, spec.kv_dtype)
    return Replica(spec, model, gpu, quant, layout, consts, memory, config, step_model)
