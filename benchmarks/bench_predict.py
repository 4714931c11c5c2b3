"""Accuracy of the engine model on the calibration corpus, in-sample and on a GPU it never saw.

    python benchmarks/bench_predict.py [--csv data/calibration_silicon.csv] [--workers 2]
                                       [--holdout-dir data/calibration_holdout] [--quick]

Reads the corpus as the fit does (`inhouse.calibration`: layouts from the run ids, duplicates
dropped, invalid and physically impossible rows reported and left out), predicts every usable
row with the shipped constants (in-sample) and, for each GPU with a held-out fit in
`--holdout-dir` (`engines_without_<gpu>.yaml`, written by `scripts/fit_calibration.py
--holdout <gpu> --out ...`), predicts that GPU's rows with constants fitted without them
(leave-one-GPU-out); and, with the shipped constants, `--unseen` (default
data/calibration_unseen_gpus.csv: the same corpus's H200 and B300 runs, no row of which any
fit has seen; models it never saw too, Llama-3.1-8B and Qwen3-235B-A22B). Prints median
absolute relative error of mean TTFT and mean TPOT by backend, and within each backend by
model family, GPU and concurrency regime; the worst rows; and the wall time. `--quick`
predicts every fourth row. `--single-gpu-fits` also predicts each held-out fit's own rows:
with a corpus of two GPUs, each GPU under constants fitted on it alone, the error per-GPU
constants could reach (none ship), with the median signed TTFT error by group.

`--corpus-protocol harness` reads each row as its harness ran it (`inhouse.calibration.corpus`:
InferenceX's ten waves with lengths on [0.8 L, L] and its launch knobs); give it constants
fitted that way (`--engines data/calibration_harness/engines.yaml --holdout-dir
data/calibration_harness`). The default reads every row as aiperf's protocol, as the shipped
constants were fitted.
"""

from __future__ import annotations

import argparse
import csv
import shlex
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

from inhouse.calibration.corpus import CorpusRow, prepare
from inhouse.calibration.plausibility import Screening, screen
from inhouse.engine.build import build_replica
from inhouse.perf.constants import EngineConstants, get_engine_constants, load_engine_table
from inhouse.predict import AIPERF_SILICON, BenchmarkProtocol, run_closed_loop

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CSV = ROOT / "data" / "calibration_silicon.csv"
HOLDOUT_DIR = ROOT / "data" / "calibration_holdout"
UNSEEN_CSV = ROOT / "data" / "calibration_unseen_gpus.csv"
COMMAND = "python benchmarks/bench_predict.py"

Scored = tuple[CorpusRow, float, float]  # row, predicted TTFT, predicted TPOT


def _predict(task: tuple[CorpusRow, EngineConstants, BenchmarkProtocol]) -> Scored:
    row, constants, protocol = task
    replica = build_replica(row.spec, constants)
    result = run_closed_loop(replica, row.isl, row.osl, row.concurrency, protocol=protocol)
    return row, result.mean_ttft_ms, result.mean_tpot_ms


def _errors(scored: list[Scored]) -> tuple[float, float]:
    ttft = statistics.median(abs(p / r.ttft_ms - 1) for r, p, _ in scored)
    tpot = statistics.median(abs(p / r.tpot_ms - 1) for r, _, p in scored)
    return ttft, tpot


def _signed(scored: list[Scored]) -> str:
    """The median signed TTFT error: which way a group's misses lean."""
    return f" {100 * statistics.median(p / r.ttft_ms - 1 for r, p, _ in scored):>+9.0f}%"


def print_table(title: str, scored: list[Scored], signed: bool = False) -> None:
    """MdAPE by backend, then by family, GPU and regime; with `signed`, the median signed
    TTFT error beside them."""
    print(f"\n{title}")
    lean = f" {'TTFT signed':>11}" if signed else ""
    print(f"  {'group':<34} {'rows':>5} {'TTFT MdAPE':>11} {'TPOT MdAPE':>11}{lean}")
    keys: list[tuple[str, Callable[[CorpusRow], str]]] = [
        ("family", lambda r: r.family),
        ("gpu", lambda r: r.gpu),
        ("regime", lambda r: r.regime),
    ]
    for backend in sorted({r.backend for r, _, _ in scored}):
        mine = [s for s in scored if s[0].backend == backend]
        ttft, tpot = _errors(mine)
        lean = _signed(mine) if signed else ""
        print(f"  {backend:<34} {len(mine):>5} {100 * ttft:>10.1f}% {100 * tpot:>10.1f}%{lean}")
        for label, key in keys:
            groups: dict[str, list[Scored]] = defaultdict(list)
            for s in mine:
                groups[key(s[0])].append(s)
            for name in sorted(groups):
                ttft, tpot = _errors(groups[name])
                group = f"  {backend} {label} {name}"
                lean = _signed(groups[name]) if signed else ""
                print(
                    f"  {group:<34} {len(groups[name]):>5} {100 * ttft:>10.1f}% "
                    f"{100 * tpot:>10.1f}%{lean}"
                )


