"""The calibration corpus read by its stated rules, each checked on a row that needs it."""

from __future__ import annotations

from inhouse.calibration.corpus import (
    HARNESS_HEADROOM_TOKENS,
    SA_BENCH,
    CorpusRow,
    prepare,
    regime,
)
from inhouse.predict import AIPERF_SILICON, INFERENCEX_SWEEP

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
            "2026_04_06_x_sglang_fp4_agg_1024x1024_c8_tp4_ep4_9,DeepSeek-R1,b200_sxm,sglang,"
            ",fp4,nvfp4,nvfp4,16,1,1,4,4,1024,1024,8,208.4,9.0",
        )
    )
    assert [r.row_id for r in corpus.rows] == ["2026_04_06_x_sglang_fp4_agg_1024x1024_c8_tp4_ep4_9"]
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


def test_each_row_carries_its_harness_protocol() -> None:
    """InferenceX sweeps (dated or `_cfgN` ids): ten waves, lengths on [0.8 L, L]; its GB200
    runs (sa-bench): five; aiconfigurator's gap analysis: aiperf's twenty, exact lengths."""
    corpus = prepare(
        rows(
            "2026_04_06_llama_3_1_70b_h100_sxm_vllm_fp8_agg_8192x1024_c4_tp8_ep1_828,Llama-3.1-70B,h100_sxm,vllm,,fp8,,,8,1,1,8,1,8192,1024,4,300.0,10.0",
            "kimik2_5_b200_vllm_fp4_agg_1024x1024_c4_cfg636,Kimi-K2.5,b200_sxm,vllm,,fp4,nvfp4,nvfp4,8,1,1,8,1,1024,1024,4,74.0,7.0",
            "2026_04_06_dsr1_gb200_sglang_fp4_agg_1024x1024_c4_tp4_ep4_1,DeepSeek-R1,gb200,sglang,,fp4,nvfp4,nvfp4,4,1,1,1,4,1024,1024,4,90.0,8.0",
            "qwen3_32b_qwen3_32b_h100_sxm_vllm_agg_4000x1000_c_tp8_0_epnone_1,Qwen3-32B,h100_sxm,vllm,,bf16,,,8,1,1,8,1,4000,1000,8,120.0,9.0",
            "kimi_k2_5_gap_analysis_kimi_k2_5_gap_analysis_b200_sxm_vllm_fp4_agg_1024x1024_c4_tp8_ep1_1,Kimi-K2.5,b200_sxm,vllm,,fp4,nvfp4,nvfp4,8,1,1,8,1,1024,1024,4,75.0,7.1",
        ),
        harness=True,
    )
    protocols = [(r.protocol.waves, r.protocol.min_length_ratio) for r in corpus.rows]
    assert protocols == [(10, 0.8), (10, 0.8), (5, 0.8), (20, 1.0), (20, 1.0)]
    assert corpus.rows[0].protocol == INFERENCEX_SWEEP
    assert corpus.rows[2].protocol == SA_BENCH and corpus.rows[3].protocol == AIPERF_SILICON


