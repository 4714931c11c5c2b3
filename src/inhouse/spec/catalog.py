"""GPU and model catalogs, shipped as YAML data with a source for every entry.

Names resolve leniently: a model is found by its Hugging Face id, its basename or an alias, in any
case, with variant suffixes (`-Instruct`, `-FP8`, `-AWQ`, ...) stripped; a directory or file path
holding a Hugging Face `config.json` stands in for a catalog entry.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inhouse.errors import SpecError

GB = 1e9
GIB = 1024**3
# nvidia-smi shows 81,559 of an H100's 81,920 MiB and 143,771 of an H200's 144,384 MiB.
VISIBLE_HBM_FRACTION = 81_559 / 81_920


class GpuSpec(BaseModel):
    """One accelerator type. Peak FLOP/s are dense (no 2:4 sparsity); `None` means unsupported."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    display_name: str
    vendor: str
    hbm_gb: float = Field(
        gt=0,
        description="HBM capacity as the vendor states it; NVIDIA's and AMD's 'GB' are GiB "
        "(an H100's 80 GB shows 81,559 MiB in nvidia-smi)",
    )
    hbm_bw_tbps: float = Field(gt=0, description="HBM bandwidth in TB/s")
    bf16_tflops: float = Field(gt=0)
    fp8_tflops: float | None = None
    int8_tops: float | None = None
    fp4_tflops: float | None = None
    link: str = Field(description="intra-node GPU link, e.g. NVLink4, PCIe5, Infinity Fabric")
    link_bw_gbps: float = Field(gt=0, description="per-GPU unidirectional link bandwidth, GB/s")
    link_latency_us: float = Field(gt=0, description="one hop of a collective, microseconds")
    host_bw_gbps: float = Field(gt=0, description="host link (PCIe) bandwidth, GB/s")
    gpus_per_node: int = Field(gt=0)
    nvlink_domain: int = Field(gt=0, description="GPUs joined all-to-all by the fast link")
    power_w: float = Field(gt=0)
    source: str

    @property
    def hbm_bytes(self) -> float:
        """Memory the driver shows: the stated GiB less ~0.44% the firmware keeps."""
        return self.hbm_gb * GIB * VISIBLE_HBM_FRACTION

    @property
    def hbm_bw_bytes_s(self) -> float:
        return self.hbm_bw_tbps * 1e12

    def peak_flops(self, compute: str) -> float:
        """Dense peak FLOP/s for a compute datatype, falling back to the nearest wider type.

        NOTE: a GPU without FP8 units (A100, MI250) runs an FP8 checkpoint as weight-only
        (Marlin-style) kernels whose math is 16-bit, so its compute peak is the bf16 one.
        """
        table = {
            "bf16": self.bf16_tflops,
            "fp8": self.fp8_tflops,
            "int8": self.int8_tops,
            "fp4": self.fp4_tflops,
        }
        order = {"fp4": ["fp4", "fp8", "bf16"], "fp8": ["fp8", "bf16"], "int8": ["int8", "bf16"]}
        for key in order.get(compute, ["bf16"]):
            value = table[key]
            if value is not None:
                return value * 1e12
        return self.bf16_tflops * 1e12


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
    sliding_window_layers: int = Field(
        default=0, ge=0, description="layers whose attention only sees a window (KV is capped)"
    )
    sliding_window: int = Field(default=0, ge=0)
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

    @property
    def served_hf_id(self) -> str:
        """The checkpoint a stack serves for this model: the instruct one where they differ."""
        return self.instruct_hf_id or self.hf_id

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def attention_params(self) -> int:
        """Q, K, V and O projections of one layer."""
        q_out = self.num_attention_heads * self.head_dim
        kv_out = self.num_kv_heads * self.head_dim
        return self.hidden_size * (q_out + 2 * kv_out) + q_out * self.hidden_size

    @property
    def mlp_params_per_expert(self) -> int:
        """Gated MLP (gate, up, down) of one expert or of the dense MLP."""
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def embedding_params(self) -> int:
        """Input embedding plus the LM head (one matrix when tied)."""
        factor = 1 if self.tie_word_embeddings else 2
        return factor * self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        """All parameters, from the architecture (norms and biases ignored: <0.1%)."""
        experts = max(self.num_experts, 1) + self.num_shared_experts
        router = self.hidden_size * self.num_experts
        per_layer = self.attention_params + experts * self.mlp_params_per_expert + router
        return self.num_layers * per_layer + self.embedding_params

    @property
    def num_active_params(self) -> int:
        """Parameters one token's forward pass reads: every layer's attention, its routed top-k
        and shared experts (all of the MLP when dense), and the LM head. The input embedding is
        left out, as a token reads one row of it (OpenAI's 5.1B active for gpt-oss-120b)."""
        experts = self.num_experts_per_tok + self.num_shared_experts if self.is_moe else 1
        router = self.hidden_size * self.num_experts
        per_layer = self.attention_params + experts * self.mlp_params_per_expert + router
        return self.num_layers * per_layer + self.lm_head_params


