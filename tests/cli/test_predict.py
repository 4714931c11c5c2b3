import csv
import json
from pathlib import Path

import pytest

from inhouse.cli.main import main


def test_single_form_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "predict", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100_sxm",
            "--tp", "1", "--quant", "bf16", "--isl", "512", "--osl", "64",
            "--concurrency", "4", "--json",
        ]
    )  # fmt: skip
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == "Llama-3.1-8B"
    assert out["mean_ttft_ms"] > 0
    assert 3 < out["mean_tpot_ms"] < 30


def test_unknown_model_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["predict", "--model", "gpt-17", "--isl", "1", "--osl", "1", "--concurrency", "1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "unknown model 'gpt-17'" in err
    assert "Llama-3.1-70B" in err


def test_unknown_quant_names_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["predict", "--model", "Llama-3.1-8B", "--quant", "fp3",
         "--isl", "1", "--osl", "1", "--concurrency", "1"]
    )  # fmt: skip
    assert code == 2
    assert "unknown quantization 'fp3'; known:" in capsys.readouterr().err


def test_batch_form_keeps_columns_and_marks_rows_that_do_not_fit(tmp_path: Path) -> None:
    src = tmp_path / "in.csv"
    src.write_text(
        "model,system,backend,precision,tp,isl,osl,concurrency,note\n"
        "Llama-3.1-8B,h100_sxm,vllm,bf16,1,256,32,2,keep-me\n"
        "Llama-3.1-70B,h100_sxm,vllm,bf16,1,256,32,2,too-big\n"
        "Llama-3.1-8B,h100_sxm,vllm,fp3,1,256,32,2,bad-quant\n",
        encoding="utf-8",
    )
    out = tmp_path / "out.csv"
    assert main(["predict", "--csv", str(src), "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.read_text(encoding="utf-8").splitlines()))
    assert [r["note"] for r in rows] == ["keep-me", "too-big", "bad-quant"]
    assert float(rows[0]["pred_ttft_ms"]) > 0 and float(rows[0]["pred_tpot_ms"]) > 0
    assert rows[0]["pred_error"] == ""
    assert rows[1]["pred_ttft_ms"] == "" and rows[1]["pred_error"].startswith("does not fit")
    assert "unknown quantization" in rows[2]["pred_error"]


def test_batch_form_names_missing_columns(tmp_path: Path, capsys) -> None:
    src = tmp_path / "in.csv"
    src.write_text("model,tp\nLlama-3.1-8B,1\n", encoding="utf-8")
    assert main(["predict", "--csv", str(src), "--out", str(tmp_path / "o.csv")]) == 2
    assert "missing column(s) system, backend, precision" in capsys.readouterr().err


def test_same_inputs_same_prediction(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["predict", "--model", "Qwen3-32B", "--tp", "2", "--isl", "2048",
            "--osl", "128", "--concurrency", "16", "--json"]  # fmt: skip
    main(args)
    first = capsys.readouterr().out
    main(args)
    assert capsys.readouterr().out == first


def test_batch_form_reads_layout_and_quantization_columns(tmp_path: Path) -> None:
    src = tmp_path / "in.csv"
    src.write_text(
        "model,system,backend,precision,gemm_quant,moe_quant,tp,pp,attention_dp,moe_tp,moe_ep,"
        "isl,osl,concurrency\n"
        "MiniMax-M2.5,b200_sxm,vllm,fp8,fp8,fp8,4,1,1,1,4,1024,64,8\n"
        "MiniMax-M2.5,b200_sxm,vllm,fp8,fp8,fp8,4,,,,,1024,64,8\n"
        "DeepSeek-R1,b200_sxm,sglang,fp4,nvfp4,nvfp4,4,1,1,1,4,1024,64,8\n"
        "DeepSeek-R1,b200_sxm,sglang,fp4,nvfp4,nvfp4,4,2,1,1,4,1024,64,8\n"
        "DeepSeek-R1,b200_sxm,sglang,fp4,nvfp4,nvfp4,4,1,1,4,4,1024,64,8\n"
        "DeepSeek-R1,b200_sxm,sglang,fp4,nvfp4,nvfp4,4,1,1,x,4,1024,64,8\n",
        encoding="utf-8",
    )
    out = tmp_path / "out.csv"
    assert main(["predict", "--csv", str(src), "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.read_text(encoding="utf-8").splitlines()))
    assert all(float(r["pred_tpot_ms"]) > 0 for r in rows[:3])
    # NOTE: expert parallel and MoE-TP over the same GPUs read the same bytes and run the same
    # tokens per expert; the model does not tell them apart (no expert load imbalance)
    assert rows[0]["pred_tpot_ms"] == rows[1]["pred_tpot_ms"]
    assert "pipeline parallelism is not modelled" in rows[3]["pred_error"]
    assert "moe_tp=4 x moe_ep=4 must equal tp=4" in rows[4]["pred_error"]
    assert "column moe_tp: 'x' is not an integer" in rows[5]["pred_error"]


def test_single_form_takes_a_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["predict", "--model", "Llama-3.1-8B", "--isl", "2048", "--osl", "32",
            "--concurrency", "32", "--json"]  # fmt: skip
    main([*base, "--protocol", "vllm-bench"])
    ten = json.loads(capsys.readouterr().out)
    main([*base, "--protocol", "aiperf"])
    twenty = json.loads(capsys.readouterr().out)
    assert twenty["mean_ttft_ms"] < ten["mean_ttft_ms"]  # the first wave weighs half as much


def test_the_inferencex_protocol_draws_lengths_from_a_range(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ten waves after a drained warm-up with lengths on [0.8 L, L]: shorter prompts and
    clients that drift apart, so less queueing than aiperf's exact lengths; a ratio of 1
    is the exact-length run."""
    base = ["predict", "--model", "Llama-3.1-8B", "--isl", "4096", "--osl", "256",
            "--concurrency", "16", "--json"]  # fmt: skip
    main([*base, "--protocol", "inferencex"])
    ranged = json.loads(capsys.readouterr().out)
    main([*base, "--protocol", "inferencex", "--min-length-ratio", "1"])
    exact = json.loads(capsys.readouterr().out)
    assert ranged["mean_ttft_ms"] < 0.9 * exact["mean_ttft_ms"]


def test_single_form_takes_a_dephased_start(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["predict", "--model", "Llama-3.1-8B", "--isl", "2048", "--osl", "32",
            "--concurrency", "32", "--json"]  # fmt: skip
    main(base)
    locked = json.loads(capsys.readouterr().out)
    main([*base, "--dephased-start"])
    dephased = json.loads(capsys.readouterr().out)
    assert dephased["mean_ttft_ms"] < locked["mean_ttft_ms"]  # no burst of 32 prompts measured


SHAPE = ["predict", "--model", "Llama-3.1-8B", "--gpu", "h100_sxm", "--isl", "1000",
         "--osl", "100", "--concurrency", "4"]  # fmt: skip


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--isl", "200000"], "isl 200000, osl 100: This model's maximum context length is 131072"),
        (["--osl", "200000"], "isl 1000, osl 200000: This model's maximum context length is"),
        (["--server-cap", "0"], "server_cap 0: a server holds at least 1 request at once"),
        (["--isl-std", "-1"], "isl_std -1.0: a spread or pause is a finite number >= 0"),
        (["--osl-std", "nan"], "osl_std nan: a spread or pause is a finite number >= 0"),
        (["--num-requests", "0"], "num_requests 0: give at least 1 measured request"),
        (["--min-length-ratio", "0"], "min_length_ratio 0.0: the shortest length as a share"),
        (
            ["--protocol", "inferencex", "--osl-std", "5"],
            "a normal one (isl_std, osl_std) with min_length_ratio 1 (--min-length-ratio 1)",
        ),
        (["--concurrency", "100000000"], "concurrency 100000000: at most 65,536 clients"),
        (["--scheduler-recv-interval", "0"], "scheduler_recv_interval=0: SGLang's"),
        (["--scheduler-recv-interval", "30"], "only SGLang skips receiving requests"),
    ],
)
def test_a_shape_or_protocol_no_run_can_have_is_a_clear_error(
    extra: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each of these was an AssertionError traceback, a silent default (num_requests 0, a
    negative spread) or, for 1e8 clients, a simulation of days."""
    assert main([*SHAPE, *extra]) == 2
    assert says in capsys.readouterr().err


def test_a_batch_row_past_the_context_is_marked_and_the_rest_predicted(tmp_path: Path) -> None:
    src = tmp_path / "in.csv"
    src.write_text(
        "model,system,backend,precision,tp,isl,osl,concurrency,num_requests\n"
        "Llama-3.1-8B,h100_sxm,vllm,bf16,1,200000,32,2,\n"
        "Llama-3.1-8B,h100_sxm,vllm,bf16,1,256,32,2,-3\n"
        "Llama-3.1-8B,h100_sxm,vllm,bf16,1,256,32,2,\n",
        encoding="utf-8",
    )
    out = tmp_path / "out.csv"
    assert main(["predict", "--csv", str(src), "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.read_text(encoding="utf-8").splitlines()))
    assert rows[0]["pred_error"].startswith("isl 200000, osl 32: This model's maximum context")
    assert rows[1]["pred_error"].startswith("num_requests -3: give at least 1 measured request")
    assert rows[2]["pred_error"] == "" and float(rows[2]["pred_ttft_ms"]) > 0


def test_sglangs_recv_interval_lengthens_ttft_in_both_forms(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A prompt waits for the scheduler's next read, about half the interval in decode steps,
    once the clients drift apart (lengths on a range); clients in lockstep find the engine
    idle, which reads at once."""
    base = ["predict", "--model", "Llama-3.1-8B", "--backend", "sglang", "--isl", "1024",
            "--osl", "256", "--concurrency", "16", "--protocol", "inferencex",
            "--json"]  # fmt: skip
    assert main(base) == 0
    every = json.loads(capsys.readouterr().out)
    assert main([*base, "--scheduler-recv-interval", "30"]) == 0
    thirty = json.loads(capsys.readouterr().out)
    steps = (thirty["mean_ttft_ms"] - every["mean_ttft_ms"]) / every["mean_tpot_ms"]
    assert 5 < steps < 30
    src = tmp_path / "in.csv"
    src.write_text(
        "model,system,backend,precision,tp,isl,osl,concurrency,scheduler_recv_interval\n"
        "Llama-3.1-8B,h100_sxm,sglang,bf16,1,1024,256,16,\n"
        "Llama-3.1-8B,h100_sxm,sglang,bf16,1,1024,256,16,30\n"
        "Llama-3.1-8B,h100_sxm,vllm,bf16,1,1024,256,16,30\n",
        encoding="utf-8",
    )
    out = tmp_path / "out.csv"
    assert main(["predict", "--csv", str(src), "--out", str(out), "--protocol", "inferencex"]) == 0
    rows = list(csv.DictReader(out.read_text(encoding="utf-8").splitlines()))
    assert float(rows[1]["pred_ttft_ms"]) > float(rows[0]["pred_ttft_ms"]) + 50
    assert "only SGLang skips receiving requests" in rows[2]["pred_error"]
