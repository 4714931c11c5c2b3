"""Predict mean TTFT and TPOT of closed-loop benchmark runs with the engine model.

Batch form: `inhouse predict --csv IN.csv --out OUT.csv` (columns model, system, backend,
precision, tp, isl, osl, concurrency; optional layout and quantization columns pp,
attention_dp, moe_tp, moe_ep, gemm_quant, moe_quant, SGLang's scheduler_recv_interval and
protocol columns num_requests, isl_std, osl_std; others are kept; adds pred_ttft_ms,
pred_tpot_ms and pred_error). Single form: `inhouse predict --model M --gpu G --tp N
--quant Q --isl I --osl O --concurrency C [--json]`.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import replace
from pathlib import Path

from inhouse.engine.build import ReplicaSpec, build_replica
from inhouse.errors import DoesNotFitError, SpecError
from inhouse.predict import (
    AIPERF_SILICON,
    INFERENCEX_SWEEP,
    VLLM_BENCH,
    BenchmarkProtocol,
    run_closed_loop,
)
from inhouse.spec.knobs import VLLM_SERVE_DEFAULTS, EngineKnobs
from inhouse.spec.load import resolve_local_models

COMMAND = "predict"
HELP = "predict mean TTFT/TPOT of closed-loop runs (one shape, or every row of a CSV)"
REQUIRED_COLUMNS = ("model", "system", "backend", "precision", "tp", "isl", "osl", "concurrency")
# Optional columns: a row without them (or with them empty) is plain TP, uniformly quantized.
LAYOUT_COLUMNS = ("pp", "attention_dp", "moe_tp", "moe_ep")
QUANT_COLUMNS = ("gemm_quant", "moe_quant")
PROTOCOLS = {"vllm-bench": VLLM_BENCH, "aiperf": AIPERF_SILICON, "inferencex": INFERENCEX_SWEEP}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--csv", type=Path, help="input CSV with one benchmark shape per row")
    parser.add_argument("--out", type=Path, help="output CSV (batch form)")
    parser.add_argument("--model", help="model name, Hugging Face id or local model dir")
    parser.add_argument("--gpu", default="h100_sxm")
    parser.add_argument("--backend", default="vllm", help="vllm or sglang")
    parser.add_argument("--quant", default="bf16", help="bf16, fp8, int8, w4a16, fp4")
    parser.add_argument("--kv-dtype", default="auto")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--attention-dp", type=int, default=1, help="data-parallel attention")
    parser.add_argument("--moe-ep", type=int, default=0, help="expert-parallel degree (MoE)")
    parser.add_argument(
        "--scheduler-recv-interval",
        type=int,
        default=1,
        help="SGLang's --scheduler-recv-interval: decode steps between reads of new requests",
    )
    parser.add_argument("--isl", type=int, help="input tokens per request")
    parser.add_argument("--osl", type=int, help="output tokens per request")
    parser.add_argument("--concurrency", type=int, help="closed-loop clients")
    parser.add_argument(
        "--protocol",
        choices=sorted(PROTOCOLS),
        default="vllm-bench",
        help="benchmark protocol: vllm-bench (10 waves, first wave counted), aiperf "
        "(20 waves after a drained warm-up, exact lengths) or inferencex (10 waves after a "
        "drained warm-up, lengths uniform on [0.8 L, L]: SemiAnalysis InferenceX's sweeps)",
    )
    parser.add_argument("--num-requests", type=int, help="measured requests (default: waves x C)")
    parser.add_argument("--isl-std", type=float, default=0.0, help="spread of prompt lengths")
    parser.add_argument("--osl-std", type=float, default=0.0, help="spread of output lengths")
    parser.add_argument(
        "--min-length-ratio",
        type=float,
        help="draw every prompt and output length uniformly from [int(R x L), L] "
        "(benchmark_serving.py's --random-range-ratio as InferenceX runs it; default: the "
        "protocol's)",
    )
    parser.add_argument("--server-cap", type=int, help="requests the server holds at once")
    parser.add_argument(
        "--dephased-start",
        action="store_true",
        help="clients enter the measurement spread over one request cycle, not all at once",
    )
    parser.add_argument("--json", action="store_true", help="print JSON (single form)")


def _protocol(args: argparse.Namespace) -> BenchmarkProtocol:
    base = PROTOCOLS[args.protocol]
    ratio = base.min_length_ratio if args.min_length_ratio is None else args.min_length_ratio
    return replace(
        base,
        min_length_ratio=ratio,
        num_requests=args.num_requests,
        isl_std=args.isl_std,
        osl_std=args.osl_std,
        server_cap=args.server_cap,
        dephased_start=args.dephased_start or PROTOCOLS[args.protocol].dephased_start,
    )


def run(args: argparse.Namespace) -> int:
    _protocol(args).check()  # once, before any row
    if args.csv:
        if not args.out:
            raise SpecError("--csv needs --out OUT.csv")
        return _run_batch(args.csv, args.out, _protocol(args))
    missing = [f"--{n}" for n in ("model", "isl", "osl", "concurrency") if getattr(args, n) is None]
    if missing:
        raise SpecError(f"missing {', '.join(missing)} (or use --csv IN.csv --out OUT.csv)")
    for name in ("tp", "isl", "osl", "concurrency", "attention_dp"):
        if getattr(args, name) <= 0:
            flag = name.replace("_", "-")
            raise SpecError(f"--{flag} must be a positive integer, got {getattr(args, name)}")
    spec = ReplicaSpec(
        args.model,
        args.gpu,
        args.tp,
        args.quant,
        args.backend,
        serve_knobs(args.kv_dtype),
        attention_dp=args.attention_dp,
        moe_ep=args.moe_ep,
        scheduler_recv_interval=args.scheduler_recv_interval,
    )
    resolve_local_models((spec.model,))
    replica = build_replica(spec)
    protocol = _protocol(args)
    result = run_closed_loop(replica, args.isl, args.osl, args.concurrency, protocol=protocol)
    out = {
        "model": replica.model.name,
        "gpu": replica.gpu.name,
        "backend": args.backend,
        "quant": replica.quant.name,
        "tp": args.tp,
        "layout": replica.layout.describe(),
        "isl": args.isl,
        "osl": args.osl,
        "concurrency": args.concurrency,
        "mean_ttft_ms": round(result.mean_ttft_ms, 3),
        "mean_tpot_ms": round(result.mean_tpot_ms, 3),
        "output_throughput": round(result.output_throughput, 1),
        "kv_cache_tokens": replica.memory.kv_tokens,
        "num_preemptions": result.num_preemptions,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for key, value in out.items():
            print(f"{key:>18}: {value}")
    return 0


def _int_column(row: dict[str, str], name: str, default: int) -> int:
    text = (row.get(name) or "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise SpecError(f"column {name}: {text!r} is not an integer") from None


def _float_column(row: dict[str, str], name: str, default: float) -> float:
    text = (row.get(name) or "").strip()
    if not text:
        return default
    try:
        return float(text)
    except ValueError:
        raise SpecError(f"column {name}: {text!r} is not a number") from None


def serve_knobs(kv_cache_dtype: str) -> EngineKnobs:
    """The knobs benchmark rows run with: `vllm serve`'s defaults, the row's KV cache dtype."""
    return VLLM_SERVE_DEFAULTS.model_copy(update={"kv_cache_dtype": kv_cache_dtype})


def replica_spec_of_row(row: dict[str, str]) -> ReplicaSpec:
    """The replica a CSV row names, its layout and quantization columns included."""

    def text(name: str) -> str:
        return (row.get(name) or "").strip()

    return ReplicaSpec(
        text("model"),
        text("system"),
        _int_column(row, "tp", 1),
        text("precision"),
        text("backend"),
        serve_knobs(text("kv_dtype") or "auto"),
        pp=_int_column(row, "pp", 1),
        attention_dp=_int_column(row, "attention_dp", 1),
        moe_tp=_int_column(row, "moe_tp", 0),
        moe_ep=_int_column(row, "moe_ep", 0),
        gemm_quant=text("gemm_quant"),
        moe_quant=text("moe_quant"),
        scheduler_recv_interval=_int_column(row, "scheduler_recv_interval", 1),
    )


def protocol_of_row(row: dict[str, str], base: BenchmarkProtocol) -> BenchmarkProtocol:
    """The protocol, with a row's own num_requests, isl_std and osl_std where it has them."""
    num = _int_column(row, "num_requests", 0)
    return replace(
        base,
        num_requests=num or base.num_requests,
        isl_std=_float_column(row, "isl_std", base.isl_std),
        osl_std=_float_column(row, "osl_std", base.osl_std),
    )


