"""Build an engine replica (config + step model) from catalog names and the stack's knobs."""

from __future__ import annotations

from dataclasses import dataclass, field

from inhouse.engine.config import EngineConfig
from inhouse.engine.core import EngineCore
from inhouse.errors import DoesNotFitError, SpecError
from inhouse.perf.constants import EngineConstants, get_engine_constants
from inhouse.perf.lora import LoraCost, lora_cost, with_lora_slots
from inhouse.perf.memory import MemoryPlan, plan_memory, sglang_mem_fraction_static
from inhouse.perf.step import StepModel
from inhouse.spec.catalog import GpuSpec, ModelSpec, get_gpu, get_model
from inhouse.spec.knobs import EngineKnobs
from inhouse.spec.parallel import ParallelLayout, check_layout
from inhouse.spec.quant import WeightQuants, resolve_weight_quants


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
    # Parallel layout beyond plain TP (see `inhouse.spec.parallel`); 0 derives plain TP.
    attention_dp: int = 1
    moe_tp: int = 0
    moe_ep: int = 0
    pp: int = 1
    # Per-part quantization modes as the calibration corpus names them ("" = `quant`).
    gemm_quant: str = ""
    moe_quant: str = ""
    # SGLang's `--mem-fraction-static` where the launch passed one; None: SGLang's own rule
    # (`inhouse.perf.memory.sglang_mem_fraction_static`). Ignored by vLLM's memory rule.
    mem_fraction_static: float | None = None
    # SGLang's `--scheduler-recv-interval` (`EngineConfig.recv_interval`); 1 is every step,
    # SGLang's default and vLLM's only behaviour.
    scheduler_recv_interval: int = 1

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
    _check_sglang_knobs(spec)
    consts = constants or get_engine_constants(spec.backend)
    knobs = spec.knobs
    max_num_seqs = knobs.max_num_seqs or consts.max_num_seqs
    max_model_len = knobs.max_model_len or model.max_context
    max_batched = _token_budget(knobs, consts, gpu, max_model_len)
    # NOTE: each attention-DP group runs its own scheduler with the engine's per-group
    # defaults; the simulated core schedules the replica as one, with their sums.
    static_fraction = None
    if consts.memory_rule == "mem_fraction_static":
        # NOTE: CUDA graphs are taken as captured up to the running cap (the calibration
        # harness passes --cuda-graph-bs 1..C), the prefill as one budget's worth of tokens.
        static_fraction = spec.mem_fraction_static
        if static_fraction is None:
            static_fraction = sglang_mem_fraction_static(gpu, layout, max_batched, max_num_seqs)
    max_num_seqs *= layout.attention_dp
    max_batched *= layout.attention_dp
    memory = plan_memory(
        model,
        gpu,
        layout,
        quant,
        kv_dtype=knobs.kv_cache_dtype,
        gpu_memory_utilization=knobs.gpu_memory_utilization,
        max_num_batched_tokens=max_batched,
        max_num_seqs=max_num_seqs,
        block_size=knobs.block_size,
        min_kv_tokens=max_model_len if knobs.max_model_len else 0,
        mem_fraction_static=static_fraction,
    )
    lora = None
    if spec.lora_adapters:
        slots = knobs.max_loras or len(spec.lora_adapters)
        lora = lora_cost(model, gpu, spec.tp, len(spec.lora_adapters), slots, knobs.max_lora_rank)
        memory = _take_lora_slots(memory, lora, max_model_len if knobs.max_model_len else 0)
    if memory.max_num_seqs is not None:
        max_num_seqs = min(max_num_seqs, memory.max_num_seqs)
    config = _engine_config(spec, consts, memory, lora, max_num_seqs, max_batched, max_model_len)
    step_model = StepModel(model, gpu, layout, quant, consts, knobs.kv_cache_dtype)
    return Replica(spec, model, gpu, quant, layout, consts, memory, config, step_model)


def _check_sglang_knobs(spec: ReplicaSpec) -> None:
    """SGLang's launch knobs the spec carries: a memory fraction in (0, 1], a whole receive
    interval of at least 1, and above 1 only on SGLang."""
    passed = spec.mem_fraction_static
    if passed is not None and not 0 < passed <= 1:
        raise SpecError(
            f"mem_fraction_static={passed}: SGLang's --mem-fraction-static is a fraction of "
            "the GPU's memory in (0, 1]; pass the launch's value, or None for SGLang's own rule"
        )
    interval = spec.scheduler_recv_interval
    if not isinstance(interval, int) or interval < 1:
        raise SpecError(
            f"scheduler_recv_interval={interval!r}: SGLang's --scheduler-recv-interval is a "
            "whole number of decode steps, at least 1 (1: take new requests every step)"
        )
    # NOTE: the backend as the engine table reads it (`get_engine_constants`): "SGLang" is SGLang.
    if interval > 1 and spec.backend.strip().lower() != "sglang":
        raise SpecError(
            f"scheduler_recv_interval={interval}: only SGLang skips receiving requests; "
            f"{spec.backend} takes them every step, so leave it at 1"
        )


def _engine_config(
    spec: ReplicaSpec,
    consts: EngineConstants,
    memory: MemoryPlan,
    lora: LoraCost | None,
    max_num_seqs: int,
    max_batched: int,
    max_model_len: int,
) -> EngineConfig:
    """The simulated core's configuration: the KV blocks `memory` leaves, the knobs, the
    running cap, token budget and context as resolved, and the engine's host costs."""
    knobs = spec.knobs
    host_blocks = 0
    if knobs.host_kv_gib > 0:
        per_block = memory.kv_bytes_per_token_per_gpu * spec.tp * knobs.block_size
        host_blocks = int(knobs.host_kv_gib * 1024**3 // per_block)
    return EngineConfig(
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
        output_token_overhead_s=consts.output_token_overhead_s,
        reserve_new_tokens=consts.reserve_new_tokens,
        mixed_batches=consts.mixed_batches,
        recv_interval=spec.scheduler_recv_interval,
        lora=lora,
    )


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


def _token_budget(knobs: EngineKnobs, consts: EngineConstants, gpu: GpuSpec, max_len: int) -> int:
    """`max_num_batched_tokens`, as the engine settles it (its default depends on the GPU's
    memory for SGLang). vLLM without chunked prefill needs a whole prompt to fit one step, so
    the default grows to `max_model_len` and a smaller setting is an error; SGLang's separate
    prefill batches take a longer prompt alone (`Scheduler._admit`), so its budget stands."""
    default = consts.batched_tokens_for(gpu.hbm_gb)
    if knobs.enable_chunked_prefill or not consts.mixed_batches:
        return knobs.max_num_batched_tokens or default
    if knobs.max_num_batched_tokens is None:
        return max(max_len, default)
    if knobs.max_num_batched_tokens < max_len:
        raise SpecError(
            f"knobs.max_num_batched_tokens ({knobs.max_num_batched_tokens}) is smaller than "
            f"max_model_len ({max_len}) with enable_chunked_prefill off: no prompt longer "
            "than the budget could ever run. Raise max_num_batched_tokens, lower "
            "max_model_len, or turn chunked prefill back on."
        )
    return knobs.max_num_batched_tokens