def test_inferencex_rows_get_inferencex_launch_knobs() -> None:
    """InferenceX's launch scripts, not aiconfigurator's generator: vLLM's 8192-token budget
    (2 x ISL for MiniMax on 0.19) and its FP8 caches; SGLang's chunked prefill, running cap
    and fp8_e4m3 cache. A row of aiconfigurator's own keeps the generator's rules."""
    corpus = prepare(
        rows(
            "2026_04_06_llama_3_1_70b_h100_sxm_vllm_fp8_agg_1024x1024_c4_tp8_ep1_1,Llama-3.1-70B,h100_sxm,vllm,,fp8,,,8,1,1,8,1,1024,1024,4,70.0,9.0",
            "2026_04_06_minimax_b200_vllm_fp8_agg_8192x1024_c8_tp4_ep1_2,MiniMax-M2.5,b200_sxm,vllm,0.19.0,fp8,fp8,fp8,4,1,1,4,1,8192,1024,8,200.0,9.0",
            "dsr1_b200_sglang_fp8_agg_1024x1024_c4_cfg87,DeepSeek-R1,b200_sxm,sglang,0.5.9,fp8,fp8,fp8,8,1,1,8,1,1024,1024,4,90.0,8.0",
            "2026_04_06_dsr1_b200_sglang_fp4_agg_1024x1024_c4_tp4_ep4_4,DeepSeek-R1,b200_sxm,sglang,0.5.9,fp4,nvfp4,nvfp4,4,1,1,1,4,1024,1024,4,90.0,8.0",
            "2026_04_06_qwen3_5_b200_sglang_bf16_agg_1024x1024_c4_tp8_ep1_5,Qwen3.5-397B-A17B,b200_sxm,sglang,nightly-dev,bf16,,,8,1,1,8,1,1024,1024,4,90.0,8.0",
            "qwen3_5_397b_gap_analysis_b200_sxm_sglang_bf16_agg_1024x1024_c4_tp8_ep1_1,Qwen3.5-397B-A17B,b200_sxm,sglang,,bf16,,,8,1,1,8,1,1024,1024,4,91.0,8.1",
        ),
        harness=True,
    )
    llama, minimax, dsr1_fp8, dsr1_fp4, qwen, gap = (r.spec.knobs for r in corpus.rows)
    assert (llama.max_num_batched_tokens, llama.kv_cache_dtype) == (8192, "fp8")
    assert (minimax.max_num_batched_tokens, minimax.max_num_seqs) == (2 * 8192, 1024)
    assert minimax.kv_cache_dtype == "fp8"
    assert dsr1_fp8.enable_chunked_prefill and dsr1_fp8.max_num_batched_tokens == 32768
    assert (dsr1_fp8.max_num_seqs, dsr1_fp8.kv_cache_dtype) == (128, "fp8")
    assert (dsr1_fp4.max_num_batched_tokens, dsr1_fp4.max_num_seqs) == (16384, 256)
    assert (qwen.max_num_batched_tokens, qwen.kv_cache_dtype) == (32768, "auto")
    assert not gap.enable_chunked_prefill
    assert gap.max_num_batched_tokens == 1024 + HARNESS_HEADROOM_TOKENS


def test_without_the_harness_every_row_is_read_as_aiconfigurators_generator_runs() -> None:
    """The reading the shipped constants were fitted under: aiperf's protocol and the
    generator's engine rules for every row, whatever its id."""
    line = "2026_04_06_llama_3_1_70b_h100_sxm_vllm_fp8_agg_1024x1024_c4_tp8_ep1_1,Llama-3.1-70B,h100_sxm,vllm,,fp8,,,8,1,1,8,1,1024,1024,4,70.0,9.0"  # noqa: E501
    (row,) = prepare(rows(line)).rows
    assert row.protocol == AIPERF_SILICON
    assert row.spec.knobs.max_num_batched_tokens == 4 + 1024 + HARNESS_HEADROOM_TOKENS


def test_a_row_built_without_a_protocol_is_read_as_the_shipped_reading() -> None:
    """`prepare` without the harness reads every row as aiperf runs; a CorpusRow built without
    a protocol defaulted to InferenceX's, so a caller that built rows itself (a test, a
    script) simulated them under another protocol than the shipped constants' reading."""
    (row,) = prepare(
        rows(
            "2026_04_06_llama_3_1_70b_h100_sxm_vllm_fp8_agg_1024x1024_c4_tp8_ep1_1,Llama-3.1-70B,h100_sxm,vllm,,fp8,,,8,1,1,8,1,1024,1024,4,70.0,9.0"
        )
    ).rows
    bare = CorpusRow(row.row_id, row.spec, row.isl, row.osl, row.concurrency, row.ttft_ms,
                     row.tpot_ms, row.family)  # fmt: skip
    assert bare.protocol == AIPERF_SILICON


def test_gb200_rows_do_not_get_the_single_node_launch_scripts_knobs() -> None:
    """InferenceX's GB200 rows ran a multi-node disaggregated recipe that is not matched (the
    knobs the module docstring states are its single-node scripts'); the harness reading gave
    them the B200 DeepSeek FP8 script's running cap of 128 at 5,632 clients. They keep the
    generator's rules, as a row whose launch is unknown does."""
    line = "2026_04_06_deepseek_r1_gb200_sglang_fp8_agg_1024x1024_c5632_tp72_ep1_43,DeepSeek-R1,gb200,sglang,,fp8,fp8,fp8,8,1,9,1,72,1024,1024,5632,900.0,40.0"  # noqa: E501
    (harness,) = prepare(rows(line), harness=True).rows
    (plain,) = prepare(rows(line)).rows
    assert harness.protocol == SA_BENCH
    assert harness.spec.knobs == plain.spec.knobs
    assert harness.spec.knobs.max_num_seqs == 5632


