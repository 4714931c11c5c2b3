import numpy as np
import pytest

from inhouse.perf import StepModel, StepShape, get_engine_constants
from inhouse.perf.coefficients import compute_coefficients
from inhouse.perf.memory import weight_bytes
from inhouse.perf.step import step_seconds
from inhouse.spec import get_gpu, get_model, normalize_quant
from inhouse.spec.parallel import ParallelLayout
from inhouse.spec.quant import resolve_weight_quants


def _model(name: str = "Llama-3.1-70B", gpu: str = "h100_sxm", tp: int = 4, quant: str = "fp8"):
    consts = get_engine_constants("vllm")
    return StepModel(get_model(name), get_gpu(gpu), tp, normalize_quant(quant), consts), consts


def decode_shape(num_seqs: int, ctx: int) -> StepShape:
    total = num_seqs * ctx
    return StepShape(num_seqs, num_seqs, num_seqs, total, total + num_seqs, 0, num_seqs, total)


def test_single_decode_step_is_weights_over_bandwidth_plus_overheads() -> None:
    step, c = _model(tp=1, name="Llama-3.1-8B", quant="bf16")
    model, gpu = get_model("Llama-3.1-8B"), get_gpu("h100_sxm")
    t = step.step_time(decode_shape(1, 0))
    read_s = weight_bytes(model, normalize_quant("bf16")) - model.lm_head_params * 2
    read_s /= c.eta_bw * gpu.hbm_bw_bytes_s
    overhead_s = c.step_overhead_s + c.layer_overhead_s * model.num_layers + c.seq_overhead_s
    assert t > read_s + overhead_s
    assert t == pytest.approx(read_s + overhead_s, rel=0.02)


def test_decode_time_grows_with_context_and_batch() -> None:
    step, _ = _model()
    assert step.step_time(decode_shape(8, 4000)) > step.step_time(decode_shape(8, 1000))
    assert step.step_time(decode_shape(64, 1000)) > step.step_time(decode_shape(8, 1000))


def test_decode_coefficients_match_step_time_for_memory_bound_decode() -> None:
    step, _ = _model()
    base, per_ctx = step.decode_coefficients(32)
    assert step.decode_is_linear(32, 32 * 2000)
    assert base + per_ctx * 32 * 2000 == pytest.approx(step.step_time(decode_shape(32, 2000)))


