"""A transformer's architecture as the catalog states it: what memory and the step-time model need.

Beyond the plain dense/GQA shape, three architecture families of the calibration corpus carry
their own fields, each an optional sub-spec copied from the checkpoint's `config.json`:

* `mla`: multi-head latent attention (DeepSeek-V3, Kimi-K2, GLM-5). Every layer caches one
  compressed latent per token (`kv_lora_rank` + `qk_rope_head_dim` elements) shared by all
  heads, instead of a key and a value per KV head.
* `sparse_attention`: DeepSeek Sparse Attention (GLM-5). A small indexer scores every cached
  token and each query attends to at most `topk` of them.
* `linear_attention`: linear-attention layers (Gated DeltaNet in Qwen3.5). They keep a fixed
  recurrent state per sequence and no KV cache at all.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class MlaSpec(BaseModel):
    """Multi-head latent attention. `head_dim` of the model is the query/key head width
    (`qk_nope_head_dim + qk_rope_head_dim`); values have `v_head_dim`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kv_lora_rank: int = Field(gt=0)
    q_lora_rank: int = Field(ge=0, description="0: queries are projected directly")
    qk_rope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)


class SparseAttentionSpec(BaseModel):
    """DeepSeek Sparse Attention: an indexer picks `topk` cached tokens per query."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    topk: int = Field(gt=0)
    indexer_heads: int = Field(gt=0)
    indexer_head_dim: int = Field(gt=0)


class LinearAttentionSpec(BaseModel):
    """Linear-attention layers (Gated DeltaNet): a recurrent state per sequence, no KV.

    The state of one layer is `value_heads x key_head_dim x value_head_dim` elements of
    `state_bytes` each (fp32 in Qwen3.5's `mamba_ssm_dtype`), plus a short convolution window.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_layers: int = Field(gt=0)
    key_heads: int = Field(gt=0)
    value_heads: int = Field(gt=0)
    key_head_dim: int = Field(gt=0)
    value_head_dim: int = Field(gt=0)
    conv_kernel: int = Field(ge=0)
    state_bytes: int = Field(default=4, gt=0)

    @property
    def qkv_width(self) -> int:
        return 2 * self.key_heads * self.key_head_dim + self.value_heads * self.value_head_dim

    @property
    def value_width(self) -> int:
        return self.value_heads * self.value_head_dim

    @property
    def state_bytes_per_layer(self) -> int:
        recurrent = self.value_heads * self.key_head_dim * self.value_head_dim
        conv = self.qkv_width * self.conv_kernel
        return (recurrent + conv) * self.state_bytes


class ModelSpec(BaseModel):
    """A transformer's architecture: what memory and the step-time model need, and its licence."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    hf_id: str
    aliases: tuple[str, ...] = ()
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(gt=0, description="dense MLP width (per expert for MoE)")
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool = False
    num_experts: int = Field(default=0, ge=0, description="routed experts; 0 for dense models")
    num_experts_per_tok: int = Field(default=0, ge=0)
    num_shared_experts: int = Field(default=0, ge=0)
    num_dense_layers: int = Field(
        default=0, ge=0, description="leading layers of an MoE model with a dense MLP"
    )
    dense_intermediate_size: int = Field(
        default=0, ge=0, description="MLP width of those dense layers (their config's intermediate)"
    )
    attention_output_gate: bool = Field(
        default=False, description="a sigmoid gate on the attention output (q_proj doubled)"
    )
    sliding_window_layers: int = Field(
        default=0, ge=0, description="layers whose attention only sees a window (KV is capped)"
    )
    sliding_window: int = Field(default=0, ge=0)
    mla: MlaSpec | None = None
    sparse_attention: SparseAttentionSpec | None = None
    linear_attention: LinearAttentionSpec | None = None
    max_context: int = Field(gt=0)
    params_b_stated: float | None = Field(
        default=None, gt=0, description="parameter count the model card states, in 1e9"
    )
    license: str
    source: str
    instruct_hf_id: str | None = Field(
        default=None,
        description="the instruction-tuned checkpoint a stack serves, when `hf_id` is a base "
        "model (a base model has no chat template: chat and tool calls would fail)",
    )
    tool_call_parser: str | None = Field(
        default=None,
        description="vLLM's `--tool-call-parser` for this family (docs.vllm.ai, Tool Calling); "
        "null when the family has none",
    )
    checkpoint_quant: str | None = Field(
        default=None,
        description="how one checkpoint's weights are stored, as its config.json says: its "
        "`quantization_config.quant_method` (`fp8`, `compressed-tensors`, ...), or `none` "
        "without one (16-bit); null when unknown (a catalog entry stands for every checkpoint)",
    )

    @property
    def served_hf_id(self) -> str:
        """The checkpoint a stack serves for this model: the instruct one where they differ."""
        return self.instruct_hf_id or self.hf_id

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def num_linear_attention_layers(self) -> int:
        return self.linear_attention.num_layers if self.linear_attention else 0

    @property
    def num_full_attention_layers(self) -> int:
        """Layers with softmax attention over a KV cache (all but linear-attention layers)."""
        return self.num_layers - self.num_linear_attention_layers

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def attention_params(self) -> int:
        """Projections of one softmax-attention layer: Q, K, V and O (MLA: its down- and
        up-projections; DSA: plus the indexer's)."""
        hidden = self.hidden_size
        heads = self.num_attention_heads
        if self.mla is not None:
            mla = self.mla
            q_out = heads * self.head_dim
            q = hidden * q_out if mla.q_lora_rank == 0 else mla.q_lora_rank * (hidden + q_out)
            kv_down = hidden * (mla.kv_lora_rank + mla.qk_rope_head_dim)
            nope = self.head_dim - mla.qk_rope_head_dim
            kv_up = mla.kv_lora_rank * heads * (nope + mla.v_head_dim)
            out = heads * mla.v_head_dim * hidden
            return q + kv_down + kv_up + out + self._indexer_params
        q_out = heads * self.head_dim * (2 if self.attention_output_gate else 1)
        kv_out = self.num_kv_heads * self.head_dim
        return hidden * (q_out + 2 * kv_out) + heads * self.head_dim * hidden

    @property
    def _indexer_params(self) -> int:
        sparse = self.sparse_attention
        if sparse is None or self.mla is None:
            return 0
        q_in = self.mla.q_lora_rank or self.hidden_size
        width = sparse.indexer_heads * sparse.indexer_head_dim
        return q_in * width + self.hidden_size * (sparse.indexer_head_dim + sparse.indexer_heads)

    @property
    def linear_attention_params(self) -> int:
        """Projections of one linear-attention layer: q/k/v, output gate, decay and beta,
        the short convolution and the output projection."""
        lin = self.linear_attention
        if lin is None:
            return 0
        hidden = self.hidden_size
        in_proj = hidden * (lin.qkv_width + lin.value_width + 2 * lin.value_heads)
        return in_proj + lin.qkv_width * lin.conv_kernel + lin.value_width * hidden

    @property
    def mlp_params_per_expert(self) -> int:
        """Gated MLP (gate, up, down) of one expert or of the dense MLP."""
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def dense_mlp_params(self) -> int:
        """The MLP of one leading dense layer of an MoE model."""
        return 3 * self.hidden_size * (self.dense_intermediate_size or self.intermediate_size)

    @property
    def router_params(self) -> int:
        return self.hidden_size * self.num_experts

    @property
    def embedding_params(self) -> int:
        """Input embedding plus the LM head (one matrix when tied)."""
        factor = 1 if self.tie_word_embeddings else 2
        return factor * self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def mixer_params(self) -> int:
        """Attention and linear-attention projections of all layers."""
        full = self.num_full_attention_layers * self.attention_params
        return full + self.num_linear_attention_layers * self.linear_attention_params

    @property
    def num_params(self) -> int:
        """All parameters, from the architecture (norms and biases ignored: <0.1%)."""
        experts = self.num_experts + self.num_shared_experts
        return self.mixer_params + self._mlp_params(experts) + self.embedding_params

    @property
    def num_active_params(self) -> int:
        """Parameters one token's forward pass reads: every layer's attention, its routed top-k
        and shared experts (all of the MLP when dense), and the LM head. The input embedding is
        left out, as a token reads one row of it (OpenAI's 5.1B active for gpt-oss-120b)."""
        experts = self.num_experts_per_tok + self.num_shared_experts
        return self.mixer_params + self._mlp_params(experts) + self.lm_head_params

    def _mlp_params(self, experts_per_layer: int) -> int:
        """MLP parameters of all layers, counting `experts_per_layer` experts per MoE layer."""
        if not self.is_moe:
            return self.num_layers * self.mlp_params_per_expert
        per_moe_layer = experts_per_layer * self.mlp_params_per_expert + self.router_params
        return self.num_moe_layers * per_moe_layer + self.num_dense_layers * self.dense_mlp_params
