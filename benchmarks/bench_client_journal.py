"""What the run journal (`requests.jsonl.partial`, `inhouse.bench.records.Journal`) costs the
bench client: each request's record is serialized as it ends and written once a second.

One process, one mock server (`tests/support/mock_server.py`), runs alternating without and
with the journal (A B A B ...), so the load on a shared host falls on both alike. Reported, as
ratios within this one run:

* the journal's own time (every `add`, `tick`, `flush`, `close`, timed) over the driver
  process's CPU time in the runs with it: the share of the client's work it adds;
* driver CPU per request, with / without;
* send lag p99 and event-loop lag p99, with / without (the measurement it might perturb).

Two loads: short requests at a high rate (many small rows), and streams of many chunks (long
`itl_ms` lists per row). Reproduce:

    python benchmarks/bench_client_journal.py [--seconds S] [--pairs N] [--workers N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from inhouse.bench import records
from inhouse.bench.config import BenchSpec
from inhouse.bench.driver import run_live
from inhouse.bench.health import assess_client
from inhouse.bench.sender import use_fast_loop

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_client_capacity import start_server


class JournalClock:
    """Time spent inside the journal's methods (patched onto the class)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, name: str) -> None:
        inner = getattr(records.Journal, name)

        def timed(journal: records.Journal, *args: Any) -> Any:
            t = time.perf_counter()
            try:
                return inner(journal, *args)
            finally:
                self.seconds += time.perf_counter() - t

        setattr(records.Journal, name, timed)


def one_run(spec: BenchSpec, out_dir: Path | None) -> dict[str, float]:
    cpu = time.process_time()
    run = asyncio.run(run_live(spec, out_dir=out_dir))
    cpu = time.process_time() - cpu
    gated = spec.concurrency is not None
    health = assess_client(
        run.results,
        run.health,
        gated=gated,
        requested_rate=spec.rate,
        num_workers=spec.workers,
    )
    driver = health["processes"][0]
    return {
        "requests": float(len(run.results)),
        "cpu_s": cpu,
        "send_lag_p99_ms": float(health["send_lag_p99_ms"] or 0.0),
        "loop_lag_p99_ms": float(driver["loop_lag_p99_ms"]),
    }


def compare(
    name: str, make_spec: Callable[[], BenchSpec], pairs: int, clock: JournalClock
) -> dict[str, Any]:
    without: list[dict[str, float]] = []
    with_: list[dict[str, float]] = []
    journal_s = 0.0
    rows = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(pairs):
            without.append(one_run(make_spec(), None))
            out = Path(tmp) / f"run{i}"
            before = clock.seconds
            with_.append(one_run(make_spec(), out))
            journal_s += clock.seconds - before
            rows += sum(1 for _ in (out / records.PARTIAL_FILE).open())

    def total(runs: list[dict[str, float]], key: str) -> float:
        return sum(r[key] for r in runs)

    def median(runs: list[dict[str, float]], key: str) -> float:
        return float(np.median([r[key] for r in runs]))

    cpu_with, cpu_without = total(with_, "cpu_s"), total(without, "cpu_s")
    per_req_with = cpu_with / max(total(with_, "requests"), 1.0)
    per_req_without = cpu_without / max(total(without, "requests"), 1.0)
    return {
        "load": name,
        "pairs": pairs,
        "rows_journaled": rows,
        "journal_s": journal_s,
        "journal_us_per_row": 1e6 * journal_s / max(rows, 1),
        "journal_share_of_driver_cpu": journal_s / cpu_with,
        "driver_cpu_per_request_ratio_with_over_without": per_req_with / per_req_without,
        "send_lag_p99_ms_without_with": [
            median(without, "send_lag_p99_ms"),
            median(with_, "send_lag_p99_ms"),
        ],
        "send_lag_p99_ms_each_run_without": [round(r["send_lag_p99_ms"], 2) for r in without],
        "send_lag_p99_ms_each_run_with": [round(r["send_lag_p99_ms"], 2) for r in with_],
        "loop_lag_p99_ms_without_with": [
            median(without, "loop_lag_p99_ms"),
            median(with_, "loop_lag_p99_ms"),
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0, help="per run")
    parser.add_argument("--pairs", type=int, default=3, help="runs without and with, alternated")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--rate", type=float, default=500.0, help="short requests per second")
    parser.add_argument("--streams", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=200, help="chunks per stream")
    parser.add_argument("--port", type=int, default=18785)
    args = parser.parse_args()
    use_fast_loop()
    clock = JournalClock()
    for name in ("add", "tick", "close"):  # flush runs inside these
        clock.wrap(name)
    print(
        f"reproduce: python benchmarks/bench_client_journal.py --seconds {args.seconds:g} "
        f"--pairs {args.pairs} --workers {args.workers} --rate {args.rate:g} "
        f"--streams {args.streams} --tokens {args.tokens}"
    )
    print(f"load average before: {os.getloadavg()}")
    server = start_server(args.port, ttft_ms=2.0, itl_ms=2.0)
    target = f"http://127.0.0.1:{args.port}"
    try:

        def short() -> BenchSpec:
            return BenchSpec(
                workload="fixed",
                target=target,
                workload_params={"input_tokens": "16", "output_tokens": "2"},
                rate=args.rate,
                num_requests=int(args.rate * args.seconds),
                workers=args.workers,
                model="mock",
            )

        def streams() -> BenchSpec:
            return BenchSpec(
                workload="fixed",
                target=target,
                workload_params={"input_tokens": "16", "output_tokens": str(args.tokens)},
                concurrency=args.streams,
                duration_s=args.seconds,
                workers=args.workers,
                model="mock",
            )

        for name, make in (("short requests", short), ("long streams", streams)):
            print(json.dumps(compare(name, make, args.pairs, clock), indent=2))
    finally:
        server.terminate()
        server.wait()
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
