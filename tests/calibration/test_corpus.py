"""The calibration corpus read by its stated rules, each checked on a row that needs it."""

from __future__ import annotations

from inhouse.calibration.corpus import HARNESS_HEADROOM_TOKENS, prepare, regime

HEADER = "id,model,system,backend,backend_version,precision,gemm_quant,moe_quant,tp,pp,attention_dp,moe_tp,moe_ep,isl,osl,concurrency,ttft_ms,tpot_ms"  # noqa: E501


def rows(*lines: str) -> list[dict[str, str]]:
    keys = HEADER.split(",")
    return [dict(zip(keys, line.split(","), strict=True)) for line in lines]


def test_a_layout_that_contradicts_the_runs_id_is_taken_from_the_id() -> None:
    corpus = prepare(
        rows(
            "2026_04_06_x_sglang_fp8_agg_1024x1024_c8_tp4_ep4_1,DeepSeek-R1,b200_sxm,sglang,"
            ",fp4,nvfp4,nvfp4,16,1,1,4,4,1024,1024,8,200.0,9.0",
            "2026_04_06_y_vllm_fp8_agg_1024x1024_c8_tp4_ep4_2,MiniMax-M2.5,h100_sxm,vllm,"
            ",fp8,fp8,fp8,4,1,4,1,16,1024,1024,8,90.0,12.0",
        )
    )
    specs = [r.spec for r in corpus.rows]
    assert [(s.tp, s.attention_dp, s.moe_tp, s.moe_ep) for s in specs] == [(4, 1, 1, 4)] * 2
    assert len(corpus.corrected) == 2


def test_a_label_that_agrees_with_its_id_is_kept() -> None:
    corpus = prepare(
        rows(
            "a_sglang_fp4_agg_1024x1024_c8_tp8_0_ep8_0_3,DeepSeek-R1,b200_sxm,sglang,0.5.9"
            ",fp4,nvfp4,nvfp4,8,1,1,1,8,1024,1024,8,200.0,9.0",
        )
    )
    assert (corpus.rows[0].spec.tp, corpus.rows[0].spec.moe_ep) == (8, 8)
    assert corpus.corrected == []


def test_one_run_listed_twice_is_kept_once_with_the_id_named_layout() -> None:
    corpus = prepare(
        rows(
            "dsr1_b200_sglang_fp4_agg_1024x1024_c8_cfg1,DeepSeek-V3,b200_sxm,sglang,"
            ",fp4,nvfp4,nvfp4,16,1,1,4,4,1024,1024,8,208.4,9.0",
            "2026_x_sglang_fp4_agg_1024x1024_c8_tp4_ep4_9,DeepSeek-R1,b200_sxm,sglang,"
            ",fp4,nvfp4,nvfp4,16,1,1,4,4,1024,1024,8,208.4,9.0",
        )
    )
    assert [r.row_id for r in corpus.rows] == ["2026_x_sglang_fp4_agg_1024x1024_c8_tp4_ep4_9"]
    assert corpus.duplicates == [
        ("dsr1_b200_sglang_fp4_agg_1024x1024_c8_cfg1", corpus.rows[0].row_id)
    ]


def test_the_kv_cache_dtype_is_the_checkpoints() -> None:
    corpus = prepare(
        rows(
            "a,Llama-3.1-70B,h100_sxm,vllm,,fp8,fp8,fp8,2,1,1,2,1,1024,1024,8,150.0,18.0",
            "b,Qwen3-32B,h100_sxm,vllm,,fp8,fp8,fp8,2,1,1,0,0,1024,1024,8,150.0,18.0",
            "c,Kimi-K2.5,b200_sxm,vllm,,fp4,nvfp4,nvfp4,8,1,1,8,1,1024,1024,8,90.0,7.0",
            "d,gpt-oss-120b,b200_sxm,vllm,,fp4,nvfp4,nvfp4,1,1,1,1,1,1024,1024,8,40.0,3.0",
        )
    )
    assert [r.spec.knobs.kv_cache_dtype for r in corpus.rows] == ["fp8", "auto", "fp8", "auto"]


def test_the_harness_engine_knobs_follow_aiconfigurators_rules() -> None:
    corpus = prepare(
        rows(
            "a,Qwen3-32B,h100_sxm,vllm,,bf16,,,2,1,1,1,1,1024,128,16,188.0,22.0",
            "b,Qwen3-32B,h100_sxm,sglang,,bf16,,,2,1,1,1,1,1024,128,16,841.0,16.5",
        )
    )
    vllm, sglang = (r.spec.knobs for r in corpus.rows)
    assert vllm.max_num_batched_tokens == 16 + 1024 + HARNESS_HEADROOM_TOKENS
    assert vllm.max_model_len == 1024 + 128 + HARNESS_HEADROOM_TOKENS
    assert (vllm.max_num_seqs, sglang.max_num_seqs) == (16, 16)
    assert sglang.max_num_batched_tokens == 1024 + HARNESS_HEADROOM_TOKENS
    assert not sglang.enable_chunked_prefill and vllm.enable_chunked_prefill


def test_an_unreadable_row_is_reported_not_dropped_silently() -> None:
    corpus = prepare(rows("a,NoSuchModel,h100_sxm,vllm,,fp8,,,2,1,1,1,1,1024,128,16,1,1"))
    assert corpus.rows == [] and corpus.unreadable[0][0] == "a"
    assert "unknown model" in corpus.unreadable[0][1]


def test_regimes() -> None:
    assert [regime(c) for c in (4, 16, 32, 128, 256, 8192)] == [
        "c<=16", "c<=16", "c32-128", "c32-128", "c>=256", "c>=256",
    ]  # fmt: skip
