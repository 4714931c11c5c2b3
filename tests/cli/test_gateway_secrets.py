"""`inhouse gateway` as the rendered Deployment runs it: keys from the mounted Secret, the same
key valid across restarts, no demo key made up."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import yaml
from tests.cli.test_gateway import ENGINE, GATEWAY, MODEL, free_port, stack_data, stop, wait_http

from inhouse.gateway.keys import create_key


def start_gateway(tmp: Path, secrets: Path, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "INHOUSE_DEMO_KEY"}
    env["INHOUSE_SECRETS_DIR"] = str(secrets)
    return subprocess.Popen(
        [*GATEWAY, "--stack", str(tmp / "stack.yaml"), "--endpoints", str(tmp / "endpoints.json"),
         "--port", str(port), "--metrics-port", str(free_port())],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip


def test_keys_come_from_the_secret_and_survive_a_restart(tmp_path: Path) -> None:
    engine_port, port = free_port(), free_port()
    gateway = {"tenants": [{"name": "crm", "tier": "interactive"}], "health": {"interval_s": 0.2}}
    (tmp_path / "stack.yaml").write_text(yaml.safe_dump(stack_data(1, gateway)))
    endpoints = {"pools": {"p": [f"http://127.0.0.1:{engine_port}"]}}
    (tmp_path / "endpoints.json").write_text(json.dumps(endpoints))
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    key, entry = create_key()
    (secrets / "tenants.yaml").write_text(
        yaml.safe_dump({"tenants": [{"name": "crm", "keys": [entry]}]})
    )
    engine = subprocess.Popen(
        [*ENGINE, "--model", MODEL, "--served-model-name", "tiny", "--max-model-len", "1024",
         "--port", str(engine_port)],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    body = {"model": "tiny", "prompt": "hi", "max_tokens": 2}
    try:
        for _ in range(2):  # a restart keeps the same key valid
            process = start_gateway(tmp_path, secrets, port)
            try:
                wait_http(f"http://127.0.0.1:{port}/health")
                url = f"http://127.0.0.1:{port}/v1/completions"
                ok = httpx.post(url, json=body, headers={"authorization": f"Bearer {key}"})
                assert ok.status_code == 200, ok.text
                other = httpx.post(url, json=body, headers={"authorization": "Bearer ihk-x-y"})
                assert other.status_code == 401
            finally:
                stop(process)
            out = process.stdout.read() if process.stdout else b""
            assert b"demo API key" not in out
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    stream.close()
    finally:
        stop(engine)


def test_an_empty_secret_stops_the_gateway_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / "stack.yaml").write_text(yaml.safe_dump(stack_data(1)))
    (tmp_path / "endpoints.json").write_text(json.dumps({"pools": {"p": ["http://127.0.0.1:1"]}}))
    (tmp_path / "secrets").mkdir()
    process = start_gateway(tmp_path, tmp_path / "secrets", free_port())
    try:
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 2
    assert b"no key found" in err and b"kubectl create secret generic gateway-tenant-keys" in err