QWEN_FP8 = "Qwen3.5-397B-A17B,b200_sxm,sglang,0.5.9,fp8,fp8,fp8"


def test_a_copy_written_to_fewer_digits_is_the_same_run_and_inferencexs_copy_is_kept() -> None:
    # aiconfigurator's gap-analysis dump repeats InferenceX's runs rounded to 0.01 ms, with
    # trailing zeros (338.336 -> 338.340); a run 0.014 ms away is another run.
    lines = rows(
        f"q_gap_analysis_b200_sxm_sglang_fp8_agg_1024x1024_c4_tp4_ep4_1,{QWEN_FP8},"
        "4,1,1,1,4,1024,1024,4,338.340,6.3300",
        f"2026_03_25_q_sglang_fp8_agg_1024x1024_c4_tp4_0_ep4_0_7,{QWEN_FP8},"
        "4,1,1,1,4,1024,1024,4,338.336,6.3327",
        f"2026_03_25_q_sglang_fp8_agg_1024x1024_c4_tp4_0_ep4_0_8,{QWEN_FP8},"
        "4,1,1,1,4,1024,1024,4,338.350,6.3327",
    )
    for harness in (False, True):
        corpus = prepare(lines, harness=harness)
        kept = [r.row_id for r in corpus.rows]
        assert kept == [lines[1]["id"], lines[2]["id"]]
        assert corpus.duplicates == [(lines[0]["id"], lines[1]["id"])]
    assert prepare(lines, harness=True).rows[0].protocol is INFERENCEX_SWEEP


def test_inferencexs_speculative_decoding_and_cold_runs_are_left_out_with_the_reason() -> None:
    deepseek = "DeepSeek-R1,b200_sxm,sglang,{},fp8,fp8,fp8,8,1,1,8,1,1024,1024"
    lines = rows(
        # Qwen3.5 FP8 at TP4 without EP: only InferenceX's MTP configuration ran it.
        f"2026_03_25_q_sglang_fp8_agg_1024x1024_c4_tp4_0_ep1_0_1,{QWEN_FP8},"
        "4,1,1,4,1,1024,1024,4,338.336,6.3327",
        f"2026_03_25_q_sglang_fp8_agg_1024x1024_c4_tp4_0_ep4_0_2,{QWEN_FP8},"
        "4,1,1,1,4,1024,1024,4,297.438,9.9442",
        # DeepSeek FP8 TP8 on 0.5.9: the plain configuration's runs are its export's.
        f"2026_03_25_d_sglang_fp8_agg_1024x1024_c4_tp8_0_ep1_0_3,{deepseek.format('0.5.9')}"
        ",4,183.180,8.7600",
        f"dsr1_b200_sglang_fp8_agg_1024x1024_c4_cfg87,{deepseek.format('0.5.9')},4,183.180,8.7600",
        f"2026_03_25_d_sglang_fp8_agg_1024x1024_c4_tp8_0_ep1_0_4,{deepseek.format('0.5.9')}"
        ",4,206.715,6.7032",
        f"2026_03_25_d_sglang_fp8_agg_1024x1024_c8_tp8_0_ep1_0_5,{deepseek.format('0.5.6')}"
        ",8,226.624,10.8070",
        # DeepSeek on SGLang images before 0.5.6 (no version): no warm-up, measured cold.
        f"2026_04_06_d_sglang_fp8_agg_1024x1024_c8_tp8_ep1_6,{deepseek.format('')}"
        ",8,9188.185,14.8234",
    )
    corpus = prepare(lines, harness=True)
    assert [r.row_id for r in corpus.rows] == [lines[i]["id"] for i in (1, 2, 5)]
    assert [i for i, _ in corpus.excluded] == [lines[i]["id"] for i in (0, 4, 6)]
    assert ["speculative decoding" in why for _, why in corpus.excluded] == [True, True, False]
    assert "no warm-up" in corpus.excluded[2][1]
    # Read as aiperf's generator runs (the shipped reading), nothing is left out.
    assert prepare(lines).excluded == [] and len(prepare(lines).rows) == 6


