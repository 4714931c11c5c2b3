"""GPU and model catalogs, shipped as YAML data with a source for every entry.

Names resolve leniently: a model is found by its Hugging Face id, its basename or an alias, in any
case, with variant suffixes (`-Instruct`, `-FP8`, `-AWQ`, ...) stripped. A directory or file path
holding a Hugging Face `config.json` stands in for a catalog entry once the edge has read it
(`inhouse.spec.load.resolve_local_models`): this module reads no file of the user's, only the
catalogs shipped as package data.
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from pathlib import PurePath
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from inhouse.errors import SpecError
from inhouse.spec.model import ModelSpec

__all__ = ["GIB", "GpuSpec", "ModelSpec", "get_gpu", "get_model", "known_gpus", "known_models"]

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
    scale_out_bw_gbps: float = Field(
        gt=0, description="per-GPU network bandwidth to other nodes, one direction, GB/s"
    )
    scale_out_latency_us: float = Field(gt=0, description="one hop of a collective across nodes")
    gpus_per_node: int = Field(gt=0)
    nvlink_domain: int = Field(
        gt=0, description="GPUs joined all-to-all by the fast link (72 in a GB200 NVL72 rack)"
    )
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
        (Marlin-style) kernels whose math is 16-bit, so its compute peak is the bf16 one. FP4
        likewise: Hopper has no FP4 units, and an MXFP4/NVFP4 checkpoint there is 4-bit
        storage dequantized into 16-bit GEMMs (vLLM's Marlin and Triton MoE kernels), not FP8.
        """
        table = {
            "bf16": self.bf16_tflops,
            "fp8": self.fp8_tflops,
            "int8": self.int8_tops,
            "fp4": self.fp4_tflops,
        }
        order = {"fp4": ["fp4", "bf16"], "fp8": ["fp8", "bf16"], "int8": ["int8", "bf16"]}
        for key in order.get(compute, ["bf16"]):
            value = table[key]
            if value is not None:
                return value * 1e12
        return self.bf16_tflops * 1e12


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


# Local models the edge has read (`inhouse.spec.load`), by the name they were given as: the
# parsed spec, or the error its config.json gave (raised where the name is looked up, as a
# catalog miss is).
_LOCAL_MODELS: dict[str, ModelSpec | SpecError] = {}


def add_local_model(name: str, spec: ModelSpec | SpecError) -> None:
    """Make `get_model(name)` answer `spec` (the edge read `name`'s config.json)."""
    _LOCAL_MODELS[name] = spec


def get_model(name: str) -> ModelSpec:
    """Resolve a model by HF id, basename or alias, or a local model the edge has read."""
    local = _LOCAL_MODELS.get(name)
    if isinstance(local, SpecError):
        raise local
    if local is not None:
        return local
    table = _model_table()
    key = _normalize(name)
    if key not in table:
        raise SpecError(
            f"unknown model {name!r}; known: {', '.join(known_models())} "
            "(or pass a directory holding a Hugging Face config.json)"
        )
    return table[key]


def find_local_model(name: str) -> ModelSpec | None:
    """The spec the edge read from `name`'s config.json (`add_local_model`), or None (not a
    local model, or its config did not parse)."""
    local = _LOCAL_MODELS.get(name)
    return local if isinstance(local, ModelSpec) else None


def find_catalog_model(name: str) -> ModelSpec | None:
    """The catalog entry `name` resolves to by name alone (no file is read), or None."""
    return _model_table().get(_normalize(name))


def model_from_hf_config_text(text: str, config_path: PurePath) -> ModelSpec:
    """A `ModelSpec` from the text of a Hugging Face `config.json` (Llama/Qwen/Mistral/MoE
    shapes); `config_path` names it in errors and gives the model its directory's name."""
    try:
        cfg: dict[str, Any] = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"cannot read model config {config_path}: {exc}") from exc
    quant = "none"
    if isinstance(cfg, dict):
        quantization = cfg.get("quantization_config")
        if isinstance(quantization, dict):
            quant = str(quantization.get("quant_method") or "unknown")
        cfg = cfg.get("text_config", cfg)
    if not isinstance(cfg, dict):
        raise SpecError(
            f"cannot read model config {config_path}: a Hugging Face config.json is a JSON "
            "object (hidden_size, num_attention_heads, ...)"
        )
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
            checkpoint_quant=quant,
        )
    except KeyError as exc:
        raise SpecError(f"{config_path}: missing field {exc.args[0]!r} in config.json") from exc
    except (TypeError, ValueError, ValidationError) as exc:
        raise SpecError(f"{config_path}: invalid config.json: {exc}") from exc
