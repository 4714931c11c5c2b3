"""GPU memory: weights, KV cache per token, and the KV budget a replica is left with.

One place computes KV bytes; everything else (planner, engine, server) asks here. A replica's
GPUs follow its `ParallelLayout`: attention, dense MLPs and the embeddings are sharded over the
attention TP group and copied per attention-DP group; routed experts spread over all GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from inhouse.errors import DoesNotFitError
from inhouse.spec.catalog import GIB, GpuSpec, ModelSpec
from inhouse.spec.parallel import ParallelLayout, as_layout
from inhouse.spec.quant import Quant, WeightQuants, kv_dtype_bytes

# Memory vLLM keeps outside the KV cache beyond weights: the CUDA context, cuBLAS/attention
# workspaces and CUDA graphs. Measured vLLM profiles show 1-2 GiB; NCCL buffers add ~0.4 GiB at
# TP > 1 (AIConfigurator's nccl_mem is 342-392 MB).
FIXED_RESERVE_BYTES = 1.5 * GIB
NCCL_RESERVE_BYTES = 0.4 * GIB
ACTIVATION_BYTES = 2  # bf16 activations
# DeepSeek Sparse Attention's indexer caches one FP8 key per token and layer, with a scale
# per 128 values.
INDEXER_KEY_BYTES = 1.0 + 4.0 / 128
# NOTE: the recurrent state of linear-attention layers comes out of the same memory as the KV
# cache (vLLM's hybrid allocator and SGLang's state pool both size it against the KV budget);
# at most this share of the budget is reserved for it, and `max_num_seqs` is capped to fit.
MAX_STATE_SHARE = 0.5
# The CUDA context and allocator state a process holds before it loads weights (an estimate;
# 0.3-0.8 GiB is what `nvidia-smi` shows for an idle PyTorch process on H100/B200).
CUDA_CONTEXT_BYTES = 0.5 * GIB
MIB = 1024**2


def _as_quants(quant: Quant | WeightQuants) -> WeightQuants:
    return quant if isinstance(quant, WeightQuants) else WeightQuants.uniform(quant)


@dataclass(frozen=True, slots=True)
class WeightBreakdown:
    """Parameters of a checkpoint by where they live and how they are stored.

    `attention_sharded` splits over the attention TP group; `attention_replicated` (MLA's
    down-projections, which vLLM and SGLang keep whole on every rank) does not; `dense` is
    the dense MLPs and shared experts; `experts` the routed experts of all layers;
    `router` the gates; `lm_head` and `input_embedding` stay 16-bit.
    """

    attention_sharded: float
    attention_replicated: float
    dense: float
    experts: float
    router: float
    lm_head: float
    input_embedding: float

    @classmethod
    def of(cls, model: ModelSpec) -> WeightBreakdown:
        replicated = 0.0
        if model.mla is not None:
            mla = model.mla
            down = model.hidden_size * (mla.q_lora_rank + mla.kv_lora_rank + mla.qk_rope_head_dim)
            replicated = float(model.num_full_attention_layers * down)
        if model.is_moe:
            layer_mlp = model.mlp_params_per_expert
            dense = model.num_dense_layers * model.dense_mlp_params
            dense += model.num_moe_layers * model.num_shared_experts * layer_mlp
            experts = model.num_moe_layers * model.num_experts * layer_mlp
        else:
            dense, experts = model.num_layers * model.mlp_params_per_expert, 0
        tied = model.tie_word_embeddings
        return cls(
            attention_sharded=float(model.mixer_params) - replicated,
            attention_replicated=replicated,
            dense=float(dense),
            experts=float(experts),
            router=float(model.num_moe_layers * model.router_params),
            lm_head=float(model.lm_head_params),
            input_embedding=0.0 if tied else float(model.lm_head_params),
        )


def weight_bytes(model: ModelSpec, quant: Quant | WeightQuants) -> float:
    """Bytes of all weights. Embeddings, the LM head and the routers stay 16-bit."""
    parts = WeightBreakdown.of(model)
    q = _as_quants(quant)
    attention = (parts.attention_sharded + parts.attention_replicated) * q.attention.weight_bytes
    body = attention + parts.dense * q.dense.weight_bytes + parts.experts * q.experts.weight_bytes
    return body + (parts.router + parts.lm_head + parts.input_embedding) * 2.0


def weight_bytes_per_gpu(
    model: ModelSpec, quant: Quant | WeightQuants, layout: ParallelLayout
) -> float:
    """Bytes of weights one GPU of the layout holds."""
    parts = WeightBreakdown.of(model)
    q = _as_quants(quant)
    sharded = (
        parts.attention_sharded * q.attention.weight_bytes + parts.dense * q.dense.weight_bytes
    )
    sharded += (parts.lm_head + parts.input_embedding) * 2.0
    replicated = parts.attention_replicated * q.attention.weight_bytes + parts.router * 2.0
    experts = parts.experts * q.experts.weight_bytes / layout.moe_group
    return sharded / layout.tp + replicated + experts


def kv_elements_per_token_per_layer(model: ModelSpec, tp: int = 1) -> float:
    """KV elements one token caches in one softmax-attention layer on one GPU of a TP group:
    a key and a value per KV head (split over TP, replicated when TP exceeds them), or MLA's
    latent plus rope key (the same on every rank)."""
    if model.mla is not None:
        return float(model.mla.kv_lora_rank + model.mla.qk_rope_head_dim)
    heads_per_gpu = max(model.num_kv_heads / tp, 1.0)
    return 2.0 * heads_per_gpu * model.head_dim


def kv_bytes_per_token(model: ModelSpec, kv_dtype: str = "auto") -> float:
    """KV cache bytes one token takes across the whole model: 2 · L · n_kv · d_h · b for GQA,
    L · (kv_lora_rank + rope) · b for MLA, plus the sparse-attention indexer's key.

    NOTE: sliding-window layers are counted in full, which over-states gpt-oss's KV need; vLLM's
    hybrid allocator would cap those layers at the window.
    """
    return kv_bytes_per_token_per_gpu(model, 1, kv_dtype)


def kv_bytes_per_token_per_gpu(model: ModelSpec, tp: int, kv_dtype: str = "auto") -> float:
    """Per-GPU share of a token's KV in a TP group of `tp` GPUs."""
    per_layer = kv_elements_per_token_per_layer(model, tp) * kv_dtype_bytes(kv_dtype)
    if model.sparse_attention is not None:
        per_layer += model.sparse_attention.indexer_head_dim * INDEXER_KEY_BYTES
    return model.num_full_attention_layers * per_layer


