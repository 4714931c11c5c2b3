"""Constants of the step-time model, fitted by `scripts/fit_calibration.py`.

They describe software, never hardware: every GPU's physics come from the catalog, and the
same constants apply to every GPU. That is what lets the model predict a GPU it was never
fitted on (a test checks that a prediction for a GPU reads nothing but its catalog entry and
these constants).

`engines.yaml` holds one `kernels` block shared by every engine (vLLM and SGLang run the same
kernel libraries: FlashInfer, CUTLASS, DeepGEMM, NCCL) and one block per engine for what
differs: its host-side costs, its per-layer and per-sequence GPU overheads and its scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from importlib import resources
from typing import Any

import yaml

from inhouse.errors import SpecError


@dataclass(frozen=True, slots=True)
class EngineConstants:
    """Efficiencies and overheads of one serving engine.

    Kernels (shared by the engines):

    * `eta_bw`: fraction of peak HBM bandwidth that weight, KV and state reads achieve.
    * `eta_compute`: fraction of dense peak FLOP/s that large 16-bit GEMMs achieve.
    * `eta_compute_fp8`: the same for 8- and 4-bit GEMMs, of their own (higher) peak.
    * `gemm_m_half`: GEMM rows (tokens) at which a GEMM reaches half its large-shape
      efficiency: efficiency is `eta · m / (m + gemm_m_half)`. Small batches fill few tiles.
    * `moe_m_half`: the same for the grouped expert GEMMs, in tokens per expert.
    * `eta_attention`: fraction of peak FLOP/s that prefill attention achieves (of the FP8
      peak where the KV cache is FP8 and the GPU has FP8 units, else of the BF16 peak).
    * `allreduce_latency_scale`: multiplies the catalog's link latency per collective.
    * `eta_link`: fraction of the catalog's link bandwidth a ring collective's formula
      achieves (NVLink SHARP in-switch reductions can beat the ring, so it may exceed 1).
    * `eta_dequant`: fraction of `eta_bw` that weight-only quantized GEMMs reach: 4-bit
      weights unpacked into 16-bit math (W4A16 Marlin-style kernels; FP4 on Hopper) pay for
      the unpacking.

    Engine software:

    * `step_overhead_s`, `seq_overhead_s`: host (CPU) work per step and per scheduled
      sequence per step: scheduling, input preparation, sampling bookkeeping.
    * `layer_overhead_s`, `seq_layer_overhead_s`: GPU work per layer per step (launches,
      norms, small kernels) and per sequence per layer (attention metadata, KV append, rope).
    * `moe_layer_overhead_s`: per MoE layer per step: routing, sort and permute launches.
    * `sparse_layer_overhead_s`: per sparse-attention layer per step: the indexer's top-k
      selection and its launches (DeepSeek Sparse Attention).
    * `request_overhead_s`: fixed latency from a request's arrival to the scheduler (HTTP,
      IPC); it does not occupy the API server.
    * `prompt_token_overhead_s`: API-server work per prompt token (tokenization, input
      processing); the API server does it for one request at a time, so bursts queue.
    * `output_token_overhead_s`: API-server work per streamed output token (detokenizing,
      framing), one token at a time on its output path.
    * `max_num_batched_tokens`, `max_num_seqs`: the engine's defaults for an online server.
    * `batched_tokens_by_hbm_gib`: where the engine picks its token budget from the GPU's
      memory (SGLang's `chunked_prefill_size`: 8192 below 160 GiB, 16384 above), as
      `(at least GiB, tokens)` pairs; empty: `max_num_batched_tokens` everywhere. A rule of
      the engine applied to the catalog, not a constant fitted per GPU.
    * `mixed_batches`: whether the scheduler mixes prefill chunks with decodes in one step
      (vLLM V1) or runs them as separate batches (SGLang's default). Not fitted: a fact.
    * `reserve_new_tokens`: whether admission reserves KV for the tokens a request will still
      generate (SGLang's `new_token_ratio`) and retracts requests when decode runs out of
      KV, instead of vLLM's allocate-as-you-go with preemption. Not fitted: a fact.
    * `memory_rule`: how the engine sizes its KV cache: `gpu_memory_utilization` (vLLM: that
      share of the GPU, less weights, activations and a runtime reserve) or
      `mem_fraction_static` (SGLang: its default static fraction, computed from the GPU's
      memory and the launch flags, of the memory free before loading, less the weights; see
      `inhouse.perf.memory.sglang_mem_fraction_static`). Not fitted: a fact.

    What the fit saw (written by the fit script, read by the plan's assumptions):

    * `fitted_on`: the runs and the in-sample error, in words.
    * `fitted_gpus`: the GPUs (catalog names) whose runs the engine's constants were fitted
      on, sorted; `None` where the file does not say (a file written before the field, such
      as `data/calibration_harness/*.yaml`): unknown, never read as "none".
    """

    name: str
    eta_bw: float
    eta_compute: float
    eta_compute_fp8: float
    gemm_m_half: float
    moe_m_half: float
    eta_attention: float
    allreduce_latency_scale: float
    eta_link: float
    eta_dequant: float
    step_overhead_s: float
    seq_overhead_s: float
    layer_overhead_s: float
    seq_layer_overhead_s: float
    moe_layer_overhead_s: float
    sparse_layer_overhead_s: float
    request_overhead_s: float
    prompt_token_overhead_s: float
    output_token_overhead_s: float
    max_num_batched_tokens: int
    max_num_seqs: int
    fitted_on: str = ""
    fitted_gpus: tuple[str, ...] | None = None
    mixed_batches: bool = True
    reserve_new_tokens: bool = False
    batched_tokens_by_hbm_gib: tuple[tuple[float, int], ...] = ()
    memory_rule: str = "gpu_memory_utilization"

    def __post_init__(self) -> None:
        if self.memory_rule not in MEMORY_RULES:
            raise SpecError(
                f"engine {self.name!r}: memory_rule {self.memory_rule!r} is not one of "
                f"{', '.join(MEMORY_RULES)}"
            )

    def batched_tokens_for(self, hbm_gib: float) -> int:
        """The engine's default token budget on a GPU with this much memory."""
        tokens = self.max_num_batched_tokens
        for at_least_gib, value in self.batched_tokens_by_hbm_gib:
            if hbm_gib >= at_least_gib:
                tokens = value
        return tokens

    def with_values(self, **values: float) -> EngineConstants:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data.update(values)
        return EngineConstants(**data)


MEMORY_RULES = ("gpu_memory_utilization", "mem_fraction_static")
# Fitted once for all engines (the `kernels` block of engines.yaml).
KERNEL_FIELDS = (
    "eta_bw",
    "eta_compute",
    "eta_compute_fp8",
    "gemm_m_half",
    "moe_m_half",
    "eta_attention",
    "allreduce_latency_scale",
    "eta_link",
    "eta_dequant",
)
# Fitted per engine.
ENGINE_FIELDS = (
    "step_overhead_s",
    "seq_overhead_s",
    "layer_overhead_s",
    "seq_layer_overhead_s",
    "moe_layer_overhead_s",
    "sparse_layer_overhead_s",
    "request_overhead_s",
    "prompt_token_overhead_s",
    "output_token_overhead_s",
)
FITTED_FIELDS = KERNEL_FIELDS + ENGINE_FIELDS


def load_engine_table(text: str) -> dict[str, EngineConstants]:
    """Parse engines.yaml: the `kernels` block merged into every engine's block."""
    raw: dict[str, dict[str, Any]] = yaml.safe_load(text)
    kernels = raw.pop("kernels", {})
    meta = {k: kernels.pop(k) for k in ("fitted_on",) if k in kernels}
    table: dict[str, EngineConstants] = {}
    for name, values in raw.items():
        merged = {**kernels, **values}
        if "fitted_on" in meta and "fitted_on" not in values:
            merged["fitted_on"] = meta["fitted_on"]
        if "fitted_gpus" in merged:
            merged["fitted_gpus"] = _gpu_names(name, merged["fitted_gpus"])
        if "batched_tokens_by_hbm_gib" in merged:
            pairs = merged["batched_tokens_by_hbm_gib"]
            merged["batched_tokens_by_hbm_gib"] = tuple(
                (float(gib), int(tokens)) for gib, tokens in sorted(pairs.items())
            )
        table[name] = EngineConstants(name=name, **merged)
    return table


def _gpu_names(engine: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SpecError(
            f"engine {engine!r}: fitted_gpus {value!r} is not a list of GPU names; write the "
            "catalog names of the GPUs the constants were fitted on, or leave it out (unknown)"
        )
    return tuple(sorted(value))


@cache
def _engine_table() -> dict[str, EngineConstants]:
    text = resources.files("inhouse.perf").joinpath("data", "engines.yaml").read_text("utf-8")
    return load_engine_table(text)


def known_backends() -> list[str]:
    return sorted(_engine_table())


def get_engine_constants(backend: str) -> EngineConstants:
    key = backend.strip().lower()
    table = _engine_table()
    if key not in table:
        raise SpecError(f"unknown backend {backend!r}; known: {', '.join(known_backends())}")
    return table[key]
