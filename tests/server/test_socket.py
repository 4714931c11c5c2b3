"""`inhouse engine` as a real process on a real socket: the official openai client, SIGTERM
drain, and the abrupt-exit fault."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

import httpx
import openai
import pytest

ENGINE = [sys.executable, "-m", "inhouse.cli.engine"]
MODEL = ["--model", "meta-llama/Llama-3.1-8B-Instruct", "--served-model-name", "tiny"]


def start_engine(port: int, *extra: str) -> subprocess.Popen[bytes]:
    with tempfile.TemporaryFile() as log:  # the child keeps its own descriptor
        process = subprocess.Popen(
            [*ENGINE, *MODEL, "--port", str(port), *extra], stdout=log, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, "engine exited before it was ready"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise AssertionError("engine did not become ready")


@pytest.fixture
def engine(free_port: Callable[[], int]) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port()
    process = start_engine(port, "--max-model-len", "4096", "--shutdown-timeout", "5")
    yield port, process
    if process.poll() is None:
        process.kill()
    process.wait()


def test_openai_client_streaming_and_not(engine: tuple[int, subprocess.Popen[bytes]]) -> None:
    port, _ = engine
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
    completion = client.completions.create(model="tiny", prompt="Say hi", max_tokens=6)
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 6
    chat = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=5
    )
    assert chat.choices[0].message.role == "assistant"
    assert chat.choices[0].message.content
    stream = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == chat.choices[0].message.content  # deterministic output
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
    completions_stream = client.completions.create(
        model="tiny", prompt="Say hi", max_tokens=6, stream=True
    )
    pieces = [c.choices[0].text for c in completions_stream]
    assert "".join(pieces) == completion.choices[0].text
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny"]
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x", max_tokens=1)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="tiny", prompt="x", max_tokens=10**6)


def _stream_lines(response: httpx.Response) -> Iterator[dict[str, object] | str]:
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            yield data if data == "[DONE]" else json.loads(data)


def test_sigterm_drains_in_flight_and_refuses_new(
    engine: tuple[int, subprocess.Popen[bytes]],
) -> None:
    port, process = engine
    base = f"http://127.0.0.1:{port}"
    payload = {"model": "tiny", "prompt": "long", "max_tokens": 300, "stream": True}
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", f"{base}/v1/completions", json=payload) as response,
    ):
        lines = _stream_lines(response)
        next(lines)
        process.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        health = httpx.get(f"{base}/health", timeout=5)
        refused = httpx.post(f"{base}/v1/completions", json={"prompt": "x"}, timeout=5)
        rest = list(lines)
    assert health.status_code == 503
    assert refused.status_code == 503
    assert refused.json()["error"]["type"] == "Service Unavailable"
    assert rest[-1] == "[DONE]"
    last = rest[-2]
    assert isinstance(last, dict)
    assert last["choices"][0]["finish_reason"] == "length"  # type: ignore[index]
    assert len(rest) == 300  # 299 more tokens and [DONE]
    assert process.wait(timeout=10) == 0


def test_drain_timeout_aborts_the_rest(free_port: Callable[[], int]) -> None:
    port = free_port()
    # vLLM's --shutdown-timeout is whole seconds
    process = start_engine(port, "--max-model-len", "4096", "--shutdown-timeout", "1")
    try:
        payload = {"model": "tiny", "prompt": "long", "max_tokens": 3000, "stream": True}
        with (
            httpx.Client(timeout=30) as client,
            client.stream(
                "POST", f"http://127.0.0.1:{port}/v1/completions", json=payload
            ) as response,
        ):
            lines = _stream_lines(response)
            next(lines)
            process.send_signal(signal.SIGTERM)
            rest = list(lines)
        assert rest[-1] == "[DONE]"
        last = rest[-2]
        assert isinstance(last, dict)
        assert last["choices"][0]["finish_reason"] == "abort"  # type: ignore[index]
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()


def test_admin_exit_fault_kills_the_process(free_port: Callable[[], int]) -> None:
    port, admin = free_port(), free_port()
    process = start_engine(port, "--admin-port", str(admin))
    try:
        response = httpx.post(f"http://127.0.0.1:{admin}/faults/exit", json={"code": 3})
        assert response.status_code == 200
        assert process.wait(timeout=10) == 3
        # The API port has no fault routes.
    finally:
        if process.poll() is None:
            process.kill()


def test_fault_routes_are_not_on_the_api_port(
    engine: tuple[int, subprocess.Popen[bytes]],
) -> None:
    port, _ = engine
    response = httpx.post(f"http://127.0.0.1:{port}/faults/exit", json={"code": 3})
    assert response.status_code == 404
