"""The three tamperings (one byte changed, a file added, a file removed), refused everywhere a
person meets them: `inhouse weights verify`, `inhouse engine --weights-dir` and `inhouse up`,
each exiting non-zero with the file named and nothing started; the intact model starts."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml
from tests.weights.conftest import SHARD, Keys, Tampering

from inhouse.weights.registry import blob_key, push_model
from inhouse.weights.s3 import RegistryUrl, make_client

ENGINE = [sys.executable, "-m", "inhouse.cli.engine"]
UP = [sys.executable, "-m", "inhouse.cli.up"]
WEIGHTS = [sys.executable, "-m", "inhouse.cli.weights"]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def free_ports(count: int) -> int:
    """The first of `count` consecutive free ports (up gives replicas consecutive ports)."""
    for _ in range(100):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            first: int = sock.getsockname()[1]
        try:
            for offset in range(1, count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", first + offset))
        except OSError:
            continue
        return first
    raise AssertionError("no consecutive free ports")


def nothing_listens(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def test_verify_cli_refuses_each_tampering(
    signed_model: Path, keys: Keys, tampering: Tampering
) -> None:
    argv = [*WEIGHTS, "verify", str(signed_model), "--public-key", str(keys.public)]
    assert subprocess.run(argv, capture_output=True, text=True).returncode == 0
    tampering.apply(signed_model)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"REFUSED: {signed_model} does not match its signature" in done.stderr
    assert f"{tampering.kind}: {tampering.path}" in done.stderr


def test_engine_refuses_each_tampering_and_starts_nothing(
    signed_model: Path, keys: Keys, tampering: Tampering
) -> None:
    tampering.apply(signed_model)
    port = free_ports(1)
    argv = [*ENGINE, "--model", MODEL, "--port", str(port), "--weights-dir", str(signed_model),
            "--public-key", str(keys.public)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "inhouse engine: refusing to start" in done.stderr
    assert f"{tampering.kind}: {tampering.path}" in done.stderr
    assert nothing_listens(port)


def test_engine_starts_on_intact_weights(signed_model: Path, keys: Keys) -> None:
    port = free_ports(1)
    argv = [*ENGINE, "--model", MODEL, "--port", str(port), "--max-model-len", "512",
            "--weights-dir", str(signed_model), "--public-key", str(keys.public)]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", process)
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert "verified" in err and "7 file(s)" in err


def test_engine_trust_flags_need_a_weights_dir(keys: Keys) -> None:
    done = subprocess.run([*ENGINE, "--model", MODEL, "--public-key", str(keys.public)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2 and "need --weights-dir" in done.stderr


def wait_healthy(url: str, process: subprocess.Popen[str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"exited with {process.returncode}"
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} not healthy after {timeout_s} s")


def write_stack(path: Path, pools: list[dict[str, object]]) -> Path:
    for pool in pools:
        pool.setdefault("model", MODEL)
        pool.setdefault("knobs", {"max_model_len": 512, "shutdown_timeout_s": 1})
    path.write_text(yaml.safe_dump({"version": 1, "name": "signed", "pools": pools}))
    return path


def test_up_refuses_each_tampering_before_starting_anything(
    signed_model: Path, keys: Keys, tampering: Tampering, tmp_path: Path
) -> None:
    tampering.apply(signed_model)
    # Relative paths are relative to the stack file: the test's own directory.
    weights = {"weights_dir": signed_model.name, "public_key": str(keys.public)}
    stack = write_stack(tmp_path / "stack.yaml", [{"name": "chat", "weights": weights}])
    port = free_ports(1)
    logs = tmp_path / "logs"
    argv = [*UP, str(stack), "--no-gateway", "--engine-base-port", str(port), "--log-dir",
            str(logs)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd="/")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "pool 'chat': refusing to start it" in done.stderr
    assert f"{tampering.kind}: {tampering.path}" in done.stderr
    assert not (logs / "chat-0.log").exists() and nothing_listens(port)


def up_argv(stack: Path, port: int, tmp_path: Path) -> list[str]:
    return [*UP, str(stack), "--no-gateway", "--engine-base-port", str(port), "--weights-cache",
            str(tmp_path / "cache"), "--log-dir", str(tmp_path / "logs")]  # fmt: skip


def test_up_refuses_a_tampered_registry_copy(
    signed_model: Path, keys: Keys, registry: str, tmp_path: Path
) -> None:
    url = RegistryUrl.parse(registry)
    manifest = push_model(make_client(), signed_model, url, "acme/tiny", "v1").manifest
    # Someone with write access to the bucket changes one byte of a shard.
    entry = next(f for f in manifest.files if f.path == SHARD)
    data = bytearray((signed_model / SHARD).read_bytes())
    data[len(data) // 2] ^= 1
    make_client().put_object(Bucket=url.bucket, Key=blob_key(url, entry.sha256), Body=bytes(data))
    weights = {"registry": registry, "name": "acme/tiny", "revision": "v1",
               "public_key": str(keys.public)}  # fmt: skip
    stack = write_stack(tmp_path / "stack.yaml", [{"name": "chat", "weights": weights}])
    port = free_ports(1)
    argv = up_argv(stack, port, tmp_path)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "pool 'chat'" in done.stderr and f"altered: {SHARD}" in done.stderr
    assert not (tmp_path / "logs" / "chat-0.log").exists() and nothing_listens(port)


@pytest.mark.parametrize("source", ["weights_dir", "registry"])
def test_up_starts_a_pool_whose_weights_verify(
    signed_model: Path, keys: Keys, registry: str, tmp_path: Path, source: str
) -> None:
    weights: dict[str, object] = {"public_key": str(keys.public)}
    if source == "registry":
        push_model(make_client(), signed_model, RegistryUrl.parse(registry), "acme/tiny", "v1")
        weights.update(registry=registry, name="acme/tiny")
    else:
        weights["weights_dir"] = str(signed_model)
    stack = write_stack(tmp_path / "stack.yaml", [{"name": "chat", "weights": weights}])
    port = free_ports(1)
    argv = up_argv(stack, port, tmp_path)
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        output = ""
        for line in process.stdout:
            output += line
            if "Ctrl-C stops the stack" in line or "error" in line:
                break
        assert "pool chat: weights verified" in output, output
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/completions",
                           json={"prompt": "x", "max_tokens": 2}, timeout=10)  # fmt: skip
        assert reply.status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()