def state_bytes_per_seq_per_gpu(model: ModelSpec, tp: int) -> float:
    """Recurrent state one sequence holds on one GPU (linear-attention layers, heads over TP)."""
    lin = model.linear_attention
    if lin is None:
        return 0.0
    return lin.num_layers * lin.state_bytes_per_layer / tp


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """How one replica's GPU memory is spent, per GPU, and what KV capacity it leaves.

    `num_blocks` counts the whole replica: with attention DP each group holds its own blocks.
    `max_num_seqs` is the running cap the memory allows (linear-attention state), or None.
    """

    usable_bytes_per_gpu: float
    weight_bytes_per_gpu: float
    reserve_bytes_per_gpu: float
    kv_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    block_size: int
    num_blocks: int
    state_bytes_per_gpu: float = 0.0
    max_num_seqs: int | None = None

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.block_size


def reserve_bytes_per_gpu(
    model: ModelSpec, tp: int, max_num_batched_tokens: int, max_num_seqs: int
) -> float:
    """Activation peak of the largest step plus fixed runtime overheads, per GPU."""
    width = model.dense_intermediate_size if model.is_moe else model.intermediate_size
    hidden_acts = 4 * model.hidden_size + 2 * max(width, model.intermediate_size) / tp
    activations = max_num_batched_tokens * hidden_acts * ACTIVATION_BYTES
    logits = max_num_seqs * model.vocab_size * 4  # fp32 logits for sampling
    nccl = NCCL_RESERVE_BYTES if tp > 1 else 0.0
    return FIXED_RESERVE_BYTES + nccl + activations + logits


def sglang_mem_fraction_static(
    gpu: GpuSpec, layout: ParallelLayout, prefill_tokens: int, cuda_graph_max_bs: int
) -> float:
    """SGLang's default `--mem-fraction-static`: the share of GPU memory for weights and KV.

    SGLang's rule (`ServerArgs._handle_gpu_memory_settings`, 0.5.x), in MiB: 512 of metadata,
    1.5 per token of the largest prefill (its chunk, or `--max-prefill-tokens` with chunking
    off; at least 2048), 2 per CUDA-graph batch size, 1024 per 8 GPUs of the replica, and
    with attention DP 3 (4.5 above 300) per graph batch per DP rank; at least 10 GiB on a GPU
    of more than 60 GiB. The fraction is (memory - that) / memory, rounded to 3 places.
    """
    gpu_mib = gpu.hbm_bytes / MIB
    reserved = 512 + max(prefill_tokens, 2048) * 1.5 + cuda_graph_max_bs * 2
    reserved += layout.num_gpus * layout.pp / 8 * 1024
    if layout.attention_dp > 1:
        reserved += (
            cuda_graph_max_bs * layout.attention_dp * (4.5 if cuda_graph_max_bs > 300 else 3)
        )
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((gpu_mib - reserved) / gpu_mib, 3)


