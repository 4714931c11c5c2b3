"""The virtual soak's speed: how long two simulated weeks of the CRM fleet take.

    python benchmarks/bench_soak_speed.py [--hours 1] [--stack STACK]

Runs `inhouse drill`'s virtual soak (the CRM example's chat and utility workloads mixed, at 60%
of planned peak, in one fleet whose state carries over) for `--hours` simulated hours against
the built-in demo stack (the CRM shape: two 70B FP8 TP4 replicas) or `--stack`, and prints
simulated seconds per wall second, the projected wall time of two days (`drill --quick`) and of
two weeks, against the target of two weeks in 10 minutes, with the host's load (2 shared cores:
read the wall time against the fixed-loop check).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from inhouse.drill.soak_virtual import CRM_EXAMPLE, load_requirements, simulate_soak
from inhouse.launch.demo import demo_stack
from inhouse.spec.load import load_stack

COMMAND = "python benchmarks/bench_soak_speed.py"
TARGET_TWO_WEEKS_S = 600.0
TWO_DAYS_S, TWO_WEEKS_S = 2 * 86_400.0, 14 * 86_400.0


def host_speed() -> float:
    start = time.process_time()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.process_time() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hours", type=float, default=1.0, help="simulated hours to time")
    parser.add_argument("--stack", type=Path, help="stack file (default: the built-in demo)")
    args = parser.parse_args()
    stack = load_stack(args.stack) if args.stack else demo_stack(2)
    requirements = load_requirements(CRM_EXAMPLE)
    loop_before, load_before = host_speed(), os.getloadavg()[0]
    wall, cpu = time.perf_counter(), time.process_time()
    day = simulate_soak(stack, requirements, 1, day_s=args.hours * 3600.0)[0]
    wall_s, cpu_s = time.perf_counter() - wall, time.process_time() - cpu
    simulated = args.hours * 3600.0
    speed = simulated / wall_s
    print(f"== virtual soak, CRM workloads at 60% of peak, stack {stack.name}")
    print(f"   simulated               {args.hours:g} h, {day.num_requests:,} requests")
    print(f"   p95 TTFT / TPOT         {day.p95_ttft_ms:.0f} ms / {day.p95_tpot_ms:.1f} ms")
    print(f"   prefix hit / KV mean    {day.prefix_hit_rate:.1%} / {day.kv_use_mean:.1%}")
    print(f"   wall / CPU              {wall_s:.1f} s / {cpu_s:.1f} s")
    print(f"   simulated s per wall s  {speed:.0f}  (per CPU s {simulated / cpu_s:.0f})")
    print(f"   requests per wall s     {day.num_requests / wall_s:,.0f}")
    print(f"   two days (--quick)      {TWO_DAYS_S / speed / 60:.1f} min projected")
    two_weeks = TWO_WEEKS_S / speed
    print(f"   two weeks               {two_weeks / 60:.1f} min projected")
    need = TWO_WEEKS_S / TARGET_TWO_WEEKS_S
    print(f"   needed for the target   {need:.0f} simulated s per wall s "
          f"({need / speed:.1f}x faster than measured)")  # fmt: skip
    print(f"   load average (1 min)    {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(f"   host speed check        fixed loop {loop_before:.2f} CPU s before, "
          f"{host_speed():.2f} after")  # fmt: skip
    ok = two_weeks <= TARGET_TWO_WEEKS_S
    print(f"   [{'ok' if ok else 'MISS'}] two weeks within {TARGET_TWO_WEEKS_S / 60:g} minutes")
    stack_flag = f" --stack {args.stack}" if args.stack else ""
    print(f"\nreproduce: {COMMAND} --hours {args.hours:g}{stack_flag}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