# Suffixes that name a variant of the same architecture (chat tune, quantized checkpoint, ...).
_VARIANT_SUFFIX = re.compile(
    r"(-(instruct|chat|it|base|hf|fp8|fp8-dynamic|fp8-kv|int8|w8a8|w4a16|awq|gptq|int4|"
    r"nvfp4|mxfp4|fp4|bf16|dynamic|turbo|2407|2411))+$",
    re.IGNORECASE,
)


def _normalize(name: str) -> str:
    base = name.strip().rstrip("/").split("/")[-1].lower()
    return _VARIANT_SUFFIX.sub("", base)


@cache
def _load_yaml(filename: str) -> list[dict[str, Any]]:
    text = resources.files("inhouse.spec").joinpath("data", filename).read_text(encoding="utf-8")
    data = yaml.safe_load(text)
    assert isinstance(data, list), f"{filename} must hold a list of entries"
    return data


@cache
def _gpu_table() -> dict[str, GpuSpec]:
    return {entry["name"]: GpuSpec(**entry) for entry in _load_yaml("gpus.yaml")}


@cache
def _model_table() -> dict[str, ModelSpec]:
    table: dict[str, ModelSpec] = {}
    for entry in _load_yaml("models.yaml"):
        spec = ModelSpec(**entry)
        for key in (spec.name, spec.hf_id, *spec.aliases):
            table[_normalize(key)] = spec
    return table


def known_gpus() -> list[str]:
    return sorted(_gpu_table())


def known_models() -> list[str]:
    return sorted({spec.name for spec in _model_table().values()})


def get_gpu(name: str) -> GpuSpec:
    """Resolve a GPU name (`h100_sxm`, `H100-SXM`, `h100 sxm` all work)."""
    key = re.sub(r"[\s-]+", "_", name.strip().lower())
    table = _gpu_table()
    if key not in table:
        raise SpecError(f"unknown GPU {name!r}; known: {', '.join(known_gpus())}")
    return table[key]


def get_model(name: str) -> ModelSpec:
    """Resolve a model by HF id, basename, alias or a path holding a Hugging Face config.json."""
    path = Path(name)
    if name.endswith(".json") or (path.is_dir() and (path / "config.json").is_file()):
        config_path = path if path.suffix == ".json" else path / "config.json"
        if config_path.is_file():
            return model_from_hf_config(config_path)
    table = _model_table()
    key = _normalize(name)
    if key not in table:
        raise SpecError(
            f"unknown model {name!r}; known: {', '.join(known_models())} "
            "(or pass a directory holding a Hugging Face config.json)"
        )
    return table[key]


def find_catalog_model(name: str) -> ModelSpec | None:
    """The catalog entry `name` resolves to by name alone (no file is read), or None."""
    return _model_table().get(_normalize(name))


def model_from_hf_config(path: Path | str) -> ModelSpec:
    """Build a `ModelSpec` from a Hugging Face `config.json` (Llama/Qwen/Mistral/MoE shapes)."""
    config_path = Path(path)
    try:
        cfg: dict[str, Any] = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecError(f"cannot read model config {config_path}: {exc}") from exc
    cfg = cfg.get("text_config", cfg)
    try:
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        num_experts = int(cfg.get("num_local_experts") or cfg.get("num_experts") or 0)
        intermediate = int(
            (cfg.get("moe_intermediate_size") if num_experts else None) or cfg["intermediate_size"]
        )
        name = config_path.parent.name or "local-model"
        return ModelSpec(
            name=name,
            hf_id=str(cfg.get("_name_or_path") or name),
            num_layers=int(cfg["num_hidden_layers"]),
            hidden_size=hidden,
            num_attention_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            intermediate_size=intermediate,
            vocab_size=int(cfg["vocab_size"]),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            num_experts=num_experts,
            num_experts_per_tok=int(cfg.get("num_experts_per_tok") or 0),
            max_context=int(cfg["max_position_embeddings"]),
            license="unknown (local config)",
            source=str(config_path),
        )
    except KeyError as exc:
        raise SpecError(f"{config_path}: missing field {exc.args[0]!r} in config.json") from exc
    except (TypeError, ValueError, ValidationError) as exc:
        raise SpecError(f"{config_path}: invalid config.json: {exc}") from exc
