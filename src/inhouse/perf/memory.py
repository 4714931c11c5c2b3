"""GPU memory: weights, KV cache per token, and the KV budget a replica is left with.

One place computes KV bytes; everything else (planner, engine, server) asks here.
"""

from __future__ import annotations

from dataclasses import dataclass

from inhouse.errors import DoesNotFitError
from inhouse.spec.catalog import GIB, GpuSpec, ModelSpec
from inhouse.spec.quant import Quant, kv_dtype_bytes

# Memory vLLM keeps outside the KV cache beyond weights: the CUDA context, cuBLAS/attention
# workspaces and CUDA graphs. Measured vLLM profiles show 1-2 GiB; NCCL buffers add ~0.4 GiB at
# TP > 1 (AIConfigurator's nccl_mem is 342-392 MB).
FIXED_RESERVE_BYTES = 1.5 * GIB
NCCL_RESERVE_BYTES = 0.4 * GIB
ACTIVATION_BYTES = 2  # bf16 activations


def weight_bytes(model: ModelSpec, quant: Quant) -> float:
    """Bytes of all weights. Embeddings and the LM head stay 16-bit in quantized checkpoints."""
    body = model.num_params - model.embedding_params
    return body * quant.weight_bytes + model.embedding_params * 2.0


def kv_bytes_per_token(model: ModelSpec, kv_dtype: str = "auto") -> float:
    """KV cache bytes one token takes across the whole model: 2 · L · n_kv · d_h · b.

    NOTE: sliding-window layers are counted in full, which over-states gpt-oss's KV need; vLLM's
    hybrid allocator would cap those layers at the window.
    """
    return 2 * model.num_layers * model.num_kv_heads * model.head_dim * kv_dtype_bytes(kv_dtype)


def kv_bytes_per_token_per_gpu(model: ModelSpec, tp: int, kv_dtype: str = "auto") -> float:
    """Per-GPU share of a token's KV: KV heads split over TP, replicated when TP > n_kv."""
    heads_per_gpu = max(model.num_kv_heads / tp, 1.0)
    return 2 * model.num_layers * heads_per_gpu * model.head_dim * kv_dtype_bytes(kv_dtype)


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """How one replica's GPU memory is spent, per GPU, and what KV capacity it leaves."""

    usable_bytes_per_gpu: float
    weight_bytes_per_gpu: float
    reserve_bytes_per_gpu: float
    kv_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    block_size: int
    num_blocks: int

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.block_size


def reserve_bytes_per_gpu(
    model: ModelSpec, tp: int, max_num_batched_tokens: int, max_num_seqs: int
) -> float:
    """Activation peak of the largest step plus fixed runtime overheads, per GPU."""
    hidden_acts = 4 * model.hidden_size + 2 * model.intermediate_size / tp
    activations = max_num_batched_tokens * hidden_acts * ACTIVATION_BYTES
    logits = max_num_seqs * model.vocab_size * 4  # fp32 logits for sampling
    nccl = NCCL_RESERVE_BYTES if tp > 1 else 0.0
    return FIXED_RESERVE_BYTES + nccl + activations + logits


def plan_memory(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int,
    quant: Quant,
    kv_dtype: str = "auto",
    gpu_memory_utilization: float = 0.9,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 256,
    block_size: int = 16,
    min_kv_tokens: int = 0,
) -> MemoryPlan:
    """Split one replica's memory; raise `DoesNotFitError` naming the shortfall if it cannot run.

    `min_kv_tokens` is the KV the caller needs (e.g. one `max_model_len` sequence, as vLLM
    checks at start-up); it must fit too.
    """
    if not 0 < gpu_memory_utilization <= 1:
        raise DoesNotFitError(
            f"gpu_memory_utilization={gpu_memory_utilization} must be in (0, 1]; vLLM uses 0.9"
        )
    usable = gpu.hbm_bytes * gpu_memory_utilization
    weights = weight_bytes(model, quant) / tp
    reserve = reserve_bytes_per_gpu(model, tp, max_num_batched_tokens, max_num_seqs)
    kv_per_token = kv_bytes_per_token_per_gpu(model, tp, kv_dtype)
    kv_bytes = usable - weights - reserve
    where = (
        f"{model.name} {quant.name} on {tp}x {gpu.name} "
        f"at gpu_memory_utilization {gpu_memory_utilization}"
    )
    if kv_bytes <= 0:
        short_gib = -kv_bytes / GIB
        raise DoesNotFitError(
            f"{where}: weights ({weights / GIB:.1f} GiB/GPU) plus runtime reserve "
            f"({reserve / GIB:.1f} GiB/GPU) exceed usable memory ({usable / GIB:.1f} GiB/GPU) "
            f"by {short_gib:.1f} GiB per GPU. Try a higher tensor-parallel degree, a smaller "
            "quantization (fp8, w4a16) or a GPU with more memory."
        )
    num_blocks = int(kv_bytes // (kv_per_token * block_size))
    if num_blocks * block_size < min_kv_tokens:
        need_gib = (min_kv_tokens * kv_per_token - kv_bytes) / GIB
        raise DoesNotFitError(
            f"{where}: KV cache holds {num_blocks * block_size:,} tokens but {min_kv_tokens:,} "
            f"are needed (short by {need_gib:.1f} GiB per GPU). Try a smaller max_model_len, an "
            "fp8 KV cache, a higher gpu_memory_utilization or a higher tensor-parallel degree."
        )
    return MemoryPlan(
        usable_bytes_per_gpu=usable,
        weight_bytes_per_gpu=weights,
        reserve_bytes_per_gpu=reserve,
        kv_bytes_per_gpu=kv_bytes,
        kv_bytes_per_token_per_gpu=kv_per_token,
        block_size=block_size,
        num_blocks=num_blocks,
    )
