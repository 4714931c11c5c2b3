"""The weights benchmarks still run end to end (tiny sizes): figures for every method, the
command that reproduces them, and the resume check's own assertions passing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(script: str, *args: str) -> str:
    argv = [sys.executable, str(ROOT / "benchmarks" / script), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow
def test_pull_benchmark_reports_every_method_and_the_resume() -> None:
    out = run("bench_weights_pull.py", "--mb", "24", "--rounds", "1", "--part-mib", "1",
              "--resume-rate", "20")  # fmt: skip
    assert "python benchmarks/bench_weights_pull.py --mb 24" in out
    for method in ("raw GET", "raw to disk", "s3transfer", "pull"):
        assert f"\n{method} " in out
    assert "pull / raw GET:" in out and "= total - kept, verified" in out


@pytest.mark.slow
def test_verify_benchmark_compares_with_sha256sum() -> None:
    out = run("bench_weights_verify.py", "--mb", "8", "--rounds", "1")
    assert "python benchmarks/bench_weights_verify.py --mb 8" in out
    assert "verify / sha256sum:" in out and "verify / library hash:" in out
