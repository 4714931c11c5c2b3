"""`inhouse up` SIGKILLed takes its children with it (review, stop 25): before, every engine
and the gateway (each in a session of its own) kept running and held its port, and the next
`up` found "another process holds its port"."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import yaml

from inhouse.launch.listeners import busy_ports

UP = [sys.executable, "-m", "inhouse.cli.up"]


def children_of(pid: int) -> list[int]:
    """The running processes whose parent is `pid` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


def is_running(pid: int) -> bool:
    """Alive and not a zombie (an orphan is reaped by whoever adopts it, maybe late)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if is_running(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return [p for p in pids if is_running(p)]


def wait_free(ports: list[int], timeout_s: float) -> list[int]:
    """The ports still held after `timeout_s` (a dead process's sockets close a moment late)."""
    deadline = time.monotonic() + timeout_s
    while (busy := busy_ports("127.0.0.1", ports)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return busy


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
        assert process.stdout is not None
        for line in process.stdout:
            if "Ctrl-C stops the stack" in line:
                break
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        children = children_of(process.pid)
        assert len(children) == 2, children  # the engine and the gateway
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        assert wait_gone(children, 5.0) == []
        assert wait_free([port, metrics, base], 5.0) == []
    finally:
        for pid in children:  # this test's own grandchildren, when the tether failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()
