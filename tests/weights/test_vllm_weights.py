"""The real-vLLM tier (`.ci/vllm-tier`): `inhouse up` refuses a tampered tiny Llama for a vLLM
pool, without starting vLLM, and starts the intact one from the registry, vLLM loading the
verified path in the weight cache."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from tests.server.test_compat import HERE as SERVER_TESTS
from tests.server.test_compat import vllm_python
from tests.weights.conftest import Keys
from tests.weights.test_refusals import free_ports, nothing_listens, up_argv, write_stack

from inhouse.weights.registry import push_model
from inhouse.weights.s3 import RegistryUrl, make_client
from inhouse.weights.signature import sign_model

pytestmark = pytest.mark.vllm
VLLM_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
}


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    python = vllm_python()
    if python is None:
        pytest.fail("vLLM's CPU build is not installed: run .ci/vllm-tier")
    out = tmp_path_factory.mktemp("llama") / "tiny-llama"
    subprocess.run(
        [python, str(SERVER_TESTS / "tiny_llama.py"), str(out)], check=True, capture_output=True
    )
    return out


def vllm_pool(weights: dict[str, object]) -> dict[str, object]:
    return {
        "name": "tiny",
        "model": "tiny-llama",
        "served_model_name": "tiny",
        "engine": "vllm",
        "knobs": {"max_model_len": 512, "shutdown_timeout_s": 5},
        "weights": weights,
    }


def test_up_refuses_a_tampered_tiny_llama_for_vllm(
    tiny_llama: Path, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "tiny-llama"
    shutil.copytree(tiny_llama, model)
    sign_model(model, keys.private)
    shard = model / "model.safetensors"
    data = bytearray(shard.read_bytes())
    data[len(data) - 100] ^= 0x01  # one weight's byte
    shard.write_bytes(bytes(data))
    weights = {"weights_dir": str(model), "public_key": str(keys.public)}
    stack = write_stack(tmp_path / "stack.yaml", [vllm_pool(weights)])
    port = free_ports(1)
    argv = [*up_argv(stack, port, tmp_path), "--vllm-python", str(vllm_python())]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "pool 'tiny': refusing to start it" in done.stderr
    assert "altered: model.safetensors" in done.stderr
    assert not (tmp_path / "logs" / "tiny-0.log").exists() and nothing_listens(port)


def test_up_starts_vllm_on_the_verified_registry_copy(
    tiny_llama: Path, keys: Keys, registry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in VLLM_ENV.items():
        monkeypatch.setenv(key, value)
    model = tmp_path / "tiny-llama"
    shutil.copytree(tiny_llama, model)
    sign_model(model, keys.private)
    push_model(make_client(), model, RegistryUrl.parse(registry), "acme/tiny-llama", "v1")
    weights = {
        "registry": registry,
        "name": "acme/tiny-llama",
        "revision": "v1",
        "public_key": str(keys.public),
    }
    stack = write_stack(tmp_path / "stack.yaml", [vllm_pool(weights)])
    port = free_ports(1)
    argv = [
        *up_argv(stack, port, tmp_path),
        "--vllm-python",
        str(vllm_python()),
        "--ready-timeout",
        "600",
    ]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert process.stdout is not None
        output = ""
        for line in process.stdout:
            output += line
            if "Ctrl-C stops the stack" in line or "exited with code" in line:
                break
        assert "pool tiny: weights verified (acme/tiny-llama@v1" in output, output
        assert "is ready" in output, output + _logs(tmp_path)
        cached = tmp_path / "cache" / "by-name" / "acme" / "tiny-llama" / "v1"
        card = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10).json()["data"][0]
        assert card["root"] == str(cached.resolve())  # vLLM loaded the verified directory
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/completions",
            timeout=60,
            json={"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 3},
        )
        assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 3
    finally:
        process.terminate()
        process.wait(timeout=90)
        if process.stdout is not None:
            process.stdout.close()


def _logs(tmp_path: Path) -> str:
    return "\n".join(p.read_text()[-3000:] for p in (tmp_path / "logs").glob("*.log"))