def test_the_layout_inferencexs_script_ran_replaces_the_label() -> None:
    lines = rows(
        "2026_03_25_k_vllm_fp4_agg_1024x1024_c4_tp4_0_ep4_0_1,Kimi-K2.5,b200_sxm,vllm,0.17.0"
        ",fp4,nvfp4,nvfp4,4,1,1,1,4,1024,1024,4,74.1,7.06",
        "2026_03_25_m_vllm_fp8_agg_1024x1024_c4_tp2_0_ep1_0_2,MiniMax-M2.5,b200_sxm,vllm,0.17.0"
        ",fp8,fp8,fp8,2,1,1,2,1,1024,1024,4,60.0,5.0",
        "2026_03_25_m_vllm_fp8_agg_1024x1024_c4_tp2_0_ep1_0_4,MiniMax-M2.5,b200_sxm,vllm,0.19.0"
        ",fp8,fp8,fp8,2,1,1,2,1,1024,1024,4,61.0,5.1",
    )
    ran = prepare(lines, harness=True)
    assert [(r.spec.moe_tp, r.spec.moe_ep) for r in ran.rows] == [(4, 1), (1, 2), (2, 1)]
    assert [i for i, _ in ran.corrected] == [lines[i]["id"] for i in range(2)]
    assert "InferenceX" in ran.corrected[0][1]
    labelled = prepare(lines)
    assert [(r.spec.moe_tp, r.spec.moe_ep) for r in labelled.rows] == [
        (1, 4), (2, 1), (2, 1),
    ]  # fmt: skip


def test_the_multiplying_dumps_vllm_encoding_is_read_under_an_id_that_does_not_name_it() -> None:
    # Its named copy (`..._tp2_ep2_1384`) shows the encoding: tp 2, attention DP 2, ep 4 is
    # TP2 with experts over the two ranks, on two GPUs.
    corpus = prepare(
        rows(
            "minimaxm2_5_b200_vllm_fp8_agg_1024x1024_c4_cfg690,MiniMax-M2.5,b200_sxm,vllm,0.19.0"
            ",fp8,fp8,fp8,2,1,2,1,4,1024,1024,4,74.273,9.5753",
            "minimaxm2_5_b200_vllm_fp8_agg_1024x1024_c16_cfg691,MiniMax-M2.5,b200_sxm,vllm,0.19.0"
            ",fp8,fp8,fp8,4,1,4,1,16,1024,1024,16,76.343,10.6180",
            # SGLang's attention DP is real: left as labelled.
            "dsr1_cfg5,DeepSeek-R1,b200_sxm,sglang,0.5.9,fp4,nvfp4,nvfp4,4,1,2,1,8,1024,1024,4,9,8",
        )
    )
    layouts = [(r.spec.tp, r.spec.attention_dp, r.spec.moe_tp, r.spec.moe_ep) for r in corpus.rows]
    assert layouts == [(2, 1, 1, 2), (4, 1, 1, 4), (4, 2, 1, 8)]
    assert len(corpus.corrected) == 2


def test_inferencexs_sglang_runs_get_the_static_memory_fraction_its_scripts_pass() -> None:
    lines = rows(
        "2026_04_06_g_sglang_fp4_agg_1024x1024_c16_tp8_ep1_1,GLM-5,b200_sxm,sglang,nightly"
        ",fp4,nvfp4,nvfp4,8,1,1,8,1,1024,1024,16,300.0,20.0",
        "dsr1_b200_sglang_fp8_agg_8192x1024_c4_cfg271,DeepSeek-R1,b200_sxm,sglang,0.5.9"
        ",fp8,fp8,fp8,4,1,1,4,1,8192,1024,4,585.918,11.5353",
        "2026_04_06_l_vllm_fp8_agg_1024x1024_c4_tp8_ep1_3,Llama-3.1-70B,h100_sxm,vllm,,fp8,,,8,1"
        ",1,8,1,1024,1024,4,70.0,9.0",
    )
    harness = [r.spec.mem_fraction_static for r in prepare(lines, harness=True).rows]
    assert harness == [0.80, 0.95, None]
    assert [r.spec.mem_fraction_static for r in prepare(lines).rows] == [None] * 3


