"""Step-time model: how long one engine step takes for a given batch.

A step runs every layer once over a batch of tokens: decode tokens (one per running sequence,
each attending its whole context) and prefill chunks (each attending its cached history plus
itself). Its time is the sum of

* linear layers: the larger of reading the weights (`W/TP` over effective HBM bandwidth) and the
  GEMM FLOPs (`2·P_active·tokens/TP` over effective peak); MoE reads only the experts touched;
* attention: the larger of reading the KV of every attended token and the attention FLOPs
  (`4·n_h·d_h·L` per query-key pair);
* tensor-parallel all-reduce: two per layer, a latency term plus the ring's bandwidth term;
* overheads: per step, per layer, per sequence (scheduling, launches, sampling);
* loading KV blocks from the host tier over PCIe, when the step needs them.

Every GPU-specific number comes from the catalog; every engine-specific number from
`EngineConstants`. The shapes follow `shared/reference/perf-model.md` §6.
"""

from __future__ import annotations

from dataclasses import dataclass

from inhouse.perf.constants import EngineConstants
from inhouse.perf.memory import kv_bytes_per_token_per_gpu, weight_bytes
from inhouse.spec.catalog import GpuSpec, ModelSpec
from inhouse.spec.quant import Quant

ACTIVATION_BYTES = 2.0


@dataclass(frozen=True, slots=True)
class StepShape:
    """What one step computes.

    `num_tokens` counts every token the step runs (decode tokens plus prefill-chunk tokens);
    `num_sampled` the tokens that produce logits (decode tokens and prompt-completing chunks);
    `ctx_tokens` the cached tokens whose KV is read; `attn_pairs` the query-key pairs.
    """

    num_seqs: int
    num_tokens: int
    num_sampled: int
    ctx_tokens: int
    attn_pairs: int
    host_load_tokens: int = 0


class StepModel:
    """Precomputed coefficients for one replica (model, GPU, TP, quantization, KV dtype)."""

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        tp: int,
        quant: Quant,
        constants: EngineConstants,
        kv_dtype: str = "auto",
    ) -> None:
        assert tp >= 1, "tp must be at least 1"
        self.model = model
        self.gpu = gpu
        self.tp = tp
        self.quant = quant
        self.constants = constants
        c = constants
        bw = c.eta_bw * gpu.hbm_bw_bytes_s
        eta_gemm = c.eta_compute if quant.compute == "bf16" else c.eta_compute_fp8
        gemm_flops_s = eta_gemm * gpu.peak_flops(quant.compute)
        attn_flops_s = c.eta_attention * gpu.peak_flops("bf16")

        # Linear layers: weights read once per step; MoE experts read only when touched.
        # The input embedding is a lookup, not a read of the whole table.
        input_embedding = (0 if model.tie_word_embeddings else model.lm_head_params) * 2.0
        total_weight = weight_bytes(model, quant) - input_embedding
        expert_params = model.num_layers * model.num_experts * model.mlp_params_per_expert
        self._expert_bytes_s = expert_params * quant.weight_bytes / max(model.num_experts, 1)
        self._expert_bytes_s /= tp * bw
        self._dense_weight_s = (total_weight - expert_params * quant.weight_bytes) / (tp * bw)
        self._num_experts = model.num_experts
        self._expert_fraction = (
            model.num_experts_per_tok / model.num_experts if model.is_moe else 0.0
        )
        body_active = model.num_active_params - model.lm_head_params
        self._flops_s_per_token = 2.0 * body_active / (tp * gemm_flops_s)
        self._flops_s_per_sampled = 2.0 * model.hidden_size * model.vocab_size / (tp * gemm_flops_s)

        # Attention: KV bytes read per context token and FLOPs per query-key pair.
        kv_gpu = kv_bytes_per_token_per_gpu(model, tp, kv_dtype)
        full_fraction = 1.0 - model.sliding_window_layers / model.num_layers
        self._kv_s_per_ctx = kv_gpu * full_fraction / bw
        self._kv_s_per_seq = kv_gpu * (1 - full_fraction) * model.sliding_window / bw
        pair_flops = 4.0 * model.num_attention_heads * model.head_dim * model.num_layers / tp
        self._attn_s_per_pair = pair_flops / attn_flops_s

        # Tensor-parallel all-reduce, two per layer (after attention and after the MLP).
        if tp > 1:
            alpha = gpu.link_latency_us * 1e-6 * c.allreduce_latency_scale
            ring = 2.0 * (tp - 1) / tp
            self._ar_fixed_s = 2 * model.num_layers * alpha
            self._ar_s_per_token = (
                2 * model.num_layers * ring * model.hidden_size * ACTIVATION_BYTES
            ) / (gpu.link_bw_gbps * 1e9)
        else:
            self._ar_fixed_s = 0.0
            self._ar_s_per_token = 0.0

        self._fixed_s = c.step_overhead_s + c.layer_overhead_s * model.num_layers
        self._seq_s = c.seq_overhead_s
        self._host_s_per_token = kv_gpu / (gpu.host_bw_gbps * 1e9)

    def _linear_s(self, num_tokens: int) -> float:
        weights = self._dense_weight_s
        if self._num_experts:
            untouched = (1.0 - self._expert_fraction) ** num_tokens
            weights += self._expert_bytes_s * self._num_experts * (1.0 - untouched)
        return max(weights, num_tokens * self._flops_s_per_token)

    def step_time(self, shape: StepShape) -> float:
        """Seconds for one step of the given shape."""
        if shape.num_tokens == 0:
            return 0.0
        attn = max(
            shape.ctx_tokens * self._kv_s_per_ctx + shape.num_seqs * self._kv_s_per_seq,
            shape.attn_pairs * self._attn_s_per_pair,
        )
        return (
            self._linear_s(shape.num_tokens)
            + shape.num_sampled * self._flops_s_per_sampled
            + attn
            + self._ar_fixed_s
            + shape.num_tokens * self._ar_s_per_token
            + self._fixed_s
            + shape.num_seqs * self._seq_s
            + shape.host_load_tokens * self._host_s_per_token
        )

    def decode_is_linear(self, num_seqs: int, ctx_tokens: int) -> bool:
        """Whether decode steps from here on are memory-bound in attention, so that their time
        grows linearly with context (true for every real GQA model; checked, not assumed)."""
        memory = ctx_tokens * self._kv_s_per_ctx + num_seqs * self._kv_s_per_seq
        compute = (ctx_tokens + num_seqs) * self._attn_s_per_pair
        return self._kv_s_per_ctx >= self._attn_s_per_pair and memory >= compute

    def decode_coefficients(self, num_seqs: int) -> tuple[float, float]:
        """`(base_s, per_ctx_token_s)` so that a decode-only step of `num_seqs` sequences whose
        contexts sum to `s` takes `base_s + per_ctx_token_s * s`, while `decode_is_linear`."""
        base = (
            self._linear_s(num_seqs)
            + num_seqs * (self._flops_s_per_sampled + self._kv_s_per_seq + self._seq_s)
            + self._ar_fixed_s
            + num_seqs * self._ar_s_per_token
            + self._fixed_s
        )
        return base, self._kv_s_per_ctx
