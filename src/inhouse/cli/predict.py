"""Predict mean TTFT and TPOT of closed-loop benchmark runs with the engine model.

Batch form: `inhouse predict --csv IN.csv --out OUT.csv` (columns model, system, backend,
precision, tp, isl, osl, concurrency; others are kept; adds pred_ttft_ms, pred_tpot_ms and
pred_error). Single form: `inhouse predict --model M --gpu G --tp N --quant Q --isl I --osl O
--concurrency C [--json]`.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

from inhouse.engine.build import ReplicaSpec, build_replica
from inhouse.errors import DoesNotFitError, SpecError
from inhouse.predict import run_closed_loop
from inhouse.spec.knobs import VLLM_SERVE_DEFAULTS

COMMAND = "predict"
HELP = "predict mean TTFT/TPOT of closed-loop runs (one shape, or every row of a CSV)"
REQUIRED_COLUMNS = ("model", "system", "backend", "precision", "tp", "isl", "osl", "concurrency")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--csv", type=Path, help="input CSV with one benchmark shape per row")
    parser.add_argument("--out", type=Path, help="output CSV (batch form)")
    parser.add_argument("--model", help="model name, Hugging Face id or local model dir")
    parser.add_argument("--gpu", default="h100_sxm")
    parser.add_argument("--backend", default="vllm", help="vllm or sglang")
    parser.add_argument("--quant", default="bf16", help="bf16, fp8, int8, w4a16, fp4")
    parser.add_argument("--kv-dtype", default="auto")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--isl", type=int, help="input tokens per request")
    parser.add_argument("--osl", type=int, help="output tokens per request")
    parser.add_argument("--concurrency", type=int, help="closed-loop clients")
    parser.add_argument("--num-requests", type=int, help="benchmark length (default 10 x C)")
    parser.add_argument("--json", action="store_true", help="print JSON (single form)")


def run(args: argparse.Namespace) -> int:
    if args.csv:
        if not args.out:
            raise SpecError("--csv needs --out OUT.csv")
        return _run_batch(args.csv, args.out)
    missing = [f"--{n}" for n in ("model", "isl", "osl", "concurrency") if getattr(args, n) is None]
    if missing:
        raise SpecError(f"missing {', '.join(missing)} (or use --csv IN.csv --out OUT.csv)")
    for name in ("tp", "isl", "osl", "concurrency"):
        if getattr(args, name) <= 0:
            raise SpecError(f"--{name} must be a positive integer, got {getattr(args, name)}")
    knobs = VLLM_SERVE_DEFAULTS.model_copy(update={"kv_cache_dtype": args.kv_dtype})
    spec = ReplicaSpec(args.model, args.gpu, args.tp, args.quant, args.backend, knobs)
    replica = build_replica(spec)
    result = run_closed_loop(replica, args.isl, args.osl, args.concurrency, args.num_requests)
    out = {
        "model": replica.model.name,
        "gpu": replica.gpu.name,
        "backend": args.backend,
        "quant": replica.quant.name,
        "tp": args.tp,
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


def predict_row(row: dict[str, str]) -> dict[str, str]:
    """One CSV row in, the same row with pred_ttft_ms, pred_tpot_ms and pred_error out."""
    out = dict(row)
    out.update(pred_ttft_ms="", pred_tpot_ms="", pred_error="")
    try:
        spec = ReplicaSpec(
            row["model"],
            row["system"],
            int(row["tp"]),
            row["precision"],
            row["backend"],
            VLLM_SERVE_DEFAULTS,
        )
        replica = build_replica(spec)
        result = run_closed_loop(replica, int(row["isl"]), int(row["osl"]), int(row["concurrency"]))
    except DoesNotFitError as exc:
        out["pred_error"] = f"does not fit: {exc}"
        return out
    except (SpecError, ValueError) as exc:
        out["pred_error"] = str(exc)
        return out
    out["pred_ttft_ms"] = f"{result.mean_ttft_ms:.3f}"
    out["pred_tpot_ms"] = f"{result.mean_tpot_ms:.3f}"
    return out


def _run_batch(in_path: Path, out_path: Path) -> int:
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
    results = [predict_row(row) for row in rows]
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