def test_the_speculative_decoding_rule_holds_only_where_its_configurations_were_read() -> None:
    """InferenceX's B200 configurations were matched; a B300 run at TP4 without EP stays."""
    line = (
        "qwen3_5_b300_sglang_fp8_agg_8192x1024_c4_cfg716,Qwen3.5-397B-A17B,b300_sxm,sglang,0.5.9"
        ",fp8,fp8,fp8,4,1,1,4,1,8192,1024,4,500.0,6.0"
    )
    corpus = prepare(rows(line), harness=True)
    assert len(corpus.rows) == 1 and corpus.excluded == []


def test_a_value_ending_in_zeros_is_not_read_as_a_coarser_measurement() -> None:
    # "45.000" is written to 0.001 ms like its dump's other values; read as 45 to the ms,
    # it made two runs of one point 0.3 ms apart (different layouts) one run. No dump of
    # the corpus writes coarser than 0.01 ms (the gap analysis's), so no copy is further
    # apart than 0.005 ms.
    minimax = "MiniMax-M2.5,b200_sxm,vllm,0.19.0,fp4,nvfp4,nvfp4"
    lines = rows(
        f"2026_03_25_m_vllm_fp4_agg_1024x1024_c4_tp2_0_ep1_0_1,{minimax},2,1,1,2,1,1024,1024,4"
        ",45.000,5.9000",
        f"2026_03_25_m_vllm_fp4_agg_1024x1024_c4_tp4_0_ep1_0_2,{minimax},4,1,1,4,1,1024,1024,4"
        ",45.300,5.9300",
        f"m_gap_analysis_b200_sxm_vllm_fp4_agg_1024x1024_c4_tp2_ep1_3,{minimax},2,1,1,2,1,1024"
        ",1024,4,45.00,5.90",
    )
    corpus = prepare(lines)
    assert [r.spec.tp for r in corpus.rows] == [2, 4]
    assert corpus.duplicates == [(lines[2]["id"], lines[0]["id"])]


def test_kimis_plain_tp_reading_holds_only_for_the_scripts_that_ignored_ep_size() -> None:
    """The B200 (and B300) scripts run with vLLM 0.17.0 passed no --enable-expert-parallel;
    InferenceX's later Kimi scripts do (a TP/TEP sweep), and H200's were not read."""
    kimi = "Kimi-K2.5,{},vllm,{},fp4,nvfp4,nvfp4,4,1,1,1,4,1024,1024,4,{},7.06"
    run = "2026_03_25_k_vllm_fp4_agg_1024x1024_c4_tp4_0_ep4_0_{},"
    lines = rows(
        run.format(1) + kimi.format("b200_sxm", "0.17.0", 74.1),
        run.format(2) + kimi.format("b300_sxm", "0.17.0", 70.2),
        run.format(3) + kimi.format("b200_sxm", "0.21.0", 71.3),
        run.format(4) + kimi.format("h200_sxm", "0.17.0", 90.4),
    )
    ran = prepare(lines, harness=True)
    assert [(r.spec.moe_tp, r.spec.moe_ep) for r in ran.rows] == [(4, 1), (4, 1), (1, 4), (1, 4)]


def test_the_cold_run_rule_holds_only_where_its_images_were_matched() -> None:
    """A B200 DeepSeek row without a version ran SGLang 0.5.3 or 0.5.5 (before InferenceX's
    client warmed up); on a GPU whose scripts and images were not matched, no version says
    nothing about the date."""
    deepseek = "DeepSeek-R1,{},sglang,,fp8,fp8,fp8,8,1,1,8,1,1024,1024,8,{},14.8"
    run = "2026_04_06_d_sglang_fp8_agg_1024x1024_c8_tp8_ep1_{},"
    lines = rows(
        run.format(1) + deepseek.format("b200_sxm", "9188.185"),
        run.format(2) + deepseek.format("h200_sxm", "9000.0"),
    )
    corpus = prepare(lines, harness=True)
    assert [i for i, _ in corpus.excluded] == [lines[0]["id"]]
    assert [r.row_id for r in corpus.rows] == [lines[1]["id"]]


