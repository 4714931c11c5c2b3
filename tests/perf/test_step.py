import pytest

from inhouse.perf import StepModel, StepShape, get_engine_constants
from inhouse.perf.memory import weight_bytes
from inhouse.spec import get_gpu, get_model, normalize_quant


def _model(name: str = "Llama-3.1-70B", gpu: str = "h100_sxm", tp: int = 4, quant: str = "fp8"):
    consts = get_engine_constants("vllm")
    return StepModel(get_model(name), get_gpu(gpu), tp, normalize_quant(quant), consts), consts


def decode_shape(num_seqs: int, ctx: int) -> StepShape:
    return StepShape(num_seqs, num_seqs, num_seqs, num_seqs * ctx, num_seqs * (ctx + 1))


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
