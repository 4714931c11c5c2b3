"""Physical bounds: a run faster than the hardware allows is reported, not fitted."""

from __future__ import annotations

import pytest

from inhouse.calibration.corpus import prepare
from inhouse.calibration.plausibility import physical_bounds, screen
from inhouse.perf.memory import weight_bytes
from inhouse.spec import get_gpu, get_model
from inhouse.spec.parallel import ParallelLayout
from inhouse.spec.quant import resolve_weight_quants

from .test_corpus import rows


def test_decode_bound_is_the_weights_one_token_needs_over_peak_bandwidth() -> None:
    model = get_model("Llama-3.1-70B")
    quants = resolve_weight_quants("fp8", False)
    bounds = physical_bounds(model, get_gpu("h100_sxm"), ParallelLayout(tp=4), quants, 1)
    read = weight_bytes(model, quants) - model.lm_head_params * 2.0  # no input embedding
    assert bounds.tpot_ms == pytest.approx(1000 * (read + 327_680) / 4 / 3.35e12, rel=1e-3)


def test_a_run_faster_than_the_hardware_allows_is_set_aside() -> None:
    corpus = prepare(
        rows(
            "ok,Llama-3.1-70B,h100_sxm,vllm,,fp8,fp8,fp8,4,1,1,4,1,1024,1024,4,85.0,12.0",
            "fast,Llama-3.1-70B,h100_sxm,vllm,,fp8,fp8,fp8,4,1,1,4,1,1024,1024,4,85.0,3.0",
            "tp72,DeepSeek-R1,gb200,sglang,,fp8,fp8,fp8,72,1,1,72,1,1024,1024,1024,8553,24.2",
        )
    )
    screened = screen(corpus.rows)
    assert [r.row_id for r in screened.usable] == ["ok"]
    assert [r.row_id for r, _ in screened.implausible] == ["fast"]
    assert "TPOT 3.00 ms below the bound" in screened.implausible[0][1]
    assert [r.row_id for r, _ in screened.invalid] == ["tp72"]


GPT_OSS = "gpt-oss-120b,h100_sxm,vllm,,fp4,mxfp4,mxfp4,4,1,1,4,1,1024,1024"


def test_a_run_that_queued_in_front_of_the_engine_is_set_aside_and_said_why() -> None:
    """More clients, smaller decode batches, and a first token that took longer than the
    whole decode: the clients waited in front of the engine (gpt-oss on H100 at c512)."""
    corpus = prepare(
        rows(
            f"c64,{GPT_OSS},64,169.0,14.8",
            f"c256,{GPT_OSS},256,900.0,20.1",
            f"c512,{GPT_OSS},512,23793.0,5.6",
        )
    )
    screened = screen(corpus.rows)
    assert [r.row_id for r in screened.usable] == ["c64", "c256"]
    assert [r.row_id for r, _ in screened.queued] == ["c512"]
    why = screened.queued[0][1]
    assert "below 20.10 ms at 256" in why and "queued in front of the engine" in why


def test_a_lower_tpot_alone_or_a_long_ttft_alone_is_kept() -> None:
    """A noisy repeat with a lower TPOT but a short TTFT, and a KV-bound run with a long TTFT
    and a higher TPOT, are things the model can be judged on."""
    corpus = prepare(
        rows(
            f"c32,{GPT_OSS},32,166.0,15.9",
            f"c64,{GPT_OSS},64,116.0,9.7",
            f"c512,{GPT_OSS},512,60000.0,30.0",
        )
    )
    screened = screen(corpus.rows)
    assert screened.queued == []
    assert len(screened.usable) == 3
