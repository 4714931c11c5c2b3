"""Fit the constants of the step-time model on the measured calibration corpus.

    python scripts/fit_calibration.py [--csv data/calibration_silicon.csv] [--holdout GPU]
                                      [--rounds 6] [--workers 2] [--out FILE | --write]

The corpus is read by `inhouse.calibration.corpus` (layouts from the runs' ids, duplicates
dropped, KV dtype from the checkpoint, the harness's engine knobs) and screened by
`inhouse.calibration.plausibility` (invalid layouts and rows faster than the hardware allows
are reported and left out). Then, for a few rounds: every row is simulated at the current
constants and recorded; host constants are nudged and re-simulated to see how they move each
row; and robust least squares on log(predicted / measured) of mean TTFT and TPOT, with the
recordings replayed under the trial constants, proposes the next constants. A round that
makes the real (re-simulated) objective worse is halved back towards the best one.

The kernel constants are shared by the engines; the software constants are per engine; no
constant is per GPU. `--holdout b200_sxm` fits without that GPU's rows (for
`benchmarks/bench_predict.py`'s leave-one-GPU-out figures). `--write` stores the fit in
`src/inhouse/perf/data/engines.yaml`; `--out FILE` elsewhere; neither: print only. A fit starts
from `--start` (default: the physical values of `data/calibration_prior.yaml`) and is pulled
weakly towards `--prior` (the same file); a leave-one-GPU-out fit must start there.

Each engine's block records what the fit saw: `fitted_on` (the runs and the in-sample error)
and `fitted_gpus` (the GPUs of the rows it fitted, holdout excluded), which `inhouse plan`
reads to say whether a planned GPU was among them.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import yaml
from scipy.optimize import least_squares

from inhouse.calibration.corpus import CorpusRow, prepare
from inhouse.calibration.fitting import Linearized, Space, median_errors
from inhouse.calibration.plausibility import screen
from inhouse.calibration.replay import Recording, record
from inhouse.engine.build import build_replica
from inhouse.perf.constants import ENGINE_FIELDS, KERNEL_FIELDS, EngineConstants, load_engine_table
from inhouse.predict import AIPERF_SILICON, BenchmarkProtocol, run_closed_loop

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CSV = ROOT / "data" / "calibration_silicon.csv"
ENGINES_YAML = ROOT / "src" / "inhouse" / "perf" / "data" / "engines.yaml"
PRIOR_YAML = ROOT / "data" / "calibration_prior.yaml"
HOST_STEP = 0.4  # log-space nudge of a host constant
HOST_EVERY = 3  # rounds between re-measurements of the host constants' effect
F_SCALE = 0.1  # residuals beyond ~10% count linearly, not quadratically
TRUST = 0.5  # a round moves no constant by more than this in log space (x1.65)


Task = tuple[CorpusRow, EngineConstants, BenchmarkProtocol]


def _record(task: Task) -> Recording | None:
    row, constants, protocol = task
    try:
        return record(row, constants, protocol)
    except AssertionError as exc:  # NOTE: reported, not hidden: a row the engine cannot run
        print(f"  cannot simulate {row.row_id}: {exc}", flush=True)
        return None


def _predict(task: Task) -> tuple[float, float]:
    row, constants, protocol = task
    result = run_closed_loop(
        build_replica(row.spec, constants), row.isl, row.osl, row.concurrency,
        protocol=protocol,
    )  # fmt: skip
    return result.mean_ttft_ms, result.mean_tpot_ms


def robust_cost(residuals: np.ndarray) -> float:
    z = (residuals / F_SCALE) ** 2
    return float(np.sum(F_SCALE**2 * 2 * (np.sqrt(1 + z) - 1)))


def summary(recordings: list[Recording]) -> str:
    parts = []
    for backend in sorted({r.row.backend for r in recordings}):
        pairs = [
            (r.ttft_ms, r.row.ttft_ms, r.tpot_ms, r.row.tpot_ms)
            for r in recordings
            if r.row.backend == backend
        ]
        ttft, tpot = median_errors(pairs)
        parts.append(f"{backend}: TTFT {100 * ttft:.1f}%, TPOT {100 * tpot:.1f}% ({len(pairs)})")
    return "; ".join(parts)


def host_jacobian(
    space: Space,
    x: np.ndarray,
    recordings: list[Recording],
    pool: ProcessPoolExecutor,
    dephased_start: bool,
) -> np.ndarray:
    """d log prediction / d log host constant, by re-simulating with each one nudged."""
    jac = np.zeros((2 * len(recordings), len(space.params)))
    base = np.array([[math.log(r.ttft_ms), math.log(r.tpot_ms)] for r in recordings]).ravel()
    for j in space.host_indices():
        param = space.params[j]
        nudged = x.copy()
        nudged[j] += HOST_STEP
        table = space.constants(nudged)
        rows = [i for i, r in enumerate(recordings) if param.applies_to(r.row.backend)]
        tasks = [
            (row, table[row.backend], row.simulated_protocol(dephased_start))
            for row in (recordings[i].row for i in rows)
        ]
        for i, (ttft, tpot) in zip(rows, pool.map(_predict, tasks, chunksize=2), strict=True):
            jac[2 * i, j] = (math.log(ttft) - base[2 * i]) / HOST_STEP
            jac[2 * i + 1, j] = (math.log(tpot) - base[2 * i + 1]) / HOST_STEP
        print(f"  host sensitivity of {param.scope}.{param.name} measured", flush=True)
    return jac


def save_round(
    trace: Path | None, k: int, table: dict[str, EngineConstants], recs: list[Recording]
) -> None:
    """Keep each round's constants and predictions, to look at residuals while it runs."""
    if trace is None:
        return
    trace.mkdir(parents=True, exist_ok=True)
    notes = {e: f"round {k}" for e in table}
    write_table(trace / f"round{k}.yaml", table, notes, fitted_gpus(r.row for r in recs))
    with (trace / f"round{k}.csv").open("w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle)
        out.writerow(["id", "ttft_ms", "tpot_ms", "pred_ttft_ms", "pred_tpot_ms"])
        for r in recs:
            out.writerow([r.row.row_id, r.row.ttft_ms, r.row.tpot_ms, r.ttft_ms, r.tpot_ms])


def fit(
    rows: list[CorpusRow],
    base: dict[str, EngineConstants],
    prior: dict[str, EngineConstants],
    rounds: int,
    workers: int,
    trace: Path | None = None,
    dephased_start: bool = False,
):
    space = Space.over(base, prior)
    low, high = space.bounds()
    x = np.clip(space.vector(base), low + 1e-9, high - 1e-9)
    best: tuple[float, np.ndarray, list[Recording]] | None = None
    jac_host = None
    with ProcessPoolExecutor(workers) as pool:
        for k in range(rounds + 1):
            started = time.perf_counter()
            table = space.constants(x)
            tasks = [(r, table[r.backend], r.simulated_protocol(dephased_start)) for r in rows]
            recordings = [r for r in pool.map(_record, tasks, chunksize=2) if r is not None]
            replicas = [build_replica(r.row.spec, table[r.row.backend]) for r in recordings]
            no_host = np.zeros((2 * len(recordings), len(x)))
            lin = Linearized(space, recordings, replicas, x, no_host)
            cost = robust_cost(lin.residuals(x))
            took = time.perf_counter() - started
            print(f"round {k}: cost {cost:.2f} ({took:.0f} s) {summary(recordings)}", flush=True)
            save_round(trace, k, table, recordings)
            if best is not None and cost > best[0]:
                x = (x + best[1]) / 2  # the step overshot: back halfway towards the best
                continue
            best = (cost, x.copy(), recordings)
            if k == rounds:
                break
            if jac_host is None or k % HOST_EVERY == 0:
                jac_host = host_jacobian(space, x, recordings, pool, dephased_start)
            lin.host_jacobian = jac_host
            result = least_squares(
                lin.residuals,
                x,
                bounds=(np.maximum(low, x - TRUST), np.minimum(high, x + TRUST)),
                loss="soft_l1",
                f_scale=F_SCALE,
                jac_sparsity=space.sparsity(recordings),
                diff_step=0.02,
                max_nfev=150,
            )
            x = result.x
    assert best is not None
    return space, best


def fitted_gpus(rows: Iterable[CorpusRow]) -> dict[str, list[str]]:
    """Per engine, the GPUs its rows ran on, sorted: engines.yaml's `fitted_gpus`."""
    out: dict[str, set[str]] = {}
    for row in rows:
        out.setdefault(row.backend, set()).add(row.gpu)
    return {engine: sorted(gpus) for engine, gpus in out.items()}


def write_table(
    path: Path,
    table: dict[str, EngineConstants],
    notes: dict[str, str],
    gpus: dict[str, list[str]],
) -> None:
    first = next(iter(table.values()))
    out: dict[str, dict[str, object]] = {"kernels": {}}
    for name in KERNEL_FIELDS:
        out["kernels"][name] = float(f"{getattr(first, name):.4g}")
    for engine, constants in sorted(table.items()):
        block: dict[str, object] = {}
        for name in ENGINE_FIELDS:
            block[name] = float(f"{getattr(constants, name):.4g}")
        block.update(
            max_num_batched_tokens=constants.max_num_batched_tokens,
            max_num_seqs=constants.max_num_seqs,
            fitted_on=notes[engine],
            fitted_gpus=gpus.get(engine, []),
            mixed_batches=constants.mixed_batches,
            reserve_new_tokens=constants.reserve_new_tokens,
            memory_rule=constants.memory_rule,
        )
        if constants.batched_tokens_by_hbm_gib:
            block["batched_tokens_by_hbm_gib"] = dict(constants.batched_tokens_by_hbm_gib)
        out[engine] = block
    header = "# Step-time constants. Written by scripts/fit_calibration.py; edit by re-fitting.\n"
    path.write_text(header + yaml.safe_dump(out, sort_keys=False), "utf-8")
    print(f"wrote {path}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--start", type=Path, default=PRIOR_YAML, help="constants to start at")
    parser.add_argument(
        "--prior", type=Path, default=PRIOR_YAML, help="physical values the fit is pulled to"
    )
    parser.add_argument("--holdout", help="leave this GPU's rows out of the fit")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write the fitted constants here")
    parser.add_argument("--write", action="store_true", help="write them to engines.yaml")
    parser.add_argument("--trace", type=Path, help="keep every round's constants and predictions")
    parser.add_argument(
        "--dephased-start",
        action=argparse.BooleanOptionalAction,
        default=AIPERF_SILICON.dephased_start,
        help="simulate the corpus's clients entering the measurement de-phased "
        "(BenchmarkProtocol.dephased_start; default: the corpus protocol's)",
    )
    parser.add_argument(
        "--corpus-protocol",
        choices=("aiperf", "harness"),
        default="aiperf",
        help="simulate every row under aiperf's protocol (20 waves, exact lengths: how the "
        "shipped constants were fitted) or under its own harness's (InferenceX's sweeps: "
        "10 waves, lengths on [0.8 L, L]; see inhouse.calibration.corpus)",
    )
    return parser


def select_rows(args: argparse.Namespace) -> list[CorpusRow]:
    """The rows the fit uses: the corpus read under `--corpus-protocol`, screened, less the
    `--holdout` GPU's rows (a test recomputes engines.yaml's `fitted_gpus` through this)."""
    with args.csv.open(newline="", encoding="utf-8") as handle:
        corpus = prepare(list(csv.DictReader(handle)), harness=args.corpus_protocol == "harness")
    screened = screen(corpus.rows)
    print(
        f"{len(corpus.rows)} runs ({len(corpus.duplicates)} rows are copies of another's run, "
        f"{len(corpus.excluded)} runs not what their label says, {len(corpus.corrected)} "
        f"layouts corrected); left out of them: {len(screened.invalid)} "
        f"invalid, {len(screened.unfit)} do not fit, {len(screened.implausible)} implausible, "
        f"{len(screened.queued)} queued in front of the engine"
    )
    return [r for r in screened.usable if r.gpu != args.holdout]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rows = select_rows(args)
    base = load_engine_table(args.start.read_text("utf-8"))
    prior = load_engine_table(args.prior.read_text("utf-8"))
    fitted = fit(rows, base, prior, args.rounds, args.workers, args.trace, args.dephased_start)
    space, (_cost, x, recordings) = fitted
    table = space.constants(x)
    where = f"without {args.holdout} " if args.holdout else ""
    notes = {}
    for engine in table:
        mine = [r for r in recordings if r.row.backend == engine]
        pairs = [(r.ttft_ms, r.row.ttft_ms, r.tpot_ms, r.row.tpot_ms) for r in mine]
        ttft, tpot = median_errors(pairs)
        notes[engine] = (
            f"{len(mine)} runs of {args.csv.name} {where}({engine}); in-sample median "
            f"abs error TTFT {100 * ttft:.1f}%, TPOT {100 * tpot:.1f}%"
        )
        print(notes[engine])
    # NOTE: from the rows simulated, not those selected: a row the engine cannot run (reported
    # by `_record`) is not fitted on.
    gpus = fitted_gpus(r.row for r in recordings)
    target = ENGINES_YAML if args.write else args.out
    if target is not None:
        write_table(target, table, notes, gpus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
