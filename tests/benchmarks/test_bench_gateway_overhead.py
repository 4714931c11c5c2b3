"""The gateway benchmarks still run end to end: the overhead benchmark (a short, slow run) with
every path it compares, another checkout's gateway (`--compare-src`) among them, serving its
requests without errors, and the byte relay it uses as the floor relaying; the in-process
admission benchmark printing its figures."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_short_run_reports_every_path(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    trace = tmp_path / "trace.csv"
    argv = [sys.executable, str(ROOT / "benchmarks/bench_gateway_overhead.py"), "--rate", "40",
            "--probe-rate", "20", "--seconds", "1", "--window", "0.5", "--no-sglang",
            "--no-hit-rate", "--json", str(out), "--trace", str(trace),
            "--compare-src", str(ROOT)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    latency = json.loads(out.read_text())["latency"]
    for name in ("gateway", "gateway@compare", "tcp-relay", "envoy+gateway"):
        row = latency[name]
        assert row["errors"] == 0 and row["direct_same_windows"]["errors"] == 0
        assert row["requests"] > 20 and row["direct_same_windows"]["requests"] > 5
        assert math.isfinite(row["added_p50_ms"]) and math.isfinite(row["added_p99_ms"])
        assert row["cpu_s_per_1000"] > 0
        assert row["host"]["windows"] == 2
    assert latency["gateway"]["loop_lag"]["timers"] > 0
    lines = trace.read_text().splitlines()
    assert lines[0] == "path,scheduled_s,client_lag_ms,ttft_ms"
    paths = {line.split(",")[0] for line in lines[1:]}
    assert paths == {"gateway", "gateway@compare", "tcp-relay", "envoy+gateway",
                     "direct during gateway", "direct during gateway@compare",
                     "direct during tcp-relay", "direct during envoy+gateway"}  # fmt: skip
    assert "reproduce: python benchmarks/bench_gateway_overhead.py" in done.stdout


def test_admission_benchmark_prints_every_step() -> None:
    argv = [sys.executable, str(ROOT / "benchmarks/bench_gateway_admission.py"), "--requests",
            "200", "--replicas", "3", "--limits"]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    figures = dict(line.strip().split(": ", 1) for line in done.stdout.splitlines()
                   if line.startswith("  "))  # fmt: skip
    for step in ("key_and_parse", "admit", "place", "total"):
        p50, p99 = float(figures[f"{step}_p50_us"]), float(figures[f"{step}_p99_us"])
        assert 0 < p50 <= p99
    assert float(figures["total_p50_us"]) >= float(figures["place_p50_us"])
    assert "reproduce: python benchmarks/bench_gateway_admission.py" in done.stdout