def predict_row(row: dict[str, str], protocol: BenchmarkProtocol = VLLM_BENCH) -> dict[str, str]:
    """One CSV row in, the same row with pred_ttft_ms, pred_tpot_ms and pred_error out."""
    out = dict(row)
    out.update(pred_ttft_ms="", pred_tpot_ms="", pred_error="")
    try:
        isl, osl, concurrency = (_int_column(row, n, 0) for n in ("isl", "osl", "concurrency"))
        if min(isl, osl, concurrency) <= 0:
            raise SpecError("isl, osl and concurrency must be positive integers")
        spec = replica_spec_of_row(row)
        resolve_local_models((spec.model,))
        replica = build_replica(spec)
        result = run_closed_loop(
            replica, isl, osl, concurrency, protocol=protocol_of_row(row, protocol)
        )
    except DoesNotFitError as exc:
        out["pred_error"] = f"does not fit: {exc}"
        return out
    except (SpecError, ValueError) as exc:
        out["pred_error"] = str(exc)
        return out
    out["pred_ttft_ms"] = f"{result.mean_ttft_ms:.3f}"
    out["pred_tpot_ms"] = f"{result.mean_tpot_ms:.3f}"
    return out


def _run_batch(in_path: Path, out_path: Path, protocol: BenchmarkProtocol) -> int:
    try:
        handle = in_path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read {in_path}: {exc.strerror}") from exc
    with handle:
        reader = csv.DictReader(handle)
        columns = list(reader.fieldnames or [])
        missing = [c for c in REQUIRED_COLUMNS if c not in columns]
        if missing:
            raise SpecError(f"{in_path}: missing column(s) {', '.join(missing)}")
        rows = list(reader)
    results = [predict_row(row, protocol) for row in rows]
    fields = columns + [
        c for c in ("pred_ttft_ms", "pred_tpot_ms", "pred_error") if c not in columns
    ]
    with out_path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(results)
    failed = sum(1 for r in results if r["pred_error"])
    print(
        f"predicted {len(results) - failed} of {len(results)} rows -> {out_path}", file=sys.stderr
    )
    return 0
