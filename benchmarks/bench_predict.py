"""Accuracy and speed of `inhouse predict` on the calibration file.

    python benchmarks/bench_predict.py [--csv data/calibration_h100_dense.csv]

Prints median absolute percentage error of mean TTFT and mean TPOT per backend and per
(backend, TP), the worst rows, the wall time of predicting the whole file, and the speed of one
10,000-request closed-loop run (1k in / 1k out, concurrency 64, Llama-3.1-70B FP8 TP4 on H100).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from inhouse.cli.predict import predict_row
from inhouse.engine import ReplicaSpec, build_replica
from inhouse.predict import run_closed_loop
from inhouse.spec.knobs import VLLM_SERVE_DEFAULTS

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CSV = ROOT / "data" / "calibration_h100_dense.csv"
COMMAND = "python benchmarks/bench_predict.py"


def ape(pred: str, measured: str) -> float:
    return abs(float(pred) / float(measured) - 1.0)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--worst", type=int, default=8)
    args = parser.parse_args()
    rows = list(csv.DictReader(args.csv.open(newline="", encoding="utf-8")))

    started = time.perf_counter()
    results = [predict_row(row) for row in rows]
    wall_s = time.perf_counter() - started

    groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
    scored = []
    for row in results:
        if row["pred_error"]:
            print(f"no prediction: {row['model']} tp{row['tp']}: {row['pred_error'][:120]}")
            continue
        errors = (
            ape(row["pred_ttft_ms"], row["ttft_ms"]),
            ape(row["pred_tpot_ms"], row["tpot_ms"]),
        )
        scored.append((row, errors))
        groups[row["backend"]].append(errors)
        groups[f"{row['backend']} tp{row['tp']}"].append(errors)
    groups["all"] = [e for _, e in scored]

    print(f"\n{'group':<14} {'rows':>5} {'TTFT MdAPE':>11} {'TPOT MdAPE':>11}")
    for name in sorted(groups, key=lambda g: (g != "all", g)):
        errs = groups[name]
        ttft = 100 * statistics.median(e[0] for e in errs)
        tpot = 100 * statistics.median(e[1] for e in errs)
        print(f"{name:<14} {len(errs):>5} {ttft:>10.1f}% {tpot:>10.1f}%")

    for index, label in ((0, "TTFT"), (1, "TPOT")):
        print(f"\nworst {label} rows:")
        worst = sorted(scored, key=lambda s: -s[1][index])[: args.worst]
        for row, _ in worst:
            key = "ttft_ms" if index == 0 else "tpot_ms"
            print(
                f"  {row['model']:<14} {row['backend']:<6} {row['precision']} tp{row['tp']} "
                f"{row['isl']}/{row['osl']} c{row['concurrency']:<4} "
                f"measured {float(row[key]):9.1f}"
                f"  predicted {float(row['pred_' + key]):9.1f}  "
                f"({100 * (float(row['pred_' + key]) / float(row[key]) - 1):+.0f}%)"
            )

    print(f"\npredict over {len(rows)} rows: {wall_s:.1f} s wall")

    replica = build_replica(
        ReplicaSpec("Llama-3.1-70B", "h100_sxm", 4, "fp8", "vllm", VLLM_SERVE_DEFAULTS)
    )
    started = time.perf_counter()
    result = run_closed_loop(replica, 1024, 1024, 64, num_requests=10_000, sampled_waves=None)
    run_s = time.perf_counter() - started
    print(
        f"10,000 requests 1k/1k c64 70B FP8 TP4 (all {result.num_requests} "
        f"requests simulated, {result.num_steps} steps): {run_s:.2f} s wall, "
        f"{result.duration_s:.0f} simulated s, "
        f"{result.duration_s / run_s:.0f} simulated s per wall s"
    )
    print(f"\nreproduce: {COMMAND}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
