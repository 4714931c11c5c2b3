"""Typed specs and the catalogs shipped as data (GPUs, models)."""

from inhouse.spec.catalog import (
    GpuSpec,
    ModelSpec,
    get_gpu,
    get_model,
    known_gpus,
    known_models,
)
from inhouse.spec.quant import KV_DTYPES, QUANTIZATIONS, kv_dtype_bytes, normalize_quant

__all__ = [
    "KV_DTYPES",
    "QUANTIZATIONS",
    "GpuSpec",
    "ModelSpec",
    "get_gpu",
    "get_model",
    "known_gpus",
    "known_models",
    "kv_dtype_bytes",
    "normalize_quant",
]
