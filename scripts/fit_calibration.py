"""Fit the per-engine constants of the step-time model on measured closed-loop points.

    python scripts/fit_calibration.py [--csv data/calibration_h100_dense.csv]
                                      [--backend vllm] [--write]

For each backend, the constants in `src/inhouse/perf/data/engines.yaml` are fitted by robust
least squares on log(predicted / measured) of mean TTFT and mean TPOT, each row predicted by the
same closed-loop simulation `inhouse predict` runs. GPU physics stay in the catalog: the fit
sees only H100 rows, and the constants must carry to other GPUs unchanged. `--write` stores the
result; without it the script only prints.
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import least_squares, minimize

from inhouse.engine.build import ReplicaSpec, build_replica
from inhouse.errors import DoesNotFitError
from inhouse.perf.constants import FITTED_FIELDS, EngineConstants, get_engine_constants
from inhouse.predict import run_closed_loop
from inhouse.spec.knobs import VLLM_SERVE_DEFAULTS

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CSV = ROOT / "data" / "calibration_h100_dense.csv"
ENGINES_YAML = ROOT / "src" / "inhouse" / "perf" / "data" / "engines.yaml"

LOWER = {
    "eta_bw": 0.3,
    "eta_compute": 0.1,
    "eta_compute_fp8": 0.1,
    "eta_attention": 0.05,
    "step_overhead_s": 1e-5,
    "layer_overhead_s": 1e-7,
    "seq_overhead_s": 1e-7,
    "allreduce_latency_scale": 0.1,
    "request_overhead_s": 1e-4,
    "prompt_token_overhead_s": 1e-8,
    "closed_loop_spread": 0.001,
}
UPPER = {
    "eta_bw": 1.0,
    "eta_compute": 1.0,
    "eta_compute_fp8": 1.0,
    "eta_attention": 1.0,
    "step_overhead_s": 0.05,
    "layer_overhead_s": 1e-3,
    "seq_overhead_s": 1e-3,
    "allreduce_latency_scale": 10.0,
    "request_overhead_s": 0.5,
    "prompt_token_overhead_s": 1e-4,
    "closed_loop_spread": 1.0,
}


def predict_row(args: tuple[dict[str, str], EngineConstants]) -> tuple[float, float] | None:
    row, constants = args
    spec = ReplicaSpec(
        row["model"],
        row["system"],
        int(row["tp"]),
        row["precision"],
        row["backend"],
        VLLM_SERVE_DEFAULTS,
    )
    try:
        replica = build_replica(spec, constants)
    except DoesNotFitError:
        return None
    result = run_closed_loop(replica, int(row["isl"]), int(row["osl"]), int(row["concurrency"]))
    return result.mean_ttft_ms, result.mean_tpot_ms


class Fitter:
    def __init__(
        self,
        rows: list[dict[str, str]],
        base: EngineConstants,
        pool: ProcessPoolExecutor,
        fields: tuple[str, ...] = FITTED_FIELDS,
    ):
        self.rows = rows
        self.base = base
        self.pool = pool
        self.fields = fields
        self.calls = 0

    def constants(self, x: np.ndarray) -> EngineConstants:
        values = {name: float(math.exp(v)) for name, v in zip(self.fields, x, strict=True)}
        return self.base.with_values(**values)

    def predictions(self, constants: EngineConstants) -> list[tuple[float, float] | None]:
        return list(self.pool.map(predict_row, [(r, constants) for r in self.rows], chunksize=4))

    def residuals(self, x: np.ndarray) -> np.ndarray:
        self.calls += 1
        if self.calls % 10 == 0:
            print(f"  evaluation {self.calls}", flush=True)
        preds = self.predictions(self.constants(x))
        out: list[float] = []
        for row, pred in zip(self.rows, preds, strict=True):
            if pred is None:
                out.extend([3.0, 3.0])  # a measured point the model says cannot run
                continue
            out.append(math.log(pred[0] / float(row["ttft_ms"])))
            out.append(math.log(pred[1] / float(row["tpot_ms"])))
        return np.array(out)


def median_ape(rows: list[dict[str, str]], preds: list[tuple[float, float] | None]) -> float:
    """The score the issue judges: median APE of TTFT plus median APE of TPOT (a row the
    model cannot run counts as a 100% miss)."""
    ttft = []
    tpot = []
    for row, pred in zip(rows, preds, strict=True):
        if pred is None:
            ttft.append(1.0)
            tpot.append(1.0)
            continue
        ttft.append(abs(pred[0] / float(row["ttft_ms"]) - 1))
        tpot.append(abs(pred[1] / float(row["tpot_ms"]) - 1))
    return statistics.median(ttft) + statistics.median(tpot)


def summarize(rows: list[dict[str, str]], preds: list[tuple[float, float] | None]) -> str:
    ttft_err = []
    tpot_err = []
    for row, pred in zip(rows, preds, strict=True):
        if pred is None:
            continue
        ttft_err.append(abs(pred[0] / float(row["ttft_ms"]) - 1))
        tpot_err.append(abs(pred[1] / float(row["tpot_ms"]) - 1))
    return (
        f"TTFT median APE {100 * statistics.median(ttft_err):.1f}%, "
        f"TPOT median APE {100 * statistics.median(tpot_err):.1f}% over {len(ttft_err)} rows"
    )


def fit_backend(
    backend: str,
    rows: list[dict[str, str]],
    pool: ProcessPoolExecutor,
    max_evals: int,
    refine_evals: int,
    fields: tuple[str, ...] = FITTED_FIELDS,
) -> tuple[EngineConstants, str]:
    base = get_engine_constants(backend)
    fitter = Fitter(rows, base, pool, fields)
    x0 = np.array([math.log(getattr(base, f)) for f in fields])
    lower = np.array([math.log(LOWER[f]) for f in fields])
    upper = np.array([math.log(UPPER[f]) for f in fields])
    x0 = np.clip(x0, lower + 1e-6, upper - 1e-6)
    started = time.perf_counter()
    print(f"[{backend}] start: {summarize(rows, fitter.predictions(base))}", flush=True)
    x = x0
    if max_evals > 0:
        x = least_squares(
            fitter.residuals,
            x0,
            bounds=(lower, upper),
            loss="soft_l1",
            f_scale=0.05,
            diff_step=0.03,
            max_nfev=max_evals,
            x_scale=1.0,
        ).x
    if refine_evals > 0:
        # Robust least squares is smooth but not the score; Nelder-Mead then minimizes the
        # median APE itself, starting from the least-squares optimum.
        def score(v: np.ndarray) -> float:
            v = np.clip(v, lower, upper)
            return median_ape(rows, fitter.predictions(fitter.constants(v)))

        refined = minimize(
            score,
            x,
            method="Nelder-Mead",
            options={"maxfev": refine_evals, "initial_simplex": _simplex(x, 0.15)},
        )
        x = np.clip(refined.x, lower, upper)
    fitted = fitter.constants(x)
    summary = summarize(rows, fitter.predictions(fitted))
    took = time.perf_counter() - started
    print(f"[{backend}] fitted in {fitter.calls} evaluations, {took:.0f} s: {summary}", flush=True)
    return fitted, summary


def _simplex(x: np.ndarray, step: float) -> np.ndarray:
    points = [x]
    for i in range(len(x)):
        point = x.copy()
        point[i] += step
        points.append(point)
    return np.array(points)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--backend", action="append", help="fit only these backends")
    parser.add_argument(
        "--max-evals",
        type=int,
        default=80,
        help="least-squares iterations (each also costs one evaluation per fitted constant)",
    )
    parser.add_argument(
        "--refine-evals", type=int, default=60, help="Nelder-Mead evaluations on the median APE"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--fields",
        help="comma-separated constants to fit (default: all); the others keep their values",
    )
    parser.add_argument("--write", action="store_true", help="store the fit in engines.yaml")
    args = parser.parse_args(argv)

    with args.csv.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    backends = args.backend or sorted({r["backend"] for r in rows})
    table = yaml.safe_load(ENGINES_YAML.read_text(encoding="utf-8"))
    with ProcessPoolExecutor(args.workers) as pool:
        for backend in backends:
            subset = [r for r in rows if r["backend"] == backend]
            fields = tuple(args.fields.split(",")) if args.fields else FITTED_FIELDS
            unknown = sorted(set(fields) - set(FITTED_FIELDS))
            if unknown:
                parser.error(f"unknown --fields {unknown}; choose from {FITTED_FIELDS}")
            fitted, summary = fit_backend(
                backend, subset, pool, args.max_evals, args.refine_evals, fields
            )
            values = asdict(fitted)
            values.pop("name")
            for key in FITTED_FIELDS:
                values[key] = float(f"{values[key]:.6g}")
            values["fitted_on"] = f"{len(subset)} rows of {args.csv.name} ({backend}); {summary}"
            table[backend] = values
            print(yaml.safe_dump({backend: values}, sort_keys=False))
    if args.write:
        header = (
            "# Step-time constants per serving engine. Written by scripts/fit_calibration.py;"
            " edit by re-fitting.\n"
        )
        ENGINES_YAML.write_text(header + yaml.safe_dump(table, sort_keys=False), "utf-8")
        print(f"wrote {ENGINES_YAML}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
