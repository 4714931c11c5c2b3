"""SGLang sizes its KV pool by its own rule, not vLLM's `gpu_memory_utilization`."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inhouse.calibration.corpus import HARNESS_HEADROOM_TOKENS
from inhouse.engine.build import ReplicaSpec, build_replica
from inhouse.errors import DoesNotFitError
from inhouse.perf.memory import (
    CUDA_CONTEXT_BYTES,
    MIB,
    NCCL_RESERVE_BYTES,
    plan_memory,
    sglang_mem_fraction_static,
    weight_bytes_per_gpu,
)
from inhouse.spec import get_gpu, get_model
from inhouse.spec.knobs import VLLM_SERVE_DEFAULTS
from inhouse.spec.parallel import ParallelLayout
from inhouse.spec.quant import resolve_weight_quants

B200 = get_gpu("b200_sxm")
R1 = get_model("DeepSeek-R1")


def _fraction(reserved_mib: float, gpu_mib: float) -> float:
    return round((gpu_mib - reserved_mib) / gpu_mib, 3)


def test_a_large_gpu_keeps_at_least_10_gib_out_of_the_static_fraction() -> None:
    gpu_mib = B200.hbm_bytes / MIB
    small = sglang_mem_fraction_static(B200, ParallelLayout(tp=8), 2048, 8)
    assert small == _fraction(10 * 1024, gpu_mib)
    small_gpu = get_gpu("l40s")  # 48 GB: no floor, the sum of SGLang's terms
    expected = 512 + 2048 * 1.5 + 8 * 2 + 1 / 8 * 1024
    assert sglang_mem_fraction_static(small_gpu, ParallelLayout(tp=1), 1000, 8) == _fraction(
        expected, small_gpu.hbm_bytes / MIB
    )


def test_a_long_prefill_and_attention_dp_reserve_more() -> None:
    gpu_mib = B200.hbm_bytes / MIB
    long = sglang_mem_fraction_static(B200, ParallelLayout(tp=4), 9692, 32)
    assert long == _fraction(512 + 9692 * 1.5 + 32 * 2 + 4 / 8 * 1024, gpu_mib)
    dp = sglang_mem_fraction_static(B200, ParallelLayout(tp=1, attention_dp=8), 9692, 32)
    assert dp == _fraction(512 + 9692 * 1.5 + 32 * 2 + 8 / 8 * 1024 + 32 * 8 * 3, gpu_mib)


def test_the_static_fraction_is_of_the_memory_free_before_loading_less_weights() -> None:
    layout = ParallelLayout(tp=4, moe_tp=4, moe_ep=1)
    quant = resolve_weight_quants("fp8", True, "fp8", "fp8_block")
    plan = plan_memory(R1, B200, layout, quant, mem_fraction_static=0.915)
    free = B200.hbm_bytes - CUDA_CONTEXT_BYTES - NCCL_RESERVE_BYTES
    assert plan.reserve_bytes_per_gpu == 0
    assert plan.kv_bytes_per_gpu == pytest.approx(
        free * 0.915 - weight_bytes_per_gpu(R1, quant, layout)
    )


def test_sglang_replica_sizes_kv_by_its_rule_and_vllm_by_its_own() -> None:
    """DeepSeek-R1 FP8 at TP4 on B200 as the calibration harness launched it (8k prompts):
    SGLang's rule leaves it several times the KV that vLLM's 0.9 with its reserve did."""
    isl, conc = 8192, 32
    knobs = VLLM_SERVE_DEFAULTS.model_copy(
        update={
            "max_num_seqs": conc,
            "max_num_batched_tokens": isl + HARNESS_HEADROOM_TOKENS,
            "enable_chunked_prefill": False,
        }
    )
    spec = ReplicaSpec(
        "DeepSeek-R1",
        "b200_sxm",
        4,
        "fp8",
        "sglang",
        knobs,
        moe_tp=4,
        moe_ep=1,
        gemm_quant="fp8",
        moe_quant="fp8_block",
    )
    replica = build_replica(spec)
    fraction = sglang_mem_fraction_static(B200, replica.layout, isl + HARNESS_HEADROOM_TOKENS, conc)
    free = B200.hbm_bytes - CUDA_CONTEXT_BYTES - NCCL_RESERVE_BYTES
    weights = replica.memory.weight_bytes_per_gpu
    assert replica.memory.kv_bytes_per_gpu == pytest.approx(free * fraction - weights)
    vllm = build_replica(
        ReplicaSpec(
            "DeepSeek-R1",
            "b200_sxm",
            4,
            "fp8",
            "vllm",
            knobs.model_copy(update={"enable_chunked_prefill": True}),
            moe_tp=4,
            moe_ep=1,
            gemm_quant="fp8",
            moe_quant="fp8_block",
        )
    )
    assert vllm.memory.usable_bytes_per_gpu == pytest.approx(B200.hbm_bytes * 0.9)
    assert vllm.memory.reserve_bytes_per_gpu > 0
    assert replica.memory.kv_bytes_per_gpu > 3 * vllm.memory.kv_bytes_per_gpu


def test_a_reserve_that_takes_the_whole_gpu_is_refused_with_the_fix() -> None:
    small = get_gpu("l40s")
    fraction = sglang_mem_fraction_static(small, ParallelLayout(tp=1), 40_000, 8)
    assert fraction <= 0
    quant = resolve_weight_quants("fp8", False)
    with pytest.raises(DoesNotFitError, match="lower the prefill budget"):
        plan_memory(get_model("Llama-3.1-8B"), small, 1, quant, mem_fraction_static=fraction)


def test_a_static_fraction_the_launch_passed_replaces_sglangs_rule() -> None:
    """InferenceX passes `--mem-fraction-static 0.80` for GLM-5 FP4 with a 131K-token prefill
    chunk, whose reserve SGLang's own rule makes larger than the GPU."""
    knobs = VLLM_SERVE_DEFAULTS.model_copy(
        update={"max_num_seqs": 64, "max_num_batched_tokens": 131072}
    )
    spec = ReplicaSpec("GLM-5", "b200_sxm", 8, "fp4", "sglang", knobs, moe_tp=8, moe_ep=1,
                       gemm_quant="nvfp4", moe_quant="nvfp4")  # fmt: skip
    with pytest.raises(DoesNotFitError, match="lower the prefill budget"):
        build_replica(spec)
    passed = build_replica(replace(spec, mem_fraction_static=0.80))
    free = B200.hbm_bytes - CUDA_CONTEXT_BYTES - NCCL_RESERVE_BYTES
    weights = passed.memory.weight_bytes_per_gpu
    assert passed.memory.kv_bytes_per_gpu == pytest.approx(free * 0.80 - weights)
    # vLLM's rule takes no notice of it.
    vllm = replace(
        spec, backend="vllm", knobs=knobs.model_copy(update={"max_num_batched_tokens": 8192})
    )
    assert (
        build_replica(replace(vllm, mem_fraction_static=0.5)).memory == build_replica(vllm).memory
    )
