"""The pool-choice benchmark runs, checks the two paths agree, and prints its command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_pool_choice_benchmark_prints_both_paths_and_its_command() -> None:
    argv = [sys.executable, str(ROOT / "benchmarks" / "bench_pool_choice.py"), "--calls", "50"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for model in ("chat-70b", "small"):
        assert f"model {model}" in done.stdout
    assert "routing.pools.choose_pool over views" in done.stdout
    assert "python benchmarks/bench_pool_choice.py --replicas 4 --calls 50" in done.stdout