def plan_memory(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int | ParallelLayout,
    quant: Quant | WeightQuants,
    kv_dtype: str = "auto",
    gpu_memory_utilization: float = 0.9,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    block_size: int = 16,
    min_kv_tokens: int = 0,
    mem_fraction_static: float | None = None,
) -> MemoryPlan:
    """Split one replica's memory; raise `DoesNotFitError` naming the shortfall if it cannot run.

    `tp` is a plain tensor-parallel degree or a full layout. `min_kv_tokens` is the KV the
    caller needs (e.g. one `max_model_len` sequence, as vLLM checks at start-up); it must fit.

    Two engines' rules: vLLM (the default) takes `gpu_memory_utilization` of the GPU and
    leaves weights, the activation peak and its fixed runtime reserve outside the KV cache.
    SGLang (`mem_fraction_static` given, see `sglang_mem_fraction_static`) sizes its KV pool
    as that fraction of the memory free before it loads weights, less the weights: the
    activations and CUDA graphs live in the rest, so no reserve is taken from the budget.
    """
    _check_fractions(gpu, gpu_memory_utilization, mem_fraction_static)
    layout = as_layout(tp)
    quants = _as_quants(quant)
    weights = weight_bytes_per_gpu(model, quants, layout)
    per_rank_seqs = -(-max_num_seqs // layout.attention_dp)
    per_rank_tokens = max_num_batched_tokens // layout.attention_dp or 1
    if mem_fraction_static is None:
        usable = gpu.hbm_bytes * gpu_memory_utilization
        reserve = reserve_bytes_per_gpu(model, layout.tp, per_rank_tokens, per_rank_seqs)
        share = f"gpu_memory_utilization {gpu_memory_utilization}"
    else:
        nccl = NCCL_RESERVE_BYTES if layout.num_gpus > 1 else 0.0
        usable = (gpu.hbm_bytes - CUDA_CONTEXT_BYTES - nccl) * mem_fraction_static
        reserve = 0.0
        share = f"mem_fraction_static {mem_fraction_static}"
    kv_per_token = kv_bytes_per_token_per_gpu(model, layout.tp, kv_dtype)
    budget = usable - weights - reserve
    where = f"{model.name} {quants.name} on {layout.num_gpus}x {gpu.name} ({layout.describe()})"
    where += f" at {share}"
    if budget <= 0:
        raise _weights_too_large(where, weights, reserve, usable, budget)
    seq_cap, state_bytes = _state_cap(model, layout, per_rank_seqs, budget)
    kv_bytes = budget - state_bytes
    num_blocks = int(kv_bytes // (kv_per_token * block_size)) * layout.attention_dp
    per_rank_tokens_kv = num_blocks // layout.attention_dp * block_size
    if per_rank_tokens_kv < min_kv_tokens or (seq_cap is not None and seq_cap < 1):
        short = (min_kv_tokens * kv_per_token - kv_bytes) / GIB
        raise _kv_too_small(where, per_rank_tokens_kv, min_kv_tokens, short)
    return MemoryPlan(
        usable_bytes_per_gpu=usable,
        weight_bytes_per_gpu=weights,
        reserve_bytes_per_gpu=reserve,
        kv_bytes_per_gpu=kv_bytes,
        kv_bytes_per_token_per_gpu=kv_per_token,
        block_size=block_size,
        num_blocks=num_blocks,
        state_bytes_per_gpu=state_bytes,
        max_num_seqs=seq_cap,
    )


def _check_fractions(
    gpu: GpuSpec, gpu_memory_utilization: float, mem_fraction_static: float | None
) -> None:
    if not 0 < gpu_memory_utilization <= 1:
        raise DoesNotFitError(
            f"gpu_memory_utilization={gpu_memory_utilization} must be in (0, 1]; vLLM uses 0.9"
        )
    if mem_fraction_static is not None and not 0 < mem_fraction_static <= 1:
        raise DoesNotFitError(
            f"mem_fraction_static={mem_fraction_static}: SGLang's reserve for activations and "
            f"CUDA graphs takes all of a {gpu.name}'s memory; lower the prefill budget "
            "(max_num_batched_tokens) or max_num_seqs"
        )


def _state_cap(
    model: ModelSpec, layout: ParallelLayout, per_rank_seqs: int, budget: float
) -> tuple[int | None, float]:
    """(the running cap the per-sequence state leaves, None without state; its bytes per
    GPU): linear-attention state takes at most `MAX_STATE_SHARE` of the budget."""
    state_per_seq = state_bytes_per_seq_per_gpu(model, layout.tp)
    if state_per_seq <= 0:
        return None, 0.0
    per_rank_cap = min(per_rank_seqs, int(MAX_STATE_SHARE * budget // state_per_seq))
    return per_rank_cap * layout.attention_dp, per_rank_cap * state_per_seq


def _kv_too_small(where: str, holds: int, needed: int, short_gib: float) -> DoesNotFitError:
    return DoesNotFitError(
        f"{where}: KV cache holds {holds:,} tokens but {needed:,} "
        f"are needed (short by {short_gib:.1f} GiB per GPU). Try a smaller max_model_len, an "
        "fp8 KV cache, a higher gpu_memory_utilization or a higher tensor-parallel degree."
    )


def _weights_too_large(
    where: str, weights: float, reserve: float, usable: float, budget: float
) -> DoesNotFitError:
    return DoesNotFitError(
        f"{where}: weights ({weights / GIB:.1f} GiB/GPU) plus runtime reserve "
        f"({reserve / GIB:.1f} GiB/GPU) exceed usable memory ({usable / GIB:.1f} GiB/GPU) "
        f"by {-budget / GIB:.1f} GiB per GPU. Try a higher tensor-parallel degree, a smaller "
        "quantization (fp8, w4a16) or a GPU with more memory."
    )
