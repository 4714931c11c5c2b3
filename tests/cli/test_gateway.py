"""`inhouse gateway`: key creation, and the real process over real sockets — streaming, the
demo key through `inhouse up`, SIGTERM drain, TLS."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from inhouse.cli.main import main
from inhouse.gateway.keys import KeyRing

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ENGINE = [sys.executable, "-m", "inhouse.cli.engine"]
GATEWAY = [sys.executable, "-m", "inhouse.cli.gateway"]
UP = [sys.executable, "-m", "inhouse.cli.up"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_http(url: str, timeout_s: float = 30.0, verify: bool = True) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=1, verify=verify).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} not ready after {timeout_s} s")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_keys_create_prints_a_key_once_and_its_hash(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["gateway", "keys", "create", "--tenant", "acme"]) == 0
    out = capsys.readouterr().out
    key = out.split("store it now): ")[1].split()[0]
    line = next(x for x in out.splitlines() if x.startswith("acme "))
    tenant, entry = line.split()
    assert key not in entry
    assert KeyRing([(tenant, entry)]).tenant_of(key) == "acme"
    other = "y" if key.endswith("x") else "x"  # a random key ends in "x" one time in 64
    assert KeyRing([(tenant, entry)]).tenant_of(key[:-1] + other) is None


def test_keys_create_checks_the_tenant_exists(tmp_path: Path) -> None:
    stack = tmp_path / "stack.yaml"
    stack.write_text(yaml.safe_dump(stack_data(1)))
    assert main(["gateway", "keys", "create", "--tenant", "nobody", "--stack", str(stack)]) == 2


def stack_data(replicas: int, gateway: dict[str, object] | None = None) -> dict[str, object]:
    return {
        "version": 1,
        "name": "cli",
        "pools": [
            {
                "name": "p",
                "model": MODEL,
                "served_model_name": "tiny",
                "replicas": replicas,
                "knobs": {"max_model_len": 1024, "shutdown_timeout_s": 5},
            }
        ],
        "gateway": gateway or {"health": {"interval_s": 0.2}},
    }


class Stack:
    def __init__(
        self,
        tmp: Path,
        gateway_args: list[str] | None = None,
        endpoints: Callable[[int], dict[str, object]] | None = None,
        replicas: int = 1,
    ) -> None:
        """An engine and a gateway in front of it, given the engine's URL, or `endpoints`
        (a function of the engine's port)."""
        self.engine_port = free_port()
        self.port = free_port()
        self.metrics_port = free_port()
        self.key = "test-demo-key"
        (tmp / "stack.yaml").write_text(yaml.safe_dump(stack_data(replicas)))
        if endpoints is None:
            data = {"pools": {"p": [f"http://127.0.0.1:{self.engine_port}"]}}
        else:
            data = endpoints(self.engine_port)
        (tmp / "endpoints.json").write_text(json.dumps(data))
        engine_args = ["--model", MODEL, "--served-model-name", "tiny", "--max-model-len", "1024",
                       "--port", str(self.engine_port), "--time-scale", "1.0"]  # fmt: skip
        env = {**os.environ, "INHOUSE_DEMO_KEY": self.key}
        self.engine = subprocess.Popen([*ENGINE, *engine_args], stderr=subprocess.DEVNULL)
        self.log = open(tmp / "gateway.log", "wb")  # noqa: SIM115 - closed in close()
        self.gateway = subprocess.Popen(
            [
                *GATEWAY,
                "--stack",
                str(tmp / "stack.yaml"),
                "--endpoints",
                str(tmp / "endpoints.json"),
                "--port",
                str(self.port),
                "--metrics-port",
                str(self.metrics_port),
                *(gateway_args or []),
            ],
            env=env,
            stderr=self.log,
        )

    def close(self) -> None:
        stop(self.gateway)
        stop(self.engine)
        self.log.close()  # fmt: skip


@pytest.fixture
def live_stack(tmp_path: Path) -> Iterator[Stack]:
    stack = Stack(tmp_path)
    try:
        wait_http(f"http://127.0.0.1:{stack.port}/health")
        yield stack
    finally:
        stack.close()


def test_streams_over_sockets_and_sigterm_drains(live_stack: Stack) -> None:
    url = f"http://127.0.0.1:{live_stack.port}"
    auth = {"authorization": f"Bearer {live_stack.key}"}
    body = {"model": "tiny", "prompt": "hello " * 10, "max_tokens": 200, "stream": True,
            "ignore_eos": True}  # fmt: skip
    with httpx.Client(base_url=url, headers=auth, timeout=30) as client:
        with client.stream("POST", "/v1/completions", json=body) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            events = []
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(line)
                    if len(events) == 3:
                        live_stack.gateway.send_signal(signal.SIGTERM)  # drain mid-stream
                        time.sleep(0.3)
                        late = httpx.post(f"{url}/v1/completions", json=body, headers=auth)
                        assert late.status_code == 503
                        assert late.json()["error"]["code"] == 503
        assert events[-1] == "data: [DONE]"
        assert not any('"error"' in e for e in events)
        assert sum('"text"' in e for e in events) == 200
    assert live_stack.gateway.wait(20) == 0


def test_a_scaled_pool_is_routed_to_the_addresses_its_name_resolves_to(tmp_path: Path) -> None:
    """The endpoints file render writes for a pool KEDA scales (2 replicas at least, so one
    URL for it would not do): the gateway resolves the name (`localhost`: the engine's one
    address) into the pool's 3 replica slots and serves through it."""

    def endpoints(port: int) -> dict[str, object]:
        return {
            "pools": {"p": [f"http://localhost:{port}"]},
            "discovery": {"p": {"dns": "localhost", "port": port, "max_replicas": 3}},
        }

    stack = Stack(tmp_path, endpoints=endpoints, replicas=2)
    try:
        wait_http(f"http://127.0.0.1:{stack.port}/health")
        response = httpx.post(
            f"http://127.0.0.1:{stack.port}/v1/completions",
            json={"model": "tiny", "prompt": "hello", "max_tokens": 3},
            headers={"authorization": f"Bearer {stack.key}"},
            timeout=30,
        )
        assert response.status_code == 200, response.text
        metrics = httpx.get(f"http://127.0.0.1:{stack.metrics_port}/metrics", timeout=5).text
    finally:
        stack.close()
    healthy = [line for line in metrics.splitlines()
               if line.startswith("inhouse_gateway_replica_healthy{")]  # fmt: skip
    assert healthy == [
        'inhouse_gateway_replica_healthy{pool="p",replica="0"} 1.0',
        'inhouse_gateway_replica_healthy{pool="p",replica="1"} 0.0',
        'inhouse_gateway_replica_healthy{pool="p",replica="2"} 0.0',
    ]
    log = (tmp_path / "gateway.log").read_text()
    assert f"replica p/0: http://127.0.0.1:{stack.engine_port} from DNS, probing" in log


def test_a_malformed_endpoints_file_is_refused_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "stack.yaml").write_text(yaml.safe_dump(stack_data(1)))
    endpoints = {"pools": {"p": ["http://h:1"]}, "discovery": {"p": {"dns": "h", "port": "x"}}}
    (tmp_path / "endpoints.json").write_text(json.dumps(endpoints))
    args = ["gateway", "--stack", str(tmp_path / "stack.yaml"),
            "--endpoints", str(tmp_path / "endpoints.json")]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "discovery.p.port: Input should be a valid integer" in err
    assert "fix: write the file again with `inhouse render`" in err


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl for a test cert")
def test_tls(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"],
        check=True,
        capture_output=True,
    )  # fmt: skip
    stack = Stack(tmp_path, ["--ssl-certfile", str(cert), "--ssl-keyfile", str(key)])
    try:
        url = f"https://127.0.0.1:{stack.port}"
        wait_http(f"{url}/health", verify=False)
        reply = httpx.post(
            f"{url}/v1/completions",
            json={"model": "tiny", "prompt": "hi", "max_tokens": 2},
            headers={"authorization": f"Bearer {stack.key}"},
            verify=False,
        )
        assert reply.status_code == 200
        streamed = httpx.post(
            f"{url}/v1/completions",
            json={"model": "tiny", "prompt": "hi", "max_tokens": 8, "stream": True,
                  "ignore_eos": True},
            headers={"authorization": f"Bearer {stack.key}"},
            verify=False,
        )  # fmt: skip
        events = [e for e in streamed.text.split("\n\n") if e]
        assert events[-1] == "data: [DONE]"
        assert sum('"text"' in e for e in events) == 8
    finally:
        stack.close()


def test_up_starts_the_gateway_with_a_generated_demo_key(tmp_path: Path) -> None:
    (tmp_path / "stack.yaml").write_text(yaml.safe_dump(stack_data(1)))
    port, base, metrics = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k != "INHOUSE_DEMO_KEY"}
    process = subprocess.Popen(
        [*UP, str(tmp_path / "stack.yaml"), "--port", str(port), "--engine-base-port", str(base),
         "--metrics-port", str(metrics), "--log-dir", str(tmp_path / "logs")],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line)
            if "Ctrl-C stops the stack" in line:
                break
        output = "".join(lines)
        assert f"gateway http://127.0.0.1:{port}/v1" in output
        key = output.split("demo API key (shown once): ")[1].split()[0]
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/completions",
            json={"model": "tiny", "prompt": "hi", "max_tokens": 2},
            headers={"authorization": f"Bearer {key}"},
        )
        assert reply.status_code == 200, reply.text
        refused = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json={"prompt": "hi"})
        assert refused.status_code == 401
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=40) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