def test_prefill_is_compute_bound_and_scales_with_tokens() -> None:
    step, _ = _model()
    t1 = step.step_time(StepShape(1, 4096, 1, 0, 4096 * 4097 // 2))
    t2 = step.step_time(StepShape(1, 8192, 1, 0, 8192 * 8193 // 2))
    assert 1.9 < t2 / t1 < 2.4  # linear GEMMs plus a quadratic attention term


def test_more_tp_is_faster_per_step_but_not_linearly() -> None:
    t4 = _model(tp=4)[0].step_time(decode_shape(16, 1000))
    t8 = _model(tp=8)[0].step_time(decode_shape(16, 1000))
    assert t8 < t4 < 2 * t8


def test_h200_decodes_faster_than_h100_from_bandwidth_alone() -> None:
    h100 = _model(gpu="h100_sxm")[0].step_time(decode_shape(64, 2000))
    h200 = _model(gpu="h200_sxm")[0].step_time(decode_shape(64, 2000))
    assert h200 < h100


def test_moe_reads_only_the_experts_it_touches() -> None:
    step, _ = _model(name="Qwen3-235B-A22B", tp=8, quant="fp8")
    one = step.step_time(decode_shape(1, 100))
    many = step.step_time(decode_shape(256, 100))
    # one token touches 8 of 128 experts per layer; 256 tokens touch nearly all of them
    assert many > 3 * one


# --- the formula once, layouts, MoE, MLA, sparse and linear attention --------------------

SHAPES = [
    StepShape(1, 1, 1, 100, 101, 0, 1, 100),
    StepShape(64, 64, 64, 64 * 3000, 64 * 3001, 0, 64, 64 * 3000),
    StepShape(9, 2056, 9, 8 * 900, 8 * 901 + 2048 * 2049 // 2, 0, 8, 8 * 900),
    StepShape(1, 8192, 1, 0, 8192 * 8193 // 2),
]


def _moe(name: str, quant: str, gemm: str, moe: str, layout: ParallelLayout, gpu: str = "b200_sxm"):
    model = get_model(name)
    quants = resolve_weight_quants(quant, model.is_moe, gemm, moe)
    return StepModel(model, get_gpu(gpu), layout, quants, get_engine_constants("sglang"))


@pytest.mark.parametrize("name", ["Llama-3.1-70B", "DeepSeek-R1", "GLM-5", "Qwen3.5-397B-A17B"])
def test_numpy_and_scalar_evaluations_are_the_same_formula(name: str) -> None:
    """The fit evaluates recorded steps as arrays; the engine one by one: same numbers."""
    step = _moe(name, "fp8", "fp8", "fp8", ParallelLayout(tp=8))
    scalar = [step.step_time(s) for s in SHAPES]
    fields = ("num_seqs", "num_tokens", "num_sampled", "ctx_tokens", "attn_pairs",
              "host_load_tokens", "num_decodes", "decode_ctx_tokens")  # fmt: skip
    arrays = [np.array([float(getattr(s, f)) for s in SHAPES]) for f in fields]
    vector = step_seconds(step.coefficients, *arrays, np.maximum, np.minimum)
    assert list(vector) == pytest.approx(scalar, rel=1e-12)


def test_fp4_on_hopper_is_4_bit_storage_and_16_bit_compute() -> None:
    """gpt-oss's MXFP4 experts on H100: the bytes of 4 bits, the FLOP rate of BF16."""
    model, gpu = get_model("gpt-oss-120b"), get_gpu("h100_sxm")
    consts = get_engine_constants("vllm")
    fp4 = compute_coefficients(model, gpu, 2, normalize_quant("fp4"), consts)
    bf16 = compute_coefficients(model, gpu, 2, normalize_quant("bf16"), consts)
    assert fp4.expert_flop_s == pytest.approx(bf16.expert_flop_s)
    # the bytes of 4 bits, read at the weight-only kernels' share of the bandwidth
    assert fp4.expert_weight_s == pytest.approx(
        bf16.expert_weight_s * 0.5625 / 2 / consts.eta_dequant
    )
    b200 = compute_coefficients(model, get_gpu("b200_sxm"), 2, normalize_quant("fp4"), consts)
    b200_bf16 = compute_coefficients(model, get_gpu("b200_sxm"), 2, normalize_quant("bf16"), consts)
    assert b200.expert_weight_s == pytest.approx(b200_bf16.expert_weight_s * 0.5625 / 2)


def test_a_small_batch_touches_few_experts_and_a_large_one_all() -> None:
    step = _moe("DeepSeek-R1", "fp8", "fp8", "fp8", ParallelLayout(tp=8, moe_ep=8))
    c = step.coefficients
    one, many = decode_shape(1, 500), decode_shape(512, 500)
    expert_one = c.expert_weight_s * c.num_experts * (1 - (1 - 8 / 256) ** 1)
    assert expert_one == pytest.approx(c.expert_weight_s * 8)
    assert step.step_time(many) > 2 * step.step_time(one)


def test_expert_parallel_layout_reads_the_same_experts_per_gpu_as_moe_tp() -> None:
    ep = _moe("DeepSeek-R1", "fp8", "fp8", "fp8", ParallelLayout(tp=8, moe_ep=8))
    tp = _moe("DeepSeek-R1", "fp8", "fp8", "fp8", ParallelLayout(tp=8))
    assert ep.coefficients.expert_weight_s == pytest.approx(tp.coefficients.expert_weight_s)


def test_mla_decode_attends_in_its_absorbed_form() -> None:
    """Decode costs 2(512+64) + 2·512 FLOPs per head and pair, prefill 2·192 + 2·128."""
    c = _moe("DeepSeek-V3", "fp8", "fp8", "fp8", ParallelLayout(tp=8)).coefficients
    assert c.decode_pair_s / c.prefill_pair_s == pytest.approx(2176 / 640)


def test_sparse_attention_stops_reading_latents_past_topk() -> None:
    step = _moe("GLM-5", "fp8", "fp8", "fp8", ParallelLayout(tp=8))
    c = step.coefficients
    short = step.step_time(decode_shape(16, 1000))
    long = step.step_time(decode_shape(16, 16000))
    # past 2048 only the indexer's keys grow with context
    slope = (step.step_time(decode_shape(16, 17000)) - long) / (16 * 1000)
    assert slope == pytest.approx(c.index_s_per_ctx, rel=0.01)
    assert long > short
    assert step.linear_ctx_limit(16, 16 * 1000) == 16 * 2048


def test_linear_attention_reads_and_writes_each_sequences_state() -> None:
    step = _moe("Qwen3.5-397B-A17B", "fp8", "fp8", "fp8", ParallelLayout(tp=8))
    c = step.coefficients
    assert c.state_s_per_seq > 0
    assert step.step_time(decode_shape(64, 10)) - step.step_time(decode_shape(32, 10)) > (
        32 * c.state_s_per_seq
    )


def test_attention_dp_runs_attention_on_the_busiest_group_and_gathers_for_experts() -> None:
    dp = _moe("DeepSeek-R1", "fp8", "fp8", "fp8", ParallelLayout(tp=1, attention_dp=8, moe_ep=8))
    tp = _moe("DeepSeek-R1", "fp8", "fp8", "fp8", ParallelLayout(tp=8, moe_ep=8))
    assert dp.coefficients.comm_s_per_token > 0 and tp.coefficients.comm_s_per_token == 0
    # a lone sequence on one group: no help from the other seven
    assert dp.step_time(decode_shape(1, 4000)) > tp.step_time(decode_shape(1, 4000))
    assert not dp.decode_is_linear(4, 4000) and dp.decode_is_linear(64, 64 * 4000)


def test_collectives_beyond_the_nvlink_domain_use_the_network() -> None:
    model, consts = get_model("DeepSeek-R1"), get_engine_constants("sglang")
    quants = resolve_weight_quants("fp8", True, "fp8", "fp8")
    within = compute_coefficients(model, get_gpu("b200_sxm"), 8, quants, consts)
    across = compute_coefficients(model, get_gpu("b200_sxm"), 16, quants, consts)
    rack = compute_coefficients(model, get_gpu("gb200"), 16, quants, consts)
    assert across.comm_s_per_rank_token > 10 * within.comm_s_per_rank_token
    assert rack.comm_s_per_rank_token < 2 * within.comm_s_per_rank_token