def test_inferencexs_copy_is_kept_over_a_gap_analysis_copy_that_names_its_layout() -> None:
    """InferenceX's own copy is kept even where only the gap-analysis copy's id names the
    layout (its harness is InferenceX's); the layout is then the named copy's, not the
    multiplying dump's label (tp16 for tp4_ep4)."""
    lines = rows(
        f"q_gap_analysis_b200_sxm_sglang_fp8_agg_1024x1024_c4_tp4_ep4_1,{QWEN_FP8},"
        "4,1,1,1,4,1024,1024,4,297.440,9.9400",
        f"qwen3_5_b200_sglang_fp8_agg_1024x1024_c4_cfg615,{QWEN_FP8},"
        "16,1,1,4,4,1024,1024,4,297.438,9.9442",
    )
    for harness in (False, True):
        corpus = prepare(lines, harness=harness)
        assert [r.row_id for r in corpus.rows] == [lines[1]["id"]]
        spec = corpus.rows[0].spec
        assert (spec.tp, spec.attention_dp, spec.moe_tp, spec.moe_ep) == (4, 1, 1, 4)
        assert len(corpus.corrected) == 1 and lines[0]["id"] in corpus.corrected[0][1]
    harness_row = prepare(lines, harness=True).rows[0]
    assert harness_row.protocol is INFERENCEX_SWEEP
    assert harness_row.spec.mem_fraction_static == 0.82


def test_inferencexs_vllm_dp_attention_configuration_is_read_as_attention_dp() -> None:
    """InferenceX's MiniMax-M2.5 FP4 B200 entry `{tp: 2, ep: 2, dp-attn: true}` (1k/1k, C 512
    from 2026-04-08, C 256-1024 from 04-21; config 707 in the export) launches
    `--tensor-parallel-size 1 --data-parallel-size 2 --enable-expert-parallel`; the dump
    labels it as its plain `tp: 2, ep: 2` entry (config 706), which is TP2 with EP2."""
    minimax = "MiniMax-M2.5,b200_sxm,vllm,0.19.0,fp4,nvfp4,nvfp4,2,1,2,1,4,1024,1024"
    corpus = prepare(
        rows(
            f"minimaxm2_5_b200_vllm_fp4_agg_1024x1024_c512_cfg707,{minimax},512,451.190,32.0109",
            f"minimaxm2_5_b200_vllm_fp4_agg_1024x1024_c256_cfg706,{minimax},256,300.0,24.0",
        )
    )
    layouts = [(r.spec.tp, r.spec.attention_dp, r.spec.moe_tp, r.spec.moe_ep) for r in corpus.rows]
    assert layouts == [(1, 2, 1, 2), (2, 1, 1, 2)]
    assert "dp-attn" in corpus.corrected[0][1]


def test_a_batch_per_attention_dp_rank_is_read_as_the_runs_concurrency() -> None:
    """The unseen-GPU dump writes aiconfigurator's `batch_size`, InferenceX's concurrency
    over the attention-DP label (its adapter: `concurrency // (replicas * attention_dp)`);
    the id keeps the run's own (`_c512_`)."""
    minimax = "MiniMax-M2.5,b300_sxm,vllm,0.19.0,fp8,fp8,fp8,4,1,4,1,16,1024,1024"
    lines = rows(
        f"minimaxm2_5_b300_vllm_fp8_agg_1024x1024_c512_cfg734,{minimax},128,727.8426,31.7445",
        f"minimaxm2_5_b300_vllm_fp8_agg_1024x1024_c64_cfg733,{minimax},64,300.0,20.0",
    )
    for harness in (False, True):
        corpus = prepare(lines, harness=harness)
        assert [r.concurrency for r in corpus.rows] == [512, 64]
        assert corpus.rows[0].spec.knobs.max_num_seqs == 512
    assert any("concurrency 128" in why for _, why in prepare(lines).corrected)


def test_two_runs_within_one_rounded_copys_reach_stay_two_runs() -> None:
    # 338.336 and 338.339 both round to 338.34: the rounded copy is one of them, but the two,
    # written to 0.001 ms, are two runs whichever row comes first.
    lines = rows(
        f"q_gap_analysis_b200_sxm_sglang_fp8_agg_1024x1024_c4_tp4_ep4_1,{QWEN_FP8},"
        "4,1,1,1,4,1024,1024,4,338.340,6.3300",
        f"2026_03_25_q_sglang_fp8_agg_1024x1024_c4_tp4_0_ep4_0_7,{QWEN_FP8},"
        "4,1,1,1,4,1024,1024,4,338.336,6.3327",
        f"2026_03_25_q_sglang_fp8_agg_1024x1024_c4_tp4_0_ep4_0_8,{QWEN_FP8},"
        "4,1,1,1,4,1024,1024,4,338.339,6.3327",
    )
    corpus = prepare(lines)
    assert [r.row_id for r in corpus.rows] == [lines[1]["id"], lines[2]["id"]]
    assert len(corpus.duplicates) == 1


