"""The engine model's open questions on the calibration corpus, each as a figure to reproduce.

    python benchmarks/bench_predict_questions.py kv-dtype [--workers 2]
    python benchmarks/bench_predict_questions.py first-wave [--stride 3] [--match SUBSTRING ...]
    python benchmarks/bench_predict_questions.py floors
    python benchmarks/bench_predict_questions.py repeats
    python benchmarks/bench_predict_questions.py excess [--workers 2]
    python benchmarks/bench_predict_questions.py bracket [--factor 1] [--workers 2]
    python benchmarks/bench_predict_questions.py stall [--workers 2]
    python benchmarks/bench_predict_questions.py prefill-scale [--factors 1,1.5,2] [--which all|fp8]

docs/perf-model.md ("Errors by group") quotes these; none changes the shipped model, and all
run with the shipped constants (no refit):

* `kv-dtype`: every FP8 and FP4 run read with an FP8 KV cache, against the corpus's rule (the
  checkpoint's declared dtype): medians by backend and by concurrency regime, the RMS of
  log(predicted / measured) TTFT, and, for the rows whose predicted TTFT moves by more than 30%
  (the runs that queue for KV), which reading each model and GPU sides with.
* `first-wave`: locked, de-phased (`dephased_start`) and the first wave locked with every later
  wave de-phased (weighted 1 to 19, as twenty waves are), median TTFT error of each.
* `floors`: measured TTFT at c4 with 1k prompts against both loops, per model, GPU and layout.
* `repeats`: how far the corpus's own repeated runs of one configuration disagree.
* `excess`: how TTFT grows with the clients. Per configuration (model, GPU, engine, precision,
  layout, shape) with a run at c <= 4, `S` is the de-phased loop's TTFT there (a lone prompt's
  prefill and fixed latencies); for each run, the measured TTFT's excess over the de-phased
  loop's at its own concurrency in units of `S`, beside the locked loop's, and the prefill
  load `rho = c * S / (TTFT + osl * TPOT)` (measured), the share of time the GPU would spend
  on prefills if they never overlapped: queueing for prefill alone waits a fraction of `S`
  while `rho` stays well below 1.
* `bracket`: whether any way of phasing the clients could explain a run. The locked loop
  (clients in step for ever) and the de-phased one (independent phases) bound what phases do
  to TTFT: clusters that form and break give something between. Per backend, GPU and
  concurrency regime, how many runs lie inside that bracket, above both loops (a TTFT term no
  phasing supplies is missing) or below both; and the median TTFT error if every run were
  predicted by the nearest point of its bracket (what a perfect phase model could reach with
  the shipped constants). `--factor F` draws the bracket with prefill compute F times slower
  (as `prefill-scale` does), the speed `stall` measures. It also prints where the runs sit
  between the loops: theta = log(measured / de-phased) / log(locked / de-phased), 0 for a
  run the de-phased loop predicts, 1 for one the locked loop does.
* `stall`: how long a prefill holds up the requests decoding beside it. For every
  configuration run at one concurrency with both 8k-token prompts and 1k outputs and 1k
  prompts and 8k outputs, the difference of their mean TPOT is, per output token, the other
  clients' prefills that land in a request's decode (plus reading a longer context, which is
  small): the measured difference against the model's (locked and de-phased), and their
  ratio, by backend, GPU and layout. The phases barely matter here (every other client
  prefills about once in a request's decode, locked or not), so the ratio says how much
  longer a prefill step is under load than the model's.
* `prefill-scale`: the corpus predicted with every prefill-compute efficiency (`eta_compute`,
  `eta_compute_fp8`, `eta_attention`) divided by a shared factor, on every GPU alike, locked
  and de-phased: median TTFT and TPOT errors and the median log(predicted / measured) TTFT, by
  backend, GPU, concurrency regime and prompt length. A probe of the constants, not a fit.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

from inhouse.calibration.corpus import CorpusRow, prepare
from inhouse.calibration.plausibility import screen
from inhouse.engine.build import build_replica
from inhouse.perf.constants import get_engine_constants
from inhouse.predict import AIPERF_SILICON, BenchmarkProtocol, ClosedLoop, run_closed_loop

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "data" / "calibration_silicon.csv"
COMMAND = "python benchmarks/bench_predict_questions.py"
DEPHASED = replace(AIPERF_SILICON, dephased_start=True)
MOVED = math.log(1.3)  # a prediction this far from the other reading's: the row queues for KV
THETA_MIN_SPREAD = 0.05  # loops closer than 5% give no place between them

Prediction = tuple[CorpusRow, float, float]  # row, TTFT ms, TPOT ms


def usable_rows() -> list[CorpusRow]:
    with CORPUS.open(newline="", encoding="utf-8") as handle:
        corpus = prepare(list(csv.DictReader(handle)))
    return screen(corpus.rows).usable


def with_fp8_kv(row: CorpusRow) -> CorpusRow:
    """The row read with an FP8 KV cache when its weights are FP8 or FP4."""
    if row.spec.quant not in ("fp8", "fp4") or row.spec.knobs.kv_cache_dtype == "fp8":
        return row
    knobs = row.spec.knobs.model_copy(update={"kv_cache_dtype": "fp8"})
    return replace(row, spec=replace(row.spec, knobs=knobs))


def predict(task: tuple[CorpusRow, BenchmarkProtocol]) -> Prediction:
    row, protocol = task
    replica = build_replica(row.spec, get_engine_constants(row.backend))
    result = run_closed_loop(replica, row.isl, row.osl, row.concurrency, protocol=protocol)
    return row, result.mean_ttft_ms, result.mean_tpot_ms


def first_wave_ttft(row: CorpusRow) -> float:
    """Mean TTFT of the first wave alone, as the locked loop runs it (all clients at once)."""
    replica = build_replica(row.spec, get_engine_constants(row.backend))
    loop = ClosedLoop(replica, row.isl, row.osl, row.concurrency, AIPERF_SILICON, row.concurrency)
    done = loop.run()
    return 1000 * statistics.mean(r.first_token_s - r.arrival_s for r in done)  # type: ignore[operator]


def predict_all(
    rows: list[CorpusRow], protocol: BenchmarkProtocol, workers: int
) -> list[Prediction]:
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(predict, [(r, protocol) for r in rows], chunksize=4))


SCALED = {
    "all": ("eta_compute", "eta_compute_fp8", "eta_attention"),
    "fp8": ("eta_compute_fp8",),
}


def _scaled(task: tuple[CorpusRow, BenchmarkProtocol, float, str]) -> Prediction:
    """A row predicted with the prefill-compute efficiencies `SCALED[which]` divided by
    `factor` (`all`: 16-bit and 8/4-bit GEMMs and prefill attention; `fp8`: 8/4-bit GEMMs)."""
    row, protocol, factor, which = task
    c = get_engine_constants(row.backend)
    c = replace(c, **{name: getattr(c, name) / factor for name in SCALED[which]})
    result = run_closed_loop(
        build_replica(row.spec, c), row.isl, row.osl, row.concurrency, protocol=protocol
    )
    return row, result.mean_ttft_ms, result.mean_tpot_ms


def predict_scaled(
    rows: list[CorpusRow],
    protocol: BenchmarkProtocol,
    factor: float,
    workers: int,
    which: str = "all",
) -> list[Prediction]:
    tasks = [(r, protocol, factor, which) for r in rows]
    with ProcessPoolExecutor(workers) as pool:
        return list(pool.map(_scaled, tasks, chunksize=4))


def mdape(values: Iterable[float]) -> str:
    return f"{100 * statistics.median(values):5.1f}%"


def medians(predictions: list[Prediction]) -> str:
    ttft = mdape(abs(t / r.ttft_ms - 1) for r, t, _ in predictions)
    tpot = mdape(abs(p / r.tpot_ms - 1) for r, _, p in predictions)
    return f"TTFT {ttft}  TPOT {tpot}"


def kv_dtype(workers: int) -> None:
    rows = usable_rows()
    rule = predict_all(rows, AIPERF_SILICON, workers)
    fp8 = predict_all([with_fp8_kv(r) for r in rows], AIPERF_SILICON, workers)
    print("KV cache dtype: the corpus's rule (checkpoint) against FP8 for every FP8/FP4 run")
    for backend in ("vllm", "sglang"):
        for label, keep in [("all", lambda r: True)] + [
            (name, lambda r, name=name: r.regime == name) for name in ("c<=16", "c32-128", "c>=256")
        ]:
            mine_rule = [p for p in rule if p[0].backend == backend and keep(p[0])]
            mine_fp8 = [p for p in fp8 if p[0].backend == backend and keep(p[0])]
            print(f"  {backend:<6} {label:<8} rows {len(mine_rule):>4}   rule: "
                  f"{medians(mine_rule)}   fp8: {medians(mine_fp8)}")  # fmt: skip
        for name, preds in (("rule", rule), ("fp8", fp8)):
            mine = [p for p in preds if p[0].backend == backend]
            rms = math.sqrt(statistics.mean(math.log(t / r.ttft_ms) ** 2 for r, t, _ in mine))
            print(f"  {backend:<6} RMS log TTFT error, {name}: {rms:.3f}")
    votes: dict[tuple[str, str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for (row, t_rule, _), (_, t_fp8, _) in zip(rule, fp8, strict=True):
        if abs(math.log(t_rule / t_fp8)) < MOVED:
            continue
        rule_closer = abs(math.log(t_rule / row.ttft_ms)) < abs(math.log(t_fp8 / row.ttft_ms))
        key = _group(row)
        votes[key][0 if rule_closer else 1] += 1
    print("\n  rows that queue for KV (prediction moves > 30%): which reading is closer")
    for key, (by_rule, by_fp8) in sorted(votes.items()):
        dtypes = {r.spec.knobs.kv_cache_dtype for r in rows if _group(r) == key}
        dtype = "/".join(sorted(dtypes))
        print(f"  {' '.join(key):<44} rule ({dtype}) {by_rule:>3}   fp8 {by_fp8:>3}")
    print(f"\nreproduce: {COMMAND} kv-dtype")


def _group(row: CorpusRow) -> tuple[str, str, str, str]:
    return (row.backend, row.spec.model, row.spec.quant, row.gpu)


def first_wave(stride: int, match: list[str], workers: int) -> None:
    rows = [r for r in usable_rows() if all(m.lower() in r.row_id.lower() for m in match)]
    rows = rows[::stride]
    locked = predict_all(rows, AIPERF_SILICON, workers)
    dephased = predict_all(rows, DEPHASED, workers)
    with ProcessPoolExecutor(workers) as pool:
        waves = list(pool.map(first_wave_ttft, rows, chunksize=4))
    print(f"first wave locked, later waves de-phased: {len(rows)} rows "
          f"(every {stride}th{', matching ' + ' '.join(match) if match else ''})")  # fmt: skip
    for backend in sorted({r.backend for r in rows}):
        pick = [i for i, r in enumerate(rows) if r.backend == backend]
        err: dict[str, list[float]] = defaultdict(list)
        for i in pick:
            row = rows[i]
            mixed = (waves[i] + 19 * dephased[i][1]) / 20
            for name, value in (("locked", locked[i][1]), ("de-phased", dephased[i][1]),
                                ("first wave locked", mixed)):  # fmt: skip
                err[name].append(abs(value / row.ttft_ms - 1))
        shown = "   ".join(f"{name} {mdape(v)}" for name, v in err.items())
        print(f"  {backend:<6} rows {len(pick):>4}   TTFT  {shown}")
    flags = f" --stride {stride}" + (f" --match {' '.join(match)}" if match else "")
    print(f"\nreproduce: {COMMAND} first-wave{flags}")


def floors(workers: int) -> None:
    rows = [r for r in usable_rows() if r.concurrency == 4 and r.isl == 1024 and r.osl == 1024]
    seen: set[tuple[object, ...]] = set()
    picked = []
    for row in sorted(
        rows, key=lambda r: (r.backend, r.spec.model, r.gpu, r.spec.quant, r.spec.tp)
    ):
        key = (row.backend, row.spec.model, row.gpu, row.spec.quant, row.spec.tp, row.spec.moe_ep)
        if key not in seen:
            seen.add(key)
            picked.append(row)
    locked = predict_all(picked, AIPERF_SILICON, workers)
    dephased = predict_all(picked, DEPHASED, workers)
    print("TTFT at c4, 1k/1k (ms): measured, locked loop, de-phased loop")
    for (row, lock, _), (_, deph, _) in zip(locked, dephased, strict=True):
        layout = f"tp{row.spec.tp} ep{row.spec.moe_ep}"
        print(f"  {row.backend:<6} {row.spec.model:<18} {row.gpu:<9} {row.spec.quant:<5} "
              f"{layout}  {row.ttft_ms:7.1f} {lock:7.1f} {deph:7.1f}")  # fmt: skip
    print(f"\nreproduce: {COMMAND} floors")


def repeats() -> None:
    groups: dict[tuple[object, ...], list[CorpusRow]] = defaultdict(list)
    for row in usable_rows():
        s = row.spec
        groups[(row.backend, s.model, s.gpu, s.quant, s.tp, s.moe_ep, s.attention_dp,
                row.isl, row.osl, row.concurrency)].append(row)  # fmt: skip
    by_backend: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for key, rows in groups.items():
        for a, b in itertools.combinations(rows, 2):
            pair = (abs(a.ttft_ms / b.ttft_ms - 1), abs(a.tpot_ms / b.tpot_ms - 1))
            by_backend[str(key[0])].append(pair)
    print("repeated runs of one configuration: one repeat as the prediction of the other")
    for backend, pairs in sorted(by_backend.items()):
        print(f"  {backend:<6} pairs {len(pairs):>4}   TTFT {mdape(t for t, _ in pairs)}  "
              f"TPOT {mdape(p for _, p in pairs)}")  # fmt: skip
    print(f"\nreproduce: {COMMAND} repeats")


def excess(workers: int) -> None:
    rows = usable_rows()
    locked = predict_all(rows, AIPERF_SILICON, workers)
    dephased = predict_all(rows, DEPHASED, workers)
    configs: dict[tuple[object, ...], list[int]] = defaultdict(list)
    for i, row in enumerate(rows):
        s = row.spec
        configs[(row.backend, s.model, s.gpu, s.quant, s.tp, s.moe_ep, s.attention_dp,
                 row.isl, row.osl)].append(i)  # fmt: skip
    cells: dict[tuple[str, int, int], list[tuple[float, float, float, float]]] = defaultdict(list)
    for members in configs.values():
        base = min(members, key=lambda i: rows[i].concurrency)
        if rows[base].concurrency > 4:
            continue
        lone = dephased[base][1]
        for i in members:
            row = rows[i]
            rho = row.concurrency * lone / (row.ttft_ms + row.osl * row.tpot_ms)
            cells[(row.backend, row.isl, row.concurrency)].append(
                (rho, (row.ttft_ms - dephased[i][1]) / lone,
                 (locked[i][1] - dephased[i][1]) / lone, math.log(locked[i][1] / row.ttft_ms))
            )  # fmt: skip
    print("TTFT excess over the de-phased loop, in units of a lone prompt's TTFT S (medians)")
    print(f"  {'backend':<7} {'isl':>5} {'c':>4} {'runs':>5} {'rho':>6} {'measured':>9} "
          f"{'locked':>7} {'locked log(p/m)':>16}")  # fmt: skip
    for (backend, isl, concurrency), values in sorted(cells.items()):
        # Past c256 the loops queue for KV and the excess measures that, not the clients.
        if len(values) < 5 or isl not in (1024, 8192) or concurrency > 256:
            continue
        rho, measured, lock, miss = (statistics.median(v) for v in zip(*values, strict=True))
        print(f"  {backend:<7} {isl:>5} {concurrency:>4} {len(values):>5} {rho:>6.3f} "
              f"{measured:>9.2f} {lock:>7.2f} {miss:>+16.2f}")  # fmt: skip
    print(f"\nreproduce: {COMMAND} excess")


def bracket(workers: int, factor: float = 1.0) -> None:
    rows = usable_rows()
    locked = predict_scaled(rows, AIPERF_SILICON, factor, workers)
    dephased = predict_scaled(rows, DEPHASED, factor, workers)
    cells: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    places: dict[tuple[str, str, int, int], list[float]] = defaultdict(list)
    for row, (_, lock, _), (_, free, _) in zip(rows, locked, dephased, strict=True):
        spread = math.log(lock / free)
        if row.concurrency <= 128 and abs(spread) >= THETA_MIN_SPREAD:
            place = math.log(row.ttft_ms / free) / spread  # 0: de-phased, 1: locked
            places[(row.backend, row.gpu, row.isl, row.concurrency)].append(place)
        low, high = min(lock, free), max(lock, free)
        nearest = min(max(row.ttft_ms, low), high)  # the measured run, moved into the bracket
        signed = math.log(row.ttft_ms / nearest)  # > 0: above both loops; < 0: below both
        c = row.concurrency
        regime = "c<=16" if c <= 16 else "c32-128" if c <= 128 else "c>=256"
        for key in ((row.backend, "all", "all"), (row.backend, row.gpu, regime)):
            cells[key].append(signed)
    scaled = f", prefill compute / {factor:g}" if factor != 1 else ""
    print(f"Measured TTFT against the bracket [de-phased loop, locked loop] (shipped constants"
          f"{scaled})")  # fmt: skip
    print(f"  {'backend':<7} {'GPU':<9} {'regime':<8} {'runs':>5} {'inside':>7} {'above':>6} "
          f"{'median above':>13} {'below':>6} {'bracket MdAPE':>14}")  # fmt: skip
    for (backend, gpu, regime), values in sorted(cells.items()):
        above = [math.exp(v) - 1 for v in values if v > 0]
        below = sum(1 for v in values if v < 0)
        inside = len(values) - len(above) - below
        over = f"{100 * statistics.median(above):.0f}%" if above else "-"
        print(f"  {backend:<7} {gpu:<9} {regime:<8} {len(values):>5} {inside:>7} "
              f"{len(above):>6} {over:>13} {below:>6} "
              f"{mdape(abs(math.exp(v) - 1) for v in values):>14}")  # fmt: skip
    print("\nWhere the runs sit between the loops: theta = log(measured / de-phased)")
    print("  / log(locked / de-phased), 0 de-phased, 1 locked; medians, c <= 128, >= 4 runs")
    print(f"  {'backend':<7} {'GPU':<9} {'isl':>5} {'c':>4} {'runs':>5} {'theta':>6}")
    for (backend, gpu, isl, c), values in sorted(places.items()):
        if len(values) >= 4:
            median = statistics.median(values)
            print(f"  {backend:<7} {gpu:<9} {isl:>5} {c:>4} {len(values):>5} {median:>6.2f}")
    flags = f" --factor {factor:g}" if factor != 1 else ""
    print(f"\nreproduce: {COMMAND} bracket{flags}")


def _pair_key(row: CorpusRow) -> tuple[object, ...]:
    s = row.spec
    return (row.backend, s.model, s.gpu, s.quant, s.tp, s.moe_ep, s.attention_dp, row.concurrency)


def stall(workers: int) -> None:
    rows = usable_rows()
    shapes = {(8192, 1024): "long", (1024, 8192): "short"}
    pairs: dict[tuple[object, ...], dict[str, int]] = defaultdict(dict)
    for i, row in enumerate(rows):
        shape = shapes.get((row.isl, row.osl))
        if shape:
            pairs[_pair_key(row)][shape] = i
    complete = {k: v for k, v in pairs.items() if len(v) == 2}
    picked = sorted({i for v in complete.values() for i in v.values()})
    chosen = [rows[i] for i in picked]
    locked = dict(zip(picked, predict_all(chosen, AIPERF_SILICON, workers), strict=True))
    dephased = dict(zip(picked, predict_all(chosen, DEPHASED, workers), strict=True))
    cells: dict[tuple[str, str, str], list[tuple[float, float, float]]] = defaultdict(list)
    for key, members in complete.items():
        long, short = members["long"], members["short"]
        measured = rows[long].tpot_ms - rows[short].tpot_ms
        lock = locked[long][2] - locked[short][2]
        free = dephased[long][2] - dephased[short][2]
        if lock <= 0 or free <= 0 or int(str(key[-1])) > 128:
            continue  # past c128 the loops queue for KV: the difference measures that
        row = rows[long]
        layout = f"tp{row.spec.tp}" + (f" ep{row.spec.moe_ep}" if row.spec.moe_ep > 1 else "")
        for cell in ((row.backend, row.gpu, "all"), (row.backend, row.gpu, layout)):
            cells[cell].append((measured / lock, measured / free, measured))
    print("TPOT(8k prompts, 1k out) - TPOT(1k prompts, 8k out), same configuration and "
          "concurrency (c <= 128): measured / model (medians)")  # fmt: skip
    print(f"  {'backend':<7} {'GPU':<9} {'layout':<9} {'pairs':>5} {'/locked':>8} "
          f"{'/de-phased':>11} {'measured ms':>12}")  # fmt: skip
    for (backend, gpu, layout), values in sorted(cells.items()):
        by_lock, by_free, ms = (statistics.median(v) for v in zip(*values, strict=True))
        print(f"  {backend:<7} {gpu:<9} {layout:<9} {len(values):>5} {by_lock:>8.2f} "
              f"{by_free:>11.2f} {ms:>12.2f}")  # fmt: skip
    print(f"\nreproduce: {COMMAND} stall")


def prefill_scale(factors: list[float], which: str, workers: int) -> None:
    rows = usable_rows()
    print(f"Prefill compute slower by a shared factor (every GPU alike; {', '.join(SCALED[which])}"
          "), shipped constants otherwise: MdAPE TTFT / TPOT (median log(predicted / measured)"
          " TTFT)")  # fmt: skip
    for factor, (name, protocol) in itertools.product(
        factors, (("locked", AIPERF_SILICON), ("de-phased", DEPHASED))
    ):
        out = predict_scaled(rows, protocol, factor, workers, which)
        cells: dict[tuple[str, str], list[tuple[float, float, float]]] = defaultdict(list)
        for row, ttft, tpot in out:
            value = (abs(ttft / row.ttft_ms - 1), abs(tpot / row.tpot_ms - 1),
                     math.log(ttft / row.ttft_ms))  # fmt: skip
            for group in ("all", f"{row.gpu} {row.regime}", f"isl {row.isl} {row.regime}"):
                cells[(row.backend, group)].append(value)
        print(f"\n  factor {factor:g}, {name}")
        for (backend, group), values in sorted(cells.items()):
            if len(values) < 10:
                continue
            ttft_err, tpot_err, signed = zip(*values, strict=True)
            print(f"    {backend:<7} {group:<22} rows {len(values):>4}  TTFT {mdape(ttft_err)} "
                  f"({statistics.median(signed):+.2f})  TPOT {mdape(tpot_err)}")  # fmt: skip
    shown = ",".join(f"{f:g}" for f in factors)
    only = f" --which {which}" if which != "all" else ""
    print(f"\nreproduce: {COMMAND} prefill-scale --factors {shown}{only}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="question", required=True)
    commands: dict[str, Callable[[argparse.Namespace], None]] = {
        "kv-dtype": lambda a: kv_dtype(a.workers),
        "first-wave": lambda a: first_wave(a.stride, a.match, a.workers),
        "floors": lambda a: floors(a.workers),
        "repeats": lambda a: repeats(),
        "excess": lambda a: excess(a.workers),
        "bracket": lambda a: bracket(a.workers, a.factor),
        "stall": lambda a: stall(a.workers),
        "prefill-scale": lambda a: prefill_scale(a.factors, a.which, a.workers),
    }
    for name in commands:
        command = sub.add_parser(name)
        command.add_argument("--workers", type=int, default=2)
        if name == "first-wave":
            command.add_argument("--stride", type=int, default=3, help="every Nth usable row")
            command.add_argument("--match", nargs="*", default=[], help="row-id substrings")
        if name == "bracket":
            command.add_argument(
                "--factor", type=float, default=1.0, help="prefill compute slowed by this factor"
            )
        if name == "prefill-scale":
            command.add_argument(
                "--factors",
                type=lambda text: [float(x) for x in text.split(",")],
                default=[1.0, 1.5, 2.0],
                help="comma-separated factors prefill compute is slowed by",
            )
            command.add_argument(
                "--which",
                choices=sorted(SCALED),
                default="all",
                help="all: 16-bit and 8/4-bit GEMMs and prefill attention; fp8: 8/4-bit GEMMs",
            )
    args = parser.parse_args()
    commands[args.question](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
