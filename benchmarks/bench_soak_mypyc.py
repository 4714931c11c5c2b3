"""What compiling the simulator's Python with mypyc buys the virtual soak, unchanged code.

    pip install 'mypy==1.15.0'   # mypyc ships with mypy; 1.19 fails on one signature
    python benchmarks/bench_soak_mypyc.py [--hours 0.1] [--modules engine|all]

Copies `src/` to a temporary directory, compiles the fleet loop's modules there with mypyc
(C extensions beside the sources, which Python imports in their place), then runs
`benchmarks/bench_soak_speed.py` once on the plain tree and once on the compiled one, each in its
own process, and prints both speeds, their ratio and whether the two runs' figures (requests,
p95 TTFT / TPOT, prefix hit, KV use) are identical. It answers one question: is compiling the
Python we have enough for the soak's target (two simulated weeks in 10 minutes), or does the
fleet loop need a core written for speed? The build takes 1-3 minutes on two cores.

`--modules engine` compiles the engine, the step model, hashing and the fleet loop;
`all` adds routing. Left out of both: `engine/queue.py` and the workloads, whose
`itertools.count()`, compiled, raises a SystemError under mypy 1.15.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMAND = "python benchmarks/bench_soak_mypyc.py"
ENGINE = [
    "inhouse/engine/block_pool.py",
    "inhouse/engine/kv_cache.py",
    "inhouse/engine/scheduler.py",
    "inhouse/engine/core.py",
    "inhouse/engine/request.py",
    "inhouse/engine/reservation.py",
    "inhouse/hashing.py",
    "inhouse/perf/step.py",
    "inhouse/fleet/simulator.py",
    "inhouse/fleet/events.py",
]
ALL = [
    *ENGINE,
    "inhouse/routing/policies/cache_aware.py",
    "inhouse/routing/pools.py",
    "inhouse/routing/index.py",
]
FIGURES = ("simulated  ", "p95 TTFT / TPOT", "prefix hit / KV mean")


def run_soak(src: Path, hours: float) -> tuple[float, list[str], str]:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/bench_soak_speed.py"), "--hours", str(hours)],
        env={**os.environ, "PYTHONPATH": str(src)},
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    match = re.search(r"simulated s per wall s\s+(\d+)", out)
    if match is None:
        raise SystemExit(f"the soak did not run on {src}:\n{out}")
    figures = [line.strip() for line in out.splitlines() if line.strip().startswith(FIGURES)]
    return float(match.group(1)), figures, out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hours", type=float, default=0.1, help="simulated hours per run")
    parser.add_argument("--modules", choices=("engine", "all"), default="engine")
    args = parser.parse_args()
    if shutil.which("mypyc") is None:
        raise SystemExit("mypyc not found: pip install 'mypy==1.15.0'")
    modules = ENGINE if args.modules == "engine" else ALL
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        shutil.copytree(ROOT / "src", tree / "src")
        (tree / "examples").symlink_to(ROOT / "examples")  # the soak's CRM requirements
        build = subprocess.run(
            ["mypyc", *modules], cwd=tree / "src", capture_output=True, text=True, check=False
        )
        if build.returncode != 0:
            raise SystemExit(f"mypyc failed:\n{build.stdout[-3000:]}{build.stderr[-3000:]}")
        plain, plain_figures, _ = run_soak(ROOT / "src", args.hours)
        compiled, compiled_figures, _ = run_soak(tree / "src", args.hours)
    print(f"== virtual soak, {args.hours:g} simulated h, plain vs mypyc ({args.modules})")
    print(f"   plain Python            {plain:.0f} simulated s per wall s")
    print(f"   mypyc-compiled          {compiled:.0f} simulated s per wall s")
    print(f"   ratio                   {compiled / plain:.2f}x")
    print(f"   target needs            2016 simulated s per wall s "
          f"({2016 / compiled:.1f}x beyond the compiled run)")  # fmt: skip
    same = plain_figures == compiled_figures
    print(f"   figures identical       {'yes' if same else 'NO'}")
    for line in compiled_figures:
        print(f"     {line}")
    print(f"\nreproduce: {COMMAND} --hours {args.hours:g} --modules {args.modules}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
