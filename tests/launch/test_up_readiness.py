"""`inhouse up` calls a stack ready only when its own children answer (issue 15, defect 10):
a port another process holds stops it before anything starts, and an answer from another
process on a child's port is not the child's."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from inhouse.launch.listeners import busy_ports, is_own_listener, listener_pids
from inhouse.launch.plan import ProcessSpec
from inhouse.launch.supervisor import Supervisor

UP = [sys.executable, "-m", "inhouse.cli.up"]


class _Healthy(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def impostor() -> Iterator[int]:
    """Another process's server (here, this test's) answering /health 200 on a port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_up_refuses_to_start_on_a_port_another_process_answers(
    tmp_path: Path, impostor: int
) -> None:
    stack = {"version": 1, "name": "taken", "pools": [{"name": "p", "model":
             "meta-llama/Llama-3.1-8B-Instruct", "served_model_name": "tiny"}]}  # fmt: skip
    (tmp_path / "stack.yaml").write_text(yaml.safe_dump(stack))
    started = time.monotonic()
    result = subprocess.run(
        [*UP, str(tmp_path / "stack.yaml"), "--no-gateway", "--engine-base-port", str(impostor),
         "--log-dir", str(tmp_path / "logs"), "--ready-timeout", "20"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "is ready" not in result.stdout
    assert result.returncode != 0
    assert f"port(s) {impostor} already in use" in result.stderr
    assert time.monotonic() - started < 15
    assert not (tmp_path / "logs" / "p-0.log").exists()  # nothing was started


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")
def test_a_child_is_not_ready_while_another_process_answers_on_its_port(
    tmp_path: Path, impostor: int
) -> None:
    assert listener_pids(impostor) == {os.getpid()}
    assert is_own_listener(impostor, os.getpgid(0)) is True
    assert busy_ports("127.0.0.1", [impostor]) == [impostor]
    supervisor = Supervisor(tmp_path / "logs")
    child = ProcessSpec("engine", "simulated", ["sleep", "30"], f"http://127.0.0.1:{impostor}")
    supervisor.start(child)
    try:
        problems = supervisor.wait_ready(1.5, poll_s=0.1)
    finally:
        supervisor.stop(5)
    assert problems[0].startswith("not ready after")
    assert "another process holds its port" in problems[1]


def test_a_second_interrupt_while_draining_kills_at_once_without_a_traceback(
    tmp_path: Path,
) -> None:
    """Ctrl-C twice at 3 a.m.: the first drains, the second kills what is left, at once."""
    script = tmp_path / "twice.py"
    script.write_text(
        "import os, signal, sys, threading, time\n"
        "from inhouse.launch.plan import ProcessSpec\n"
        "from inhouse.launch.supervisor import Supervisor\n"
        "stubborn = 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        'print("up", flush=True); time.sleep(600)\'\n'
        "sup = Supervisor(None)\n"
        "child = sup.start(ProcessSpec('stubborn', 'simulated', [sys.executable, '-c', stubborn],"
        " 'http://127.0.0.1:9'))\n"
        "time.sleep(1.0)\n"
        "threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
        "started = time.monotonic()\n"
        "sup.stop(60.0)\n"
        "print('stopped after', round(time.monotonic() - started), 'child', child.process.poll())\n"
    )
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=30
    )
    assert "Traceback" not in result.stderr, result.stderr
    assert "inhouse up: interrupted again; killing every process now" in result.stdout
    assert "stopped after 1 child -9" in result.stdout
