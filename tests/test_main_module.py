"""`python -m inhouse` is the `inhouse` command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def test_python_dash_m_inhouse_runs_the_command() -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-m", "inhouse", "--help"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: inhouse")
    assert "simulate" in done.stdout and "drill" in done.stdout
