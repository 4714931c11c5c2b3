"""Build an engine replica (config + step model) from catalog names and the stack's knobs."""

from __future__ import annotations

from dataclasses import dataclass, field

from inhouse.engine.config import EngineConfig
from inhouse.engine.core import EngineCore
from inhouse.errors import DoesNotFitError, SpecError
from inhouse.perf.constants import EngineConstants, get_engine_constants
from inhouse.perf.lora import LoraCost, lora_cost, with_lora_slots
from inhouse.perf.memory import MemoryPlan, plan_memory
from inhouse.perf.step import StepModel
from inhouse.spec.catalog import GpuSpec, ModelSpec, get_gpu, get_model
from inhouse.spec.knobs import EngineKnobs
from inhouse.spec.quant import Quant, normalize_quant


@dataclass(frozen=True, slots=True)
class ReplicaSpec:
    """One engine replica, as a user names it: what runs where (model, GPU, TP, quantization,
    the engine whose constants apply) and the knobs, the stack file's own type, unchanged."""

    model: str
    gpu: str = "h100_sxm"
    tp: int = 1
    quant: str = "bf16"
    backend: str = "vllm"
    knobs: EngineKnobs = field(default_factory=EngineKnobs)
    lora_adapters: tuple[str, ...] = ()


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
    knobs = spec.knobs
    max_num_seqs = knobs.max_num_seqs or consts.max_num_seqs
    max_model_len = knobs.max_model_len or model.max_context
    max_batched = _token_budget(knobs, consts, max_model_len)
    memory = plan_memory(
        model,
        gpu,
        spec.tp,
        quant,
        kv_dtype=knobs.kv_cache_dtype,
        gpu_memory_utilization=knobs.gpu_memory_utilization,
        max_num_batched_tokens=max_batched,
        max_num_seqs=max_num_seqs,
        block_size=knobs.block_size,
        min_kv_tokens=max_model_len if knobs.max_model_len else 0,
    )
    lora = None
    if spec.lora_adapters:
        slots = knobs.max_loras or len(spec.lora_adapters)
        lora = lora_cost(model, gpu, spec.tp, len(spec.lora_adapters), slots, knobs.max_lora_rank)
        memory = _take_lora_slots(memory, lora, max_model_len if knobs.max_model_len else 0)
    host_blocks = 0
    if knobs.host_kv_gib > 0:
        per_block = memory.kv_bytes_per_token_per_gpu * spec.tp * knobs.block_size
        host_blocks = int(knobs.host_kv_gib * 1024**3 // per_block)
    config = EngineConfig(
        num_gpu_blocks=memory.num_blocks,
        block_size=knobs.block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_batched,
        max_model_len=max_model_len,
        enable_prefix_caching=knobs.enable_prefix_caching,
        enable_chunked_prefill=knobs.enable_chunked_prefill,
        long_prefill_token_threshold=knobs.long_prefill_token_threshold,
        scheduling_policy=knobs.scheduling_policy,
        num_host_blocks=host_blocks,
        request_overhead_s=consts.request_overhead_s,
        prompt_token_overhead_s=consts.prompt_token_overhead_s,
        mixed_batches=consts.mixed_batches,
        lora=lora,
    )
    step_model = StepModel(model, gpu, spec.tp, quant, consts, knobs.kv_cache_dtype)
    return Replica(spec, model, gpu, quant, consts, memory, config, step_model)


def _take_lora_slots(memory: MemoryPlan, lora: LoraCost, min_kv_tokens: int) -> MemoryPlan:
    """The KV cache less the adapters' GPU slots (`max_loras` of them at `max_lora_rank`)."""
    after = with_lora_slots(memory, lora)
    if after.num_blocks <= 0 or after.kv_tokens < min_kv_tokens:
        raise DoesNotFitError(
            f"{lora.max_loras} LoRA slot(s) of rank {lora.max_lora_rank} take "
            f"{lora.slot_bytes_per_gpu / 1024**3:.1f} GiB per GPU, leaving "
            f"{max(after.kv_tokens, 0):,} tokens of KV cache (one {min_kv_tokens:,}-token "
            "sequence must fit). Lower knobs.max_loras or knobs.max_lora_rank."
        )
    return after


def _token_budget(knobs: EngineKnobs, consts: EngineConstants, max_model_len: int) -> int:
    """`max_num_batched_tokens`, as vLLM settles it: without chunked prefill a whole prompt must
    fit one step, so the default grows to `max_model_len` and a smaller setting is an error."""
    if knobs.enable_chunked_prefill:
        return knobs.max_num_batched_tokens or consts.max_num_batched_tokens
    if knobs.max_num_batched_tokens is None:
        return max(max_model_len, consts.max_num_batched_tokens)
    if knobs.max_num_batched_tokens < max_model_len:
        raise SpecError(
            f"knobs.max_num_batched_tokens ({knobs.max_num_batched_tokens}) is smaller than "
            f"max_model_len ({max_model_len}) with enable_chunked_prefill off: no prompt longer "
            "than the budget could ever run. Raise max_num_batched_tokens, lower "
            "max_model_len, or turn chunked prefill back on."
        )
    return knobs.max_num_batched_tokens
