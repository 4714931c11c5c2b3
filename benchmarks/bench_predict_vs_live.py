"""Prediction vs measurement: the demo stack under the `agent` workload, simulated and live.

`inhouse up` starts the built-in demo (the CRM copilot: Llama-3.3-70B FP8, TP=4, simulated
replicas behind the gateway); `inhouse bench` drives the `agent` workload through the gateway;
`inhouse bench --simulate` runs the same workload and load through the fleet simulator on the
stack file `up` wrote. The table compares p50/p95 TTFT and TPOT (target: within 10%).

The live run shares this machine's cores with the engines and the gateway, so keep the load
modest (`--sessions`). Reproduce:

    python benchmarks/bench_predict_vs_live.py [--sessions 8 --duration 90 --seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KEY = "ihk-bench-predict-vs-live"
FIGURES = ("p50_ttft_ms", "p95_ttft_ms", "p50_tpot_ms", "p95_tpot_ms")


def start_up(port: int, engine_port: int, log_dir: Path) -> tuple[subprocess.Popen[str], Path]:
    cmd = [
        sys.executable, "-m", "inhouse.cli.main", "up", "--port", str(port),
        "--engine-base-port", str(engine_port), "--demo-key", KEY, "--log-dir", str(log_dir),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    stack: Path | None = None
    deadline = time.monotonic() + 180
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        found = re.search(r"(/\S*inhouse-up-\S*/stack\.yaml)", line)
        if found:
            stack = Path(found.group(1))
        if "Ctrl-C stops the stack" in line:
            break
    if (log_dir / "stack.yaml").is_file():
        stack = log_dir / "stack.yaml"
    if stack is None:
        candidates = sorted(Path(tempfile.gettempdir()).glob("inhouse-up-*/stack.yaml"))
        stack = max(candidates, key=lambda p: p.stat().st_mtime) if candidates else None
    if stack is None:
        proc.send_signal(signal.SIGTERM)
        raise SystemExit("inhouse up did not report its stack file:\n" + "".join(lines))
    return proc, stack


def bench(args: argparse.Namespace, extra: list[str], out: Path) -> dict:
    cmd = [
        sys.executable, "-m", "inhouse.cli.main", "bench", "--workload", "agent",
        "--concurrency", str(args.sessions), "--duration", str(args.duration),
        "--seed", str(args.seed), "--no-charts", "--no-progress", "--out", str(out), *extra,
    ]  # fmt: skip
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return json.loads((out / "result.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--duration", type=float, default=90.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port", type=int, default=18800)
    parser.add_argument("--engine-port", type=int, default=18810)
    args = parser.parse_args()
    print(
        "reproduce: python benchmarks/bench_predict_vs_live.py "
        f"--sessions {args.sessions} --duration {args.duration:g} --seed {args.seed}"
    )
    print(f"load average before: {os.getloadavg()}")
    work = Path(tempfile.mkdtemp(prefix="ih-predict-live-"))
    up, stack = start_up(args.port, args.engine_port, work / "logs")
    try:
        time.sleep(2.0)
        engines = [f"http://127.0.0.1:{args.engine_port + i}/metrics" for i in range(2)]
        live_flags = ["--target", f"http://127.0.0.1:{args.port}", "--api-key", KEY,
                      "--model", "chat-70b"]  # fmt: skip
        for url in engines:
            live_flags += ["--metrics-url", url]
        live = bench(args, live_flags, work / "live")
    finally:
        up.send_signal(signal.SIGTERM)
        up.wait(60)
    sim = bench(args, ["--simulate", str(stack)], work / "simulated")
    print(f"\nstack {stack}; results in {work}")
    print(f"{'figure':<14} {'simulated':>10} {'live':>10} {'diff':>8}")
    worst = 0.0
    for key in FIGURES:
        a, b = sim[key], live[key]
        diff = 100.0 * (b - a) / a if a else 0.0
        worst = max(worst, abs(diff))
        print(f"{key:<14} {a:>10.1f} {b:>10.1f} {diff:>+7.1f}%")
    for key in (
        "completed",
        "failed",
        "request_throughput",
        "prefix_cache_hit_rate_client",
        "prefix_cache_hit_rate_server",
        "theoretical_hit_rate",
        "client_bottleneck",
    ):
        print(f"{key:<30} simulated {sim.get(key)}  live {live.get(key)}")  # fmt: skip
    print(f"\nworst p50/p95 TTFT/TPOT difference: {worst:.1f}% (target: within 10%)")


if __name__ == "__main__":
    main()
