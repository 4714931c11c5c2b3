"""Prints `inhouse bench` arguments that drive one workload of a plan as the plan's simulator
replays it, for scripts/reference-run.sh (`inhouse.report.bench_args`).

    python scripts/plan_bench_args.py PLAN.json WORKLOAD [--cold]

`--cold`: the cold-prefix probe, `COLD_SESSIONS` (default 6) single-turn sessions with system
prompts of their own, run alongside the workload's own run.
"""

from __future__ import annotations

import json
import os
import shlex
import sys

from inhouse.report.bench_args import bench_args

if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as handle:
        plan = json.load(handle)
    cold = "--cold" in sys.argv
    args = bench_args(
        plan, sys.argv[2], cold=cold, cold_sessions=int(os.environ.get("COLD_SESSIONS", "6"))
    )
    print(" ".join(shlex.quote(a) for a in args))
