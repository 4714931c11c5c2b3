"""Step-time model: how long one engine step takes for a given batch.

A step runs every layer once over a batch of tokens: decode tokens (one per running sequence,
each attending its whole context) and prefill chunks (each attending its cached history plus
itself). Its time is the sum of

* rank-local GEMMs (attention projections, dense MLPs and shared experts, the LM head): the
  larger of reading the weights over effective HBM bandwidth and their FLOPs over an
  efficiency that grows with the rows `m` of the GEMM, `eta · m / (m + m_half)`;
* routed experts: the larger of reading the experts the batch touches, `E·(1 − (1 − k/E)^T)`,
  and the grouped-GEMM FLOPs at an efficiency set by the tokens per expert;
* MoE routing: permuting every token to its `k` experts and back (memory traffic);
* attention: the larger of reading the KV of every attended token and the attention FLOPs;
  MLA decodes in its absorbed form (per-pair cost `kv_lora_rank`-wide), prefills as MHA;
  sparse attention reads at most `topk` latents per query plus the indexer's keys;
  linear-attention layers read and write each sequence's recurrent state;
* collectives: attention-TP all-reduces, and with attention DP the gather and scatter of
  tokens around the experts; a latency per collective plus the ring's bandwidth term, over
  NVLink within `nvlink_domain` and over the network beyond it;
* overheads: host work per step and per sequence; GPU work per layer and per sequence per
  layer; per MoE layer;
* loading KV blocks from the host tier, when the step needs them.

With attention DP the attention side runs on the busiest group, taken as an even share of the
step's sequences (but at least one sequence's work). Every GPU-specific number comes from the
catalog; every engine-specific number from `EngineConstants`.

`step_seconds` is the formula, written once over numbers that may be floats (the engine) or
numpy arrays (the calibration fit evaluates many recorded steps at once).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from inhouse.perf.coefficients import StepCoefficients, compute_coefficients
from inhouse.perf.constants import EngineConstants
from inhouse.spec.catalog import GpuSpec, ModelSpec
from inhouse.spec.parallel import ParallelLayout
from inhouse.spec.quant import Quant, WeightQuants

# Floats in the engine, numpy arrays in the fit: the same arithmetic.
N = Any


@dataclass(frozen=True, slots=True)
class StepShape:
    """What one step computes.

    `num_tokens` counts every token the step runs (decode tokens plus prefill-chunk tokens);
    `num_sampled` the tokens that produce logits (decode tokens and prompt-completing chunks);
    `ctx_tokens` the cached tokens whose KV is read; `attn_pairs` the query-key pairs.
    `num_decodes` and `decode_ctx_tokens` are the part of those that are single-token
    decodes (0 when unknown: every pair is then costed as prefill).
    """

    num_seqs: int
    num_tokens: int
    num_sampled: int
    ctx_tokens: int
    attn_pairs: int
    host_load_tokens: int = 0
    num_decodes: int = 0
    decode_ctx_tokens: int = 0


def step_seconds(
    c: StepCoefficients,
    seqs: N,
    tokens: N,
    sampled: N,
    ctx: N,
    pairs: N,
    host: N,
    decodes: N,
    decode_ctx: N,
    maximum: Callable[[Any, Any], Any],
    minimum: Callable[[Any, Any], Any],
) -> N:
    """Seconds of steps of the given shapes (see the module docstring)."""
    dp = c.attention_dp
    one_seq = maximum(seqs, 1)
    # The busiest attention group: an even share, but at least one sequence's work.
    seqs_r = maximum(seqs / dp, 1.0)
    tokens_r = maximum(tokens / dp, tokens / one_seq)
    sampled_r = minimum(sampled, maximum(sampled / dp, 1.0))
    ctx_r = maximum(ctx / dp, ctx / one_seq)
    decodes_r = decodes / dp
    decode_ctx_r = decode_ctx / dp
    prefill_pairs_r = maximum(pairs - decode_ctx - decodes, 0.0) / dp
    prefill_pairs_r = maximum(prefill_pairs_r, prefill_pairs_r * dp / one_seq)
    prefill_ctx_r = maximum(ctx_r - decode_ctx_r, 0.0)

    local = maximum(c.attn_weight_s, c.attn_flop_s * (tokens_r + c.m_half))
    local = local + maximum(c.dense_weight_s, c.dense_flop_s * (tokens_r + c.m_half))
    lm_head = maximum(c.lm_head_weight_s, c.lm_head_flop_s * (sampled_r + c.m_half))
    local = local + minimum(sampled, 1.0) * lm_head

    experts = 0.0 * tokens
    if c.num_experts:
        touched = c.num_experts * (1.0 - (1.0 - c.expert_fraction) ** tokens)
        read = c.expert_weight_s * touched
        grouped = c.expert_flop_s * (tokens + c.moe_m_half * touched / c.experts_per_tok)
        experts = maximum(read, grouped) + c.permute_s_per_token * tokens_r

    mean_ctx = decode_ctx_r / maximum(decodes_r, 1e-9)
    read_ctx = minimum(mean_ctx, c.sparse_topk) * decodes_r + prefill_ctx_r
    kv_read = c.kv_s_per_ctx * read_ctx + c.index_s_per_ctx * ctx_r + c.kv_s_per_seq * seqs_r
    decode_pairs = (minimum(mean_ctx, c.sparse_topk) + 1.0) * decodes_r
    flops = c.decode_pair_s * decode_pairs + c.prefill_pair_s * prefill_pairs_r
    attention = maximum(kv_read, flops + c.index_pair_s * (prefill_pairs_r + decode_ctx_r))
    attention = attention + c.state_s_per_seq * seqs_r

    comm = c.comm_fixed_s + c.comm_s_per_rank_token * tokens_r + c.comm_s_per_token * tokens
    overhead = c.fixed_s + c.seq_s * seqs + c.seq_rank_s * seqs_r
    return local + experts + attention + comm + overhead + c.host_s_per_token * host


class StepModel:
    """Precomputed coefficients for one replica (model, GPU, layout, quantization, KV dtype)."""

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        tp: int | ParallelLayout,
        quant: Quant | WeightQuants,
        constants: EngineConstants,
        kv_dtype: str = "auto",
    ) -> None:
        self.model = model
        self.gpu = gpu
        self.constants = constants
        self.coefficients = compute_coefficients(model, gpu, tp, quant, constants, kv_dtype)
        self.layout = self.coefficients.layout
        self.tp = self.layout.tp
        self.quants = self.coefficients.quants

    def step_time(self, shape: StepShape) -> float:
        """Seconds for one step of the given shape."""
        if shape.num_tokens == 0:
            return 0.0
        return float(
            step_seconds(
                self.coefficients,
                shape.num_seqs,
                shape.num_tokens,
                shape.num_sampled,
                shape.ctx_tokens,
                shape.attn_pairs,
                shape.host_load_tokens,
                shape.num_decodes,
                shape.decode_ctx_tokens,
                max,
                min,
            )
        )

    def _decode(self, num_seqs: int, ctx_tokens: float) -> float:
        """A decode-only step: every sequence runs one token attending its context."""
        return float(
            step_seconds(
                self.coefficients,
                num_seqs,
                num_seqs,
                num_seqs,
                ctx_tokens,
                ctx_tokens + num_seqs,
                0,
                num_seqs,
                ctx_tokens,
                max,
                min,
            )
        )

    def linear_ctx_limit(self, num_seqs: int, ctx_tokens: float) -> float:
        """The context sum up to which decode steps of `num_seqs` sequences stay linear in
        context from `ctx_tokens`: sparse attention stops reading more latents once the mean
        context passes `topk`."""
        boundary = self.coefficients.sparse_topk * num_seqs
        return boundary if ctx_tokens < boundary else float("inf")

    def decode_is_linear(self, num_seqs: int, ctx_tokens: float) -> bool:
        """Whether decode steps from here on grow linearly with context: one of memory and
        compute bounds the attention now and grows at least as fast (checked, not assumed)."""
        if self.coefficients.attention_dp > 1 and num_seqs < self.coefficients.attention_dp:
            return False  # some groups idle: the busiest group's share is not linear
        return self._branch(num_seqs, ctx_tokens) is not None

    def _slopes(self, num_seqs: int, ctx_tokens: float) -> tuple[float, float]:
        """d(attention memory)/d(context) and d(attention compute)/d(context) at a context."""
        c = self.coefficients
        dense = ctx_tokens < c.sparse_topk * num_seqs
        memory = (c.index_s_per_ctx + (c.kv_s_per_ctx if dense else 0.0)) / c.attention_dp
        compute = (c.index_pair_s + (c.decode_pair_s if dense else 0.0)) / c.attention_dp
        return memory, compute

    def _branch(self, num_seqs: int, ctx_tokens: float) -> str | None:
        c = self.coefficients
        dp = c.attention_dp
        seqs_r = max(num_seqs / dp, 1.0)
        reads = min(ctx_tokens / max(num_seqs, 1), c.sparse_topk) * num_seqs / dp
        memory = c.kv_s_per_ctx * reads + c.index_s_per_ctx * ctx_tokens / dp
        memory += c.kv_s_per_seq * seqs_r
        compute = c.decode_pair_s * (reads + num_seqs / dp) + c.index_pair_s * ctx_tokens / dp
        memory_slope, compute_slope = self._slopes(num_seqs, ctx_tokens)
        if memory >= compute and memory_slope >= compute_slope:
            return "memory"
        if compute >= memory and compute_slope >= memory_slope:
            return "compute"
        return None

    def decode_coefficients(
        self, num_seqs: int, ctx_tokens: float | None = None
    ) -> tuple[float, float]:
        """`(base_s, per_ctx_token_s)` so that a decode-only step of `num_seqs` sequences whose
        contexts sum to `s` takes `base_s + per_ctx_token_s * s` around `ctx_tokens` (exactly,
        while `decode_is_linear` holds and below `linear_ctx_limit`). Without `ctx_tokens`,
        the line through a short context on the memory-bound side."""
        at = float(num_seqs if ctx_tokens is None else ctx_tokens)
        memory_slope, compute_slope = self._slopes(num_seqs, at)
        branch = self._branch(num_seqs, at) if ctx_tokens is not None else "memory"
        slope = compute_slope if branch == "compute" else memory_slope
        return self._decode(num_seqs, at) - slope * at, slope
