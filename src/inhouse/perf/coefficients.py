"""The coefficients of the step-time model for one replica: seconds per unit of each term.

`compute_coefficients` reads the catalog (model, GPU) and the layout and quantization of the
replica, and the engine's fitted constants; nothing else. `perf.step.step_seconds` combines
them with a step's shape. Names say the unit: `_weight_s` is a fixed read per step, `_flop_s`
seconds per GEMM row, `_s_per_ctx` per attended context token, `_pair_s` per query-key pair.
"""

from __future__ import annotations

from dataclasses import dataclass

from inhouse.perf.constants import EngineConstants
from inhouse.perf.memory import (
    INDEXER_KEY_BYTES,
    WeightBreakdown,
    kv_elements_per_token_per_layer,
    state_bytes_per_seq_per_gpu,
)
from inhouse.spec.catalog import GpuSpec, ModelSpec
from inhouse.spec.parallel import ParallelLayout, as_layout
from inhouse.spec.quant import Quant, WeightQuants, kv_dtype_bytes

ACTIVATION_BYTES = 2.0
INF = float("inf")


@dataclass(frozen=True, slots=True)
class StepCoefficients:
    """Seconds per unit of every term of `step_seconds` (see perf/step.py)."""

    layout: ParallelLayout
    quants: WeightQuants
    attention_dp: int
    m_half: float
    moe_m_half: float
    attn_weight_s: float
    attn_flop_s: float
    dense_weight_s: float
    dense_flop_s: float
    lm_head_weight_s: float
    lm_head_flop_s: float
    num_experts: int
    experts_per_tok: int
    expert_fraction: float
    expert_weight_s: float
    expert_flop_s: float
    permute_s_per_token: float
    kv_s_per_ctx: float
    kv_s_per_seq: float
    index_s_per_ctx: float
    sparse_topk: float
    decode_pair_s: float
    prefill_pair_s: float
    index_pair_s: float
    state_s_per_seq: float
    comm_fixed_s: float
    comm_s_per_rank_token: float
    comm_s_per_token: float
    fixed_s: float
    seq_s: float
    seq_rank_s: float
    host_s_per_token: float


def _eta(c: EngineConstants, compute: str) -> float:
    return c.eta_compute if compute == "bf16" else c.eta_compute_fp8


def _read_bw(c: EngineConstants, gpu: GpuSpec, quant: Quant) -> float:
    """Effective bytes/s of reading weights stored this way: weight-only low-bit weights
    unpacked into 16-bit math reach a fraction of it."""
    bw = c.eta_bw * gpu.hbm_bw_bytes_s
    weight_only = quant.weight_bytes < 1.0 and _compute(gpu, quant) == "bf16"
    return bw * c.eta_dequant if weight_only else bw


def _compute(gpu: GpuSpec, quant: Quant) -> str:
    return quant.compute if gpu.peak_flops(quant.compute) > gpu.peak_flops("bf16") else "bf16"


def _gemm_rate(c: EngineConstants, gpu: GpuSpec, quant: Quant) -> float:
    """Effective FLOP/s of large GEMMs with this quantization on this GPU."""
    compute = _compute(gpu, quant)
    return _eta(c, compute) * gpu.peak_flops(compute)


def _link(gpu: GpuSpec, group: int, c: EngineConstants) -> tuple[float, float]:
    """(latency per collective, bytes/s) for a collective over `group` GPUs."""
    if group <= gpu.nvlink_domain:
        alpha, bw = gpu.link_latency_us, gpu.link_bw_gbps
    else:
        alpha, bw = gpu.scale_out_latency_us, gpu.scale_out_bw_gbps
    return alpha * 1e-6 * c.allreduce_latency_scale, bw * 1e9 * c.eta_link


def _collectives(
    model: ModelSpec, gpu: GpuSpec, layout: ParallelLayout, c: EngineConstants
) -> tuple[float, float, float]:
    """(fixed s, s per token of the busiest attention group, s per token of the replica).

    One attention group (plain TP): two all-reduces a layer over `tp` GPUs (after attention
    and after the MLP or the expert combine). With attention DP: one all-reduce a layer over
    `tp` after attention (and one after each dense MLP), and around every MoE layer an
    all-gather of the replica's tokens and a reduce-scatter of the results over all GPUs.
    """
    row = model.hidden_size * ACTIVATION_BYTES
    fixed = per_rank_token = per_token = 0.0
    tp, group = layout.tp, layout.moe_group
    if layout.attention_dp == 1:
        if tp > 1:
            alpha, bw = _link(gpu, tp, c)
            fixed = 2 * model.num_layers * alpha
            per_rank_token = 2 * model.num_layers * 2 * (tp - 1) / tp * row / bw
        return fixed, per_rank_token, per_token
    if tp > 1:
        alpha, bw = _link(gpu, tp, c)
        count = model.num_layers + (model.num_dense_layers if model.is_moe else model.num_layers)
        fixed += count * alpha
        per_rank_token += count * 2 * (tp - 1) / tp * row / bw
    alpha, bw = _link(gpu, group, c)
    moe_layers = model.num_moe_layers
    fixed += 2 * moe_layers * alpha
    per_token += moe_layers * 2 * (group - 1) / group * row / bw
    return fixed, per_rank_token, per_token


