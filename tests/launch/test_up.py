"""`inhouse up`: the process plan, the demo stack, and a live stack started and stopped."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import yaml
from tests.support.processes import UP_READY, read_until, reap

from inhouse.errors import SpecError
from inhouse.launch.demo import demo_stack
from inhouse.launch.plan import plan_stack
from inhouse.spec.stack import parse_stack

UP = [sys.executable, "-m", "inhouse.cli.up"]


def test_demo_stack_is_the_crm_copilot_shape_scaled_to_the_machine() -> None:
    for cpus, replicas in ((1, 1), (2, 2), (64, 2)):
        (pool,) = demo_stack(cpus).pools
        assert pool.replicas == replicas
        assert (pool.tp, pool.quant, pool.knobs.scheduling_policy) == (4, "fp8", "priority")
        assert pool.lora_adapters


def test_plan_launches_simulated_and_vllm_and_attaches_urls() -> None:
    stack = parse_stack(
        {
            "name": "mixed",
            "pools": [
                {"name": "sim", "model": "meta-llama/Llama-3.1-8B-Instruct", "replicas": 2},
                {"name": "real", "model": "/m/tiny", "engine": "vllm", "served_model_name": "t"},
                {"name": "ext", "model": "x", "engine": "url", "urls": ["http://h:9/"]},
            ],
        }
    )
    plan = plan_stack(stack, 9100, vllm_python="/venv/bin/python")
    assert [p.name for p in plan.processes] == ["sim-0", "sim-1", "real-0"]
    assert plan.processes[0].argv[1:3] == ["-m", "inhouse.cli.engine"]
    assert plan.processes[2].argv[:5] == [
        "/venv/bin/python",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/m/tiny",
    ]
    assert plan.pool_urls == {
        "sim": ["http://127.0.0.1:9100", "http://127.0.0.1:9101"],
        "real": ["http://127.0.0.1:9102"],
        "ext": ["http://h:9"],
    }
    assert plan.attached == {"ext": "url"}


def test_sglang_without_urls_is_refused() -> None:
    stack = parse_stack({"name": "s", "pools": [{"name": "p", "model": "m", "engine": "sglang"}]})
    with pytest.raises(SpecError, match="urls"):
        plan_stack(stack, 9100)


def test_dry_run_prints_processes_without_starting_them() -> None:
    out = subprocess.run(
        [*UP, "--dry-run", "--engine-base-port", "9300"], check=True, capture_output=True, text=True
    ).stdout
    assert "chat-0 [simulated] http://127.0.0.1:9300" in out
    assert "--served-model-name chat-70b" in out and "--tp 4" in out


def _write(tmp: Path, stack: dict[str, object]) -> Path:
    path = tmp / "stack.yaml"
    path.write_text(yaml.safe_dump(stack))
    return path


def _two_free_ports(free_port: Callable[[], int]) -> int:
    """A port whose successor is free too (up gives replicas consecutive ports)."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise AssertionError("no two consecutive free ports")


def test_up_starts_waits_serves_and_stops_cleanly(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    port = _two_free_ports(free_port)
    stack = _write(
        tmp_path,
        {
            "version": 1,
            "name": "two",
            "pools": [
                {
                    "name": "p",
                    "model": "meta-llama/Llama-3.1-8B-Instruct",
                    "served_model_name": "tiny",
                    "replicas": 2,
                    "knobs": {"max_model_len": 1024, "load_time_s": 0.5, "shutdown_timeout_s": 2},
                }
            ],
        },
    )
    process = subprocess.Popen(
        [
            *UP,
            str(stack),
            "--no-gateway",
            "--engine-base-port",
            str(port),
            "--log-dir",
            str(tmp_path / "logs"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        output = "".join(read_until(process, lambda line: UP_READY in line))
        assert "stack two is ready" in output
        for offset in (0, 1):
            url = f"http://127.0.0.1:{port + offset}"
            assert f"{url}/v1" in output
            reply = httpx.post(f"{url}/v1/completions", json={"prompt": "x", "max_tokens": 2})
            assert reply.status_code == 200
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        for offset in (0, 1):
            with pytest.raises(httpx.ConnectError):
                httpx.get(f"http://127.0.0.1:{port + offset}/health", timeout=1)
        assert (tmp_path / "logs" / "p-0.log").read_text()
    finally:
        reap(process, [])


def test_up_reports_an_engine_that_dies_before_ready(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    stack = _write(
        tmp_path, {"version": 1, "name": "bad", "pools": [{"name": "p", "model": "no-such-model"}]}
    )
    start = time.monotonic()
    result = subprocess.run(
        [
            *UP,
            str(stack),
            "--port",  # every port free: a stack left on the defaults must not fail this test
            str(free_port()),
            "--metrics-port",
            str(free_port()),
            "--engine-base-port",
            str(free_port()),
            "--log-dir",
            str(tmp_path / "logs"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "p-0 exited with code" in result.stderr
    assert "unknown model 'no-such-model'" in result.stderr  # the engine's own message
    assert time.monotonic() - start < 30


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--port", "70000"], "--port 70000 is not a TCP port; choose one in 1..65535"),
        (["--port", "0"], "--port 0 is not a TCP port; choose one in 1..65535"),
        (["--metrics-port", "99999"], "--metrics-port 99999 is not a TCP port"),
        (["--engine-base-port", "-5"], "--engine-base-port -5 is not a TCP port"),
        (
            ["--engine-base-port", "65535"],  # the second replica would take 65536
            "--engine-base-port 65535: the stack's 2 engine replicas take consecutive ports "
            "up to 65536, past 65535; choose a base port of at most 65534",
        ),
    ],
)
def test_up_refuses_port_flags_out_of_range_before_starting_anything(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    pool = {"name": "p", "model": "meta-llama/Llama-3.1-8B-Instruct", "replicas": 2}
    stack = _write(tmp_path, {"version": 1, "name": "ports", "pools": [pool]})
    result = subprocess.run(
        [*UP, str(stack), "--engine-base-port", "20100", *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert "[p-0]" not in result.stdout  # no engine was started


def test_up_refuses_a_log_dir_it_cannot_write(tmp_path: Path, free_port: Callable[[], int]) -> None:
    pool = {"name": "p", "model": "meta-llama/Llama-3.1-8B-Instruct"}
    stack = _write(tmp_path, {"version": 1, "name": "logs", "pools": [pool]})
    not_a_dir = tmp_path / "logs"
    not_a_dir.write_text("a file where the log directory should be\n")
    ports = ["--port", str(free_port()), "--metrics-port", str(free_port())]
    ports += ["--engine-base-port", str(free_port())]
    result = subprocess.run(
        [*UP, str(stack), *ports, "--log-dir", str(not_a_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert f"--log-dir {not_a_dir}: cannot write there" in result.stderr
    assert "Traceback" not in result.stderr
    assert not_a_dir.read_text() == "a file where the log directory should be\n"
