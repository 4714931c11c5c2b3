"""`inhouse up` SIGKILLed takes its children with it (review, stop 25): before, every engine
and the gateway (each in a session of its own) kept running and held its port, and the next
`up` found "another process holds its port"."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import yaml
from tests.support.processes import UP_READY, children_of, read_until, reap, wait_free, wait_gone

UP = [sys.executable, "-m", "inhouse.cli.up"]


def test_up_killed_takes_its_engines_and_gateway_with_it(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    stack = {"version": 1, "name": "orphans", "pools": [{"name": "p", "model":
             "meta-llama/Llama-3.1-8B-Instruct", "served_model_name": "tiny",
             "knobs": {"max_model_len": 1024, "load_time_s": 0.2}}]}  # fmt: skip
    (tmp_path / "stack.yaml").write_text(yaml.safe_dump(stack))
    port, metrics, base = free_port(), free_port(), free_port()
    process = subprocess.Popen(
        [*UP, str(tmp_path / "stack.yaml"), "--port", str(port), "--metrics-port",
         str(metrics), "--engine-base-port", str(base), "--log-dir", str(tmp_path / "logs")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    children: list[int] = []
    try:
        read_until(process, lambda line: UP_READY in line)
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        children = children_of(process.pid)
        assert len(children) == 2, children  # the engine and the gateway
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        assert wait_gone(children, 5.0) == []
        assert wait_free([port, metrics, base], 5.0) == []
    finally:
        reap(process, children)
