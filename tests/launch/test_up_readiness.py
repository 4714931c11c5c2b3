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
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from tests.support.processes import UP_READY, read_until, reap

from inhouse.launch.listeners import busy_ports, is_own_listener, listener_pids
from inhouse.launch.plan import ProcessSpec
from inhouse.launch.supervisor import Supervisor

UP = [sys.executable, "-m", "inhouse.cli.up"]
ENGINE = [sys.executable, "-m", "inhouse.cli.engine"]


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


def _attached_stack(tmp_path: Path, *urls: str) -> Path:
    """One pool `up` attaches to (engine `url`), serving `tiny`, a replica per URL."""
    stack = {"version": 1, "name": "attached", "pools": [{"name": "ext", "engine": "url",
             "model": "meta-llama/Llama-3.1-8B-Instruct", "served_model_name": "tiny",
             "replicas": len(urls), "urls": list(urls)}]}  # fmt: skip
    (tmp_path / "stack.yaml").write_text(yaml.safe_dump(stack))
    return tmp_path / "stack.yaml"


@pytest.fixture
def loading_engine(free_port: Callable[[], int]) -> Iterator[tuple[str, str]]:
    """A simulated engine that loads for 4 s (/health 503 meanwhile): its URL and admin URL."""
    port, admin = free_port(), free_port()
    engine = subprocess.Popen(
        [*ENGINE, "--model", "meta-llama/Llama-3.1-8B-Instruct", "--served-model-name", "tiny",
         "--max-model-len", "1024", "--load-time-s", "4", "--port", str(port),
         "--admin-port", str(admin)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin}"
    finally:
        engine.terminate()
        engine.wait(30)


def test_up_is_not_ready_while_an_attached_url_does_not_answer(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    # `up` never probed a `url` pool: it printed "ready" with nothing listening there.
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = subprocess.run(
        [*UP, str(_attached_stack(tmp_path, dead)), "--no-gateway", "--ready-timeout", "1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "is ready" not in result.stdout, result.stdout
    assert result.returncode == 1
    assert f"pool ext: the attached engine at {dead} did not answer" in result.stderr, result.stderr


def test_up_says_ready_once_an_attached_engine_has_loaded(
    tmp_path: Path, loading_engine: tuple[str, str]
) -> None:
    # `up` said the stack was ready at once, while the engine still loaded (/health 503);
    # the engine's admin port dates its readiness on the same monotonic clock.
    url, admin = loading_engine
    up = subprocess.Popen(
        [*UP, str(_attached_stack(tmp_path, url)), "--no-gateway", "--ready-timeout", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        output = "".join(read_until(up, lambda line: UP_READY in line))
        said_ready = time.monotonic()
        assert "stack attached is ready" in output, output
        try:
            loaded = httpx.get(f"{admin}/loaded", timeout=5).json()
        except httpx.ConnectError:  # said ready before the engine even listened
            loaded = {"loaded": False}
        assert loaded["loaded"] and loaded["loaded_at_monotonic"] <= said_ready, loaded
        # Nothing of its own to run (every pool attached, no gateway): the check is all it
        # does, so it says so and exits 0; it said "every process has exited" and exited 1.
        assert up.wait(timeout=30) == 0
        assert up.stdout is not None
        rest = up.stdout.read()
        assert "nothing to supervise" in rest and "every process has exited" not in rest, rest
    finally:
        reap(up, [])
        if up.stderr is not None:
            up.stderr.close()


def test_a_gateway_in_front_does_not_make_a_dead_attached_url_ready(
    tmp_path: Path, free_port: Callable[[], int], loading_engine: tuple[str, str]
) -> None:
    # The gateway turns ready once any replica answers: with one of two attached replicas
    # dead, `up` said the stack was ready.
    live, _ = loading_engine
    dead = f"http://127.0.0.1:{free_port()}"
    stack = _attached_stack(tmp_path, live, dead)
    up = subprocess.Popen(
        [*UP, str(stack), "--port", str(free_port()), "--metrics-port", str(free_port()),
         "--demo-key", "ihk-test", "--ready-timeout", "10", "--log-dir", str(tmp_path / "logs")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        output = "".join(read_until(up, lambda line: UP_READY in line))  # or to its end
        assert "is ready" not in output, output
        assert up.wait(timeout=60) == 1
        assert up.stderr is not None
        err = up.stderr.read()
    finally:
        reap(up, [])
        if up.stderr is not None:
            up.stderr.close()
    assert f"pool ext: the attached engine at {dead} did not answer" in err, err
    assert live not in err