def test_qwen35_fp4_gets_the_fraction_its_own_script_passes() -> None:
    """qwen3.5_fp4_b200.sh (image nightly-dev-20260402-d7256eb6) passes 0.85; the FP8 and
    BF16 scripts 0.82."""
    qwen = "Qwen3.5-397B-A17B,b200_sxm,sglang,nightly-dev-20260402-d7256eb6,{},{},{},{},1,1,{},1"
    lines = rows(
        "qwen3_5_b200_sglang_fp4_agg_1024x1024_c4_cfg708,"
        + qwen.format("fp4", "nvfp4", "nvfp4", 4, 4)
        + ",1024,1024,4,279.545,6.8239",
        "2026_03_25_q_sglang_fp8_agg_1024x1024_c4_tp8_0_ep1_0_2,"
        + qwen.format("fp8", "fp8", "fp8", 8, 8)
        + ",1024,1024,4,304.654,8.3350",
    )
    fractions = [r.spec.mem_fraction_static for r in prepare(lines, harness=True).rows]
    assert fractions == [0.85, 0.82]


def test_a_time_that_is_not_a_positive_number_is_unreadable_and_swallows_no_run() -> None:
    """A NaN matched every run as its copy (a NaN difference is never over the tolerance),
    so the real run beside it was dropped as a duplicate of it."""
    good = "b,Llama-3.1-70B,h100_sxm,vllm,,fp8,,,8,1,1,8,1,1024,1024,4,70.0,9.0"
    for ttft, tpot in (("nan", "9.0"), ("-5", "9.0"), ("inf", "9.0"), ("70.0", "0")):
        bad = f"a,Llama-3.1-70B,h100_sxm,vllm,,fp8,,,8,1,1,8,1,1024,1024,4,{ttft},{tpot}"
        corpus = prepare(rows(bad, good))
        assert [r.row_id for r in corpus.rows] == ["b"] and corpus.duplicates == []
        assert corpus.unreadable[0][0] == "a" and "positive number of ms" in corpus.unreadable[0][1]


def test_inferencexs_sglang_runs_get_the_recv_interval_its_scripts_pass() -> None:
    """dsr1_fp8_b200.sh: TP 8 30 from 16 clients, else 10; TP 4 10 at every concurrency;
    GLM-5's scripts pass none; vLLM has no such knob; the shipped reading keeps 1."""
    lines = rows(
        "dsr1_b200_sglang_fp8_agg_1024x1024_c16_cfg1,DeepSeek-R1,b200_sxm,sglang,0.5.9"
        ",fp8,fp8,fp8,8,1,1,8,1,1024,1024,16,300.0,20.0",
        "dsr1_b200_sglang_fp8_agg_1024x1024_c8_cfg1,DeepSeek-R1,b200_sxm,sglang,0.5.9"
        ",fp8,fp8,fp8,8,1,1,8,1,1024,1024,8,200.0,15.0",
        "dsr1_b200_sglang_fp8_agg_8192x1024_c64_cfg271,DeepSeek-R1,b200_sxm,sglang,0.5.9"
        ",fp8,fp8,fp8,4,1,1,4,1,8192,1024,64,2585.918,31.5353",
        "2026_04_06_g_sglang_fp4_agg_1024x1024_c16_tp8_ep1_1,GLM-5,b200_sxm,sglang,nightly"
        ",fp4,nvfp4,nvfp4,8,1,1,8,1,1024,1024,16,300.0,20.0",
        "2026_04_06_l_vllm_fp8_agg_1024x1024_c64_tp8_ep1_3,Llama-3.1-70B,h100_sxm,vllm,,fp8,,,8"
        ",1,1,8,1,1024,1024,64,170.0,19.0",
    )
    harness = [r.spec.scheduler_recv_interval for r in prepare(lines, harness=True).rows]
    assert harness == [30, 10, 10, 1, 1]
    assert [r.spec.scheduler_recv_interval for r in prepare(lines).rows] == [1] * 5