def print_worst(scored: list[Scored], count: int) -> None:
    for index, label in ((1, "TTFT"), (2, "TPOT")):
        print(f"\nworst {label} rows (in-sample):")

        def miss(s: Scored, index: int = index) -> float:
            measured = s[0].ttft_ms if index == 1 else s[0].tpot_ms
            return float(abs(s[index] / measured - 1))

        for s in sorted(scored, key=miss, reverse=True)[:count]:
            r = s[0]
            measured = r.ttft_ms if index == 1 else r.tpot_ms
            print(
                f"  {r.spec.model:<18} {r.backend:<6} {r.gpu:<9} {r.spec.quant:<4} "
                f"tp{r.spec.tp} ep{r.spec.moe_ep} {r.isl}/{r.osl} c{r.concurrency:<4} "
                f"measured {measured:9.1f} predicted {s[index]:9.1f} "
                f"({100 * (s[index] / measured - 1):+.0f}%)"
            )


GROWTH_CONCURRENCY = (4, 128)


def growth(scored: list[Scored]) -> dict[str, dict[str, float]]:
    """How TTFT grows with the clients, measured and predicted, by backend: for each
    configuration (one replica but for its knobs, shape and protocol) run at four or more
    concurrencies in `GROWTH_CONCURRENCY`, TTFT at its highest concurrency over TTFT at its
    lowest, and the same for TTFT / TPOT; the medians over configurations. A model whose
    TTFT grows less than the measurements' misses queueing it should carry, whatever its
    median error."""
    lo, hi = GROWTH_CONCURRENCY
    configs: dict[tuple[str, str], dict[int, Scored]] = defaultdict(dict)
    for s in scored:
        r = s[0]
        if lo <= r.concurrency <= hi:
            # The engine's knobs follow the concurrency in some dumps (max_num_seqs = C, the
            # scheduler's recv interval): a configuration is the replica without them.
            spec = replace(r.spec, knobs=None, scheduler_recv_interval=1)
            key = (r.backend, repr((spec, r.isl, r.osl, r.protocol)))
            configs[key].setdefault(r.concurrency, s)
    ratios: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (backend, _), runs in configs.items():
        if len(runs) < 4:
            continue
        first, last = runs[min(runs)], runs[max(runs)]
        mine = ratios[backend]
        mine["measured TTFT"].append(last[0].ttft_ms / first[0].ttft_ms)
        mine["predicted TTFT"].append(last[1] / first[1])
        mine["measured TTFT/TPOT"].append(
            (last[0].ttft_ms / last[0].tpot_ms) / (first[0].ttft_ms / first[0].tpot_ms)
        )
        mine["predicted TTFT/TPOT"].append((last[1] / last[2]) / (first[1] / first[2]))
    return {
        backend: {"configurations": float(len(mine["measured TTFT"]))}
        | {name: statistics.median(values) for name, values in mine.items()}
        for backend, mine in sorted(ratios.items())
    }


def print_growth(scored: list[Scored]) -> None:
    lo, hi = GROWTH_CONCURRENCY
    print(
        f"\nTTFT growth from the lowest to the highest concurrency of each configuration run at "
        f"four or more of c{lo}-c{hi} (median over configurations, in-sample):"
    )
    for backend, figures in growth(scored).items():
        print(
            f"  {backend:<6} {int(figures['configurations']):>3} configurations: TTFT x"
            f"{figures['measured TTFT']:.2f} measured, x{figures['predicted TTFT']:.2f} "
            f"predicted; TTFT/TPOT x{figures['measured TTFT/TPOT']:.2f} measured, "
            f"x{figures['predicted TTFT/TPOT']:.2f} predicted"
        )


