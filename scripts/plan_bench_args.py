"""Prints `inhouse bench` arguments that drive one workload of a plan as the plan's simulator
replays it (plan.json -> reproduce.simulate), for scripts/reference-run.sh.

    python scripts/plan_bench_args.py PLAN.json WORKLOAD [--cold]

`--cold` is the cold-prefix probe `inhouse report` reads, run alongside the workload's own run:
`COLD_SESSIONS` (default 6) single-turn sessions, each with a system prompt of its own
(`num_apps` = a new app per session), so every request it sends finds nothing cached while the
planned load runs; labelled `WORKLOAD-cold`. (`inhouse bench --plan DIR --workload NAME`
does the rest of this where it exists.)
"""

from __future__ import annotations

import json
import os
import shlex
import sys


def bench_args(plan: dict, workload: str, cold: bool) -> list[str]:
    command = shlex.split(plan["reproduce"]["simulate"][workload])
    kind = command[command.index("--workload") + 1]
    params = dict(p.split("=", 1) for p in command[command.index("-W") + 1].split(","))
    model = params.pop("model", workload)
    label = f"{workload}-cold" if cold else workload
    args = ["--workload", kind, "--model", model, "--label", label]
    if kind == "utility" and "rate_per_s" in params:
        args += ["--rate", params.pop("rate_per_s")]
    if cold:
        sessions = os.environ.get("COLD_SESSIONS", "6")
        params.update(num_apps="100000", sessions=sessions, min_turns="1", max_turns="1")
    for key, value in params.items():
        args += ["-p", f"{key}={value}"]
    return args


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as handle:
        plan = json.load(handle)
    print(" ".join(shlex.quote(a) for a in bench_args(plan, sys.argv[2], "--cold" in sys.argv)))