def _attention_terms(
    model: ModelSpec, gpu: GpuSpec, tp: int, c: EngineConstants, kv_dtype: str, bw: float
) -> dict[str, float]:
    """KV reads, attention FLOPs and recurrent state, per GPU of one attention group."""
    full_layers = model.num_full_attention_layers
    window_layers = model.sliding_window_layers
    dense_layers = full_layers - window_layers
    kv_layer = kv_elements_per_token_per_layer(model, tp) * kv_dtype_bytes(kv_dtype)
    has_fp8 = gpu.fp8_tflops is not None
    peak = gpu.peak_flops("fp8" if kv_dtype_bytes(kv_dtype) < 2 and has_fp8 else "bf16")
    attn_rate = c.eta_attention * peak
    heads = model.num_attention_heads / tp
    if model.mla is not None:
        mla = model.mla
        decode = 2 * (mla.kv_lora_rank + mla.qk_rope_head_dim) + 2 * mla.kv_lora_rank
        prefill = 2 * model.head_dim + 2 * mla.v_head_dim
    else:
        decode = prefill = 4 * model.head_dim
    sparse = model.sparse_attention
    index_bytes = sparse.indexer_head_dim * INDEXER_KEY_BYTES if sparse else 0.0
    index_flops = 2 * sparse.indexer_heads * sparse.indexer_head_dim if sparse else 0.0
    fp8_rate = c.eta_attention * gpu.peak_flops("fp8")
    return {
        "kv_s_per_ctx": dense_layers * kv_layer / bw,
        "kv_s_per_seq": window_layers * kv_layer * model.sliding_window / bw,
        "index_s_per_ctx": full_layers * index_bytes / bw,
        "sparse_topk": float(sparse.topk) if sparse else INF,
        "decode_pair_s": full_layers * heads * decode / attn_rate,
        "prefill_pair_s": full_layers * heads * prefill / attn_rate,
        "index_pair_s": full_layers * index_flops / fp8_rate,
        "state_s_per_seq": 2 * state_bytes_per_seq_per_gpu(model, tp) / bw,
    }


def compute_coefficients(
    model: ModelSpec,
    gpu: GpuSpec,
    tp: int | ParallelLayout,
    quant: Quant | WeightQuants,
    c: EngineConstants,
    kv_dtype: str = "auto",
) -> StepCoefficients:
    """Every coefficient of the step-time model for one replica."""
    layout = as_layout(tp)
    quants = quant if isinstance(quant, WeightQuants) else WeightQuants.uniform(quant)
    parts = WeightBreakdown.of(model)
    bw = c.eta_bw * gpu.hbm_bw_bytes_s
    bf16_rate = c.eta_compute * gpu.peak_flops("bf16")
    t = layout.tp
    attn_params = parts.attention_sharded / t + parts.attention_replicated
    attn_bytes = attn_params * quants.attention.weight_bytes + parts.router * 2.0
    attn_rate = _gemm_rate(c, gpu, quants.attention)
    dense_params = parts.dense / t
    experts = model.num_experts if model.is_moe else 0
    group = layout.moe_group
    expert_layer_params = model.num_moe_layers * model.mlp_params_per_expert
    expert_rate = _gemm_rate(c, gpu, quants.experts)
    expert_bw = _read_bw(c, gpu, quants.experts)
    fixed_comm, rank_comm, token_comm = _collectives(model, gpu, layout, c)
    sparse_layers = model.num_full_attention_layers if model.sparse_attention else 0
    # Dispatch and combine each read and write every token's hidden vector once per expert.
    permute_bytes = 4 * model.num_experts_per_tok * model.hidden_size * model.num_moe_layers
    return StepCoefficients(
        layout=layout,
        quants=quants,
        attention_dp=layout.attention_dp,
        m_half=c.gemm_m_half,
        moe_m_half=c.moe_m_half,
        attn_weight_s=attn_bytes / _read_bw(c, gpu, quants.attention),
        attn_flop_s=2 * attn_params / attn_rate + 2 * parts.router / bf16_rate,
        dense_weight_s=dense_params * quants.dense.weight_bytes / _read_bw(c, gpu, quants.dense),
        dense_flop_s=2 * dense_params / _gemm_rate(c, gpu, quants.dense),
        lm_head_weight_s=parts.lm_head / t * 2.0 / bw,
        lm_head_flop_s=2 * parts.lm_head / t / bf16_rate,
        num_experts=experts,
        experts_per_tok=max(model.num_experts_per_tok, 1),
        expert_fraction=model.num_experts_per_tok / experts if experts else 0.0,
        expert_weight_s=expert_layer_params * quants.experts.weight_bytes / group / expert_bw,
        expert_flop_s=2 * model.num_experts_per_tok * expert_layer_params / group / expert_rate,
        permute_s_per_token=permute_bytes * ACTIVATION_BYTES / bw if experts else 0.0,
        **_attention_terms(model, gpu, t, c, kv_dtype, bw),
        comm_fixed_s=fixed_comm,
        comm_s_per_rank_token=rank_comm,
        comm_s_per_token=token_comm,
        fixed_s=c.step_overhead_s
        + c.layer_overhead_s * model.num_layers
        + c.moe_layer_overhead_s * model.num_moe_layers
        + c.sparse_layer_overhead_s * sparse_layers,
        seq_s=c.seq_overhead_s,
        seq_rank_s=c.seq_layer_overhead_s * model.num_layers,
        host_s_per_token=_host_kv_bytes(model, t, kv_dtype) / (gpu.host_bw_gbps * 1e9),
    )


def _host_kv_bytes(model: ModelSpec, tp: int, kv_dtype: str) -> float:
    layers = model.num_full_attention_layers
    return layers * kv_elements_per_token_per_layer(model, tp) * kv_dtype_bytes(kv_dtype)
