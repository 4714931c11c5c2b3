"""The live soak's "p95 TTFT stable" check on stable and on regressed records, in virtual time.

    python benchmarks/bench_soak_p95_check.py [--runs 300] [--duration 60] [--window 10]

Runs the live soak's load (agent, 60 sessions, output 60:200) against the CRM example's stack in
the fleet simulator, one run per seed (no host noise: what is left is the workload's own), cuts
it into the drill's windows and prints how often the check fails it as it is (a stable stack:
a false alarm), and with the TTFTs of the last third multiplied by 2 and 3 (a real regression).
Reference: 300 runs of 60 s failed 0.7%, 47% at 2x, 89% at 3x; 30 of 600 s (`--duration 600
--window 30`) none, 93% at 2x, all at 3x (docs/drill.md).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from inhouse.drill.drills.soak import P95_SHARE, p95_shift
from inhouse.fleet.simulator import simulate_stack
from inhouse.spec.load import load_stack
from inhouse.workload.registry import make_workload

STACK = Path(__file__).resolve().parents[1] / "examples" / "crm-copilot" / "stack.yaml"
FACTORS = (1.0, 2.0, 3.0)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=300, help="seeds 0..runs-1")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--window", type=float, default=10.0, help="the drill's window, s")
    args = parser.parse_args()
    stack = load_stack(STACK)
    num = round(args.duration / args.window)
    rows = [{"t0": args.window * i, "t1": args.window * (i + 1)} for i in range(num)]
    late_from = rows[num - max(1, round((num - 1) / 3))]["t0"]
    fails = dict.fromkeys(FACTORS, 0)
    for seed in range(args.runs):
        workload = make_workload("agent", {"sessions": "60", "output": "60:200"})
        run = simulate_stack(stack, workload, duration_s=args.duration, seed=seed)
        streamed = [(r.arrival_s, r.ttft_s * 1000) for r in run.records if r.ok]
        for factor in FACTORS:
            scaled = [(t, x * factor if t >= late_from else x) for t, x in streamed]
            fails[factor] += p95_shift(rows, scaled).ratio_low > 1 + P95_SHARE
    print(f"{args.runs} runs of {args.duration:g} s, windows {args.window:g} s")
    for factor, count in fails.items():
        label = "stable" if factor == 1.0 else f"last third x{factor:g}"
        print(f"  {label:>16}: check failed {count / args.runs:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