def _read(path: Path, harness: bool = False) -> Screening:
    """A corpus file read and screened as the fit does, what was left out printed."""
    with path.open(newline="", encoding="utf-8") as handle:
        corpus = prepare(list(csv.DictReader(handle)), harness=harness)
    screened = screen(corpus.rows)
    print(
        f"{path.name}: {len(corpus.rows)} runs ({len(corpus.duplicates)} rows are copies of "
        f"another's run, {len(corpus.excluded)} runs not what their label says, "
        f"{len(corpus.unreadable)} unreadable); {len(corpus.corrected)} layouts corrected"
    )
    for label, items in (
        ("unreadable", [(None, f"{i}: {w}") for i, w in corpus.unreadable]),
        ("not what its label says", [(None, f"{i}: {w}") for i, w in corpus.excluded]),
        ("invalid layout", screened.invalid),
        ("does not fit", screened.unfit),
        ("faster than the hardware allows", screened.implausible),
        ("queued in front of the engine", screened.queued),
    ):
        print(f"  left out, {label}: {len(items)}")
        for row, why in items[:3]:
            print(f"    {row.row_id if row else ''}: {why[:140]}")
    return screened


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--holdout-dir", type=Path, default=HOLDOUT_DIR)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--worst", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="every fourth row only")
    parser.add_argument(
        "--single-gpu-fits",
        action="store_true",
        help="also predict each held-out fit's own rows: where the corpus has two GPUs, each "
        "GPU under constants fitted on it alone (what per-GPU constants could reach)",
    )
    parser.add_argument("--unseen", type=Path, default=UNSEEN_CSV, help="runs on unfitted GPUs")
    parser.add_argument(
        "--dephased-start",
        action=argparse.BooleanOptionalAction,
        default=AIPERF_SILICON.dephased_start,
        help="clients enter the measurement de-phased (BenchmarkProtocol.dephased_start)",
    )
    parser.add_argument("--engines", type=Path, help="in-sample constants (default: shipped)")
    parser.add_argument(
        "--corpus-protocol",
        choices=("aiperf", "harness"),
        default="aiperf",
        help="every row under aiperf's protocol (as the shipped constants were fitted) or "
        "under its own harness's (with constants fitted so: see docs/perf-model.md)",
    )
    args = parser.parse_args()
    shipped = load_engine_table(args.engines.read_text("utf-8")) if args.engines else None

    def constants_of(backend: str) -> EngineConstants:
        return shipped[backend] if shipped else get_engine_constants(backend)

    harness = args.corpus_protocol == "harness"
    screened = _read(args.csv, harness)
    rows = screened.usable[:: 4 if args.quick else 1]
    unseen = (
        _read(args.unseen, harness).usable[:: 4 if args.quick else 1]
        if args.unseen.is_file()
        else []
    )
    started = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        tasks = [
            (r, constants_of(r.backend), r.simulated_protocol(args.dephased_start)) for r in rows
        ]
        in_sample = list(pool.map(_predict, tasks, chunksize=2))
        held_out: list[Scored] = []
        own: list[Scored] = []
        gpus = sorted({r.gpu for r in rows})
        for gpu in gpus:
            path = args.holdout_dir / f"engines_without_{gpu}.yaml"
            if not path.is_file():
                continue
            table = load_engine_table(path.read_text("utf-8"))
            tasks = [
                (r, table[r.backend], r.simulated_protocol(args.dephased_start))
                for r in rows
                if r.gpu == gpu
            ]
            held_out += list(pool.map(_predict, tasks, chunksize=2))
            if args.single_gpu_fits and len(gpus) == 2:
                tasks = [
                    (r, table[r.backend], r.simulated_protocol(args.dephased_start))
                    for r in rows
                    if r.gpu != gpu
                ]
                own += list(pool.map(_predict, tasks, chunksize=2))
        tasks = [
            (r, constants_of(r.backend), r.simulated_protocol(args.dephased_start)) for r in unseen
        ]
        never = list(pool.map(_predict, tasks, chunksize=2))
    wall_s = time.perf_counter() - started
    which = f"constants of {args.engines}" if args.engines else "shipped constants"
    print_table(f"in-sample ({which}, fitted on every usable row):", in_sample)
    if held_out:
        title = "leave-one-GPU-out (each GPU predicted by constants fitted without it):"
        print_table(title, held_out)
    else:
        print(f"\nno held-out fits in {args.holdout_dir}: leave-one-GPU-out not reported")
    if args.single_gpu_fits:
        if own:
            title = (
                "each GPU under constants fitted on its rows alone (the held-out fit of the "
                "other GPU, predicting the rows it was fitted on):"
            )
            print_table(title, own, signed=True)
        else:
            print("\n--single-gpu-fits: needs a corpus of two GPUs and both held-out fits")
    if never:
        print_table(f"GPUs no fit has seen ({args.unseen.name}, {which}):", never)
    print_growth(in_sample)
    print_worst(in_sample, args.worst)
    count = len(in_sample) + len(held_out) + len(own) + len(never)
    print(f"\npredicted {count} runs in {wall_s:.0f} s wall")
    print(f"\nreproduce: {' '.join([COMMAND, *(shlex.quote(a) for a in sys.argv[1:])])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
