"""Quantization and KV-cache dtypes: names users type and the bytes each element costs."""

from __future__ import annotations

from dataclasses import dataclass

from inhouse.errors import SpecError


@dataclass(frozen=True, slots=True)
class Quant:
    """A weight quantization scheme.

    `weight_bytes` is the average storage per parameter, scales included (AWQ/GPTQ keep one fp16
    scale and zero per group of 128, NVFP4 one fp8 scale per 16 values). `compute` names the
    tensor-core datatype the GEMMs run in, which picks the GPU's peak FLOP/s.
    """

    name: str
    weight_bytes: float
    compute: str  # "bf16" | "fp8" | "int8" | "fp4"


QUANTIZATIONS: dict[str, Quant] = {
    "bf16": Quant("bf16", 2.0, "bf16"),
    "fp16": Quant("fp16", 2.0, "bf16"),
    "fp8": Quant("fp8", 1.0, "fp8"),
    "int8": Quant("int8", 1.0, "int8"),
    # w4a16 dequantizes to 16-bit before the GEMM: memory of 4 bits, compute of bf16.
    "w4a16": Quant("w4a16", 0.5 + 4.0 / 128, "bf16"),
    "fp4": Quant("fp4", 0.5 + 1.0 / 16, "fp4"),
}

_QUANT_ALIASES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "auto": "bf16",
    "fp8_e4m3": "fp8",
    "w8a8": "int8",
    "int8_w8a8": "int8",
    "awq": "w4a16",
    "gptq": "w4a16",
    "int4": "w4a16",
    "nvfp4": "fp4",
    "mxfp4": "fp4",
}

KV_DTYPES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
_KV_ALIASES = {
    "auto": "bf16",
    "bfloat16": "bf16",
    "float16": "fp16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
}


def normalize_quant(name: str) -> Quant:
    """Resolve a user's quantization name (`fp8`, `AWQ`, `w8a8`, ...) to a `Quant`."""
    key = name.strip().lower()
    key = _QUANT_ALIASES.get(key, key)
    if key not in QUANTIZATIONS:
        known = ", ".join(sorted(set(QUANTIZATIONS) | set(_QUANT_ALIASES)))
        raise SpecError(f"unknown quantization {name!r}; known: {known}")
    return QUANTIZATIONS[key]


def kv_dtype_bytes(name: str) -> float:
    """Bytes per KV element for a `--kv-cache-dtype` value (`auto` means the model's bf16)."""
    key = name.strip().lower()
    key = _KV_ALIASES.get(key, key)
    if key not in KV_DTYPES:
        known = ", ".join(sorted(set(KV_DTYPES) | set(_KV_ALIASES)))
        raise SpecError(f"unknown kv cache dtype {name!r}; known: {known}")
    return KV_DTYPES[key]


# The corpus's and aiconfigurator's names for GEMM and MoE quantization modes.
_MODE_ALIASES = {
    "fp8_block": "fp8",
    "fp8_blockwise": "fp8",
    "int4_wo": "w4a16",
    "w4a16_awq": "w4a16",
    "float16": "fp16",
}


@dataclass(frozen=True, slots=True)
class WeightQuants:
    """Quantization of each part of a checkpoint: attention projections, dense MLPs (and
    shared experts), routed experts. A uniform checkpoint has one `Quant` for all three."""

    attention: Quant
    dense: Quant
    experts: Quant

    @property
    def name(self) -> str:
        parts = {self.attention.name, self.dense.name, self.experts.name}
        if len(parts) == 1:
            return self.experts.name
        return (
            f"{self.experts.name} experts, {self.dense.name} MLP, {self.attention.name} attention"
        )

    @classmethod
    def uniform(cls, quant: Quant) -> WeightQuants:
        return cls(quant, quant, quant)


def resolve_weight_quants(
    precision: str, is_moe: bool, gemm_quant: str = "", moe_quant: str = ""
) -> WeightQuants:
    """The quantization of each part of a checkpoint named by its precision and, as the
    calibration corpus states them, its GEMM and MoE quantization modes.

    Published checkpoints follow two conventions this encodes:

    * 8-bit checkpoints (FP8, INT8) quantize every linear layer but the LM head.
    * 4-bit checkpoints of MoE models keep attention in 16 bits: NVIDIA's NVFP4 releases
      exclude `self_attn` (DeepSeek, Kimi, MiniMax, GLM-5 and Qwen3.5 configs), OpenAI's
      gpt-oss quantizes only the experts to MXFP4, and Moonshot's INT4 Kimi (weight-only,
      `int4_wo`) only the routed experts, leaving its dense layer and shared expert in BF16.
      Dense 4-bit checkpoints (NVIDIA's Llama-3.1-70B FP4) quantize every linear layer.
    """
    experts = normalize_quant(_mode(moe_quant) or precision)
    dense = normalize_quant(_mode(gemm_quant) or precision)
    bf16 = QUANTIZATIONS["bf16"]
    if not is_moe:
        return WeightQuants.uniform(dense)
    four_bit = dense.weight_bytes < 1.0
    attention = bf16 if four_bit else dense
    if four_bit and experts.name == "w4a16" and dense.name == "w4a16":
        dense = bf16  # INT4 weight-only: only the routed experts are 4-bit
    return WeightQuants(attention, dense, experts)


def _mode(name: str) -> str:
    key = name.strip().lower()
    return _MODE_ALIASES.get(key, key)
