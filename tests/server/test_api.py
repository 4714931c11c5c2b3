"""The simulated engine's HTTP API, in process: shapes, SSE framing and errors as vLLM 0.32's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx

from inhouse.server.inprocess import inprocess_engine
from inhouse.server.state import EngineOptions

# Keys of vLLM 0.32's bodies (shared/reference/vllm-captures/gen.txt).
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
COMPLETION_CHOICE_KEYS = [
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
MESSAGE_KEYS = ["role", "content", "refusal", "annotations", "audio", "function_call", "reasoning"]
USAGE_KEYS = [
    "prompt_tokens",
    "total_tokens",
    "completion_tokens",
    "prompt_tokens_details",
    "completion_tokens_details",
]


def call(options: EngineOptions, *requests: tuple[str, str, Any]) -> list[httpx.Response]:
    """Send requests in order to a fresh in-process engine."""

    async def body() -> list[httpx.Response]:
        async with inprocess_engine(options) as engine:
            out = []
            for method, path, payload in requests:
                if isinstance(payload, bytes | str):
                    response = await engine.client.request(
                        method, path, content=payload, headers={"content-type": "application/json"}
                    )
                else:
                    response = await engine.client.request(method, path, json=payload)
                out.append(response)
            return out

    return asyncio.run(body())


def events(response: httpx.Response) -> list[Any]:
    """The `data:` payloads of an SSE body, JSON-decoded except `[DONE]`."""
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    out: list[Any] = []
    for block in response.text.split("\n\n"):
        if not block:
            continue
        assert block.startswith("data: "), block
        data = block[len("data: ") :]
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_completion_has_vllms_shape(make_options: Callable[..., EngineOptions]) -> None:
    (response,) = call(
        make_options(),
        ("POST", "/v1/completions", {"model": "tiny", "prompt": "hello world", "max_tokens": 5}),
    )
    assert response.status_code == 200
    body = response.json()
    assert list(body) == COMPLETION_KEYS
    assert body["id"].startswith("cmpl-") and len(body["id"]) == len("cmpl-") + 16
    assert body["object"] == "text_completion" and body["model"] == "tiny"
    choice = body["choices"][0]
    assert list(choice) == COMPLETION_CHOICE_KEYS
    assert choice["finish_reason"] == "length" and choice["stop_reason"] is None
    assert len(choice["text"]) == 5 * 4  # five 4-character output pieces
    assert list(body["usage"]) == USAGE_KEYS
    assert body["usage"]["prompt_tokens"] == 3  # "hello world" is 11 characters
    assert body["usage"]["completion_tokens"] == 5
    assert body["usage"]["total_tokens"] == 8
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_output_is_deterministic(make_options: Callable[..., EngineOptions]) -> None:
    request = ("POST", "/v1/completions", {"prompt": "same prompt", "max_tokens": 7})
    first, second = call(make_options(), request, request)
    assert first.json()["choices"][0]["text"] == second.json()["choices"][0]["text"]


def test_chat_completion_has_vllms_shape(make_options: Callable[..., EngineOptions]) -> None:
    messages = [{"role": "user", "content": "hi"}]
    (response,) = call(
        make_options(),
        ("POST", "/v1/chat/completions", {"model": "tiny", "messages": messages, "max_tokens": 4}),
    )
    body = response.json()
    assert list(body) == CHAT_KEYS
    assert body["id"].startswith("chatcmpl-") and body["object"] == "chat.completion"
    message = body["choices"][0]["message"]
    assert list(message) == MESSAGE_KEYS and message["role"] == "assistant"
    assert body["usage"]["completion_tokens"] == 4


def test_chat_stream_role_first_usage_last_then_done(
    make_options: Callable[..., EngineOptions],
) -> None:
    payload = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    (response,) = call(make_options(), ("POST", "/v1/chat/completions", payload))
    chunks = events(response)
    assert chunks[-1] == "[DONE]"
    role, *tokens, final_usage, _ = chunks
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert role["object"] == "chat.completion.chunk"
    assert [c["choices"][0]["finish_reason"] for c in tokens] == [None, None, "length"]
    assert all(c["id"] == role["id"] for c in chunks[:-1])
    assert final_usage["choices"] == []
    assert final_usage["usage"]["completion_tokens"] == 3
    assert final_usage["usage"]["prompt_tokens_details"] == {
        "cached_tokens": 0,
        "created_cache_tokens": 0,
    }
    text = "".join(c["choices"][0]["delta"]["content"] for c in tokens)
    assert len(text) == 12


def test_completion_stream_with_continuous_usage(
    make_options: Callable[..., EngineOptions],
) -> None:
    payload = {
        "prompt": "abc",
        "max_tokens": 2,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    (response,) = call(make_options(), ("POST", "/v1/completions", payload))
    first, second, usage, done = events(response)
    assert done == "[DONE]"
    assert first["object"] == "text_completion"
    assert first["usage"] == {"prompt_tokens": 1, "total_tokens": 2, "completion_tokens": 1}
    assert second["choices"][0]["finish_reason"] == "length"
    # The fingerprint rides on the last chunk before [DONE]: here the usage chunk.
    assert "system_fingerprint" not in second and "system_fingerprint" not in first
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 2
    assert "system_fingerprint" in usage


def test_completion_stream_without_usage(make_options: Callable[..., EngineOptions]) -> None:
    (response,) = call(
        make_options(),
        ("POST", "/v1/completions", {"prompt": "abc", "max_tokens": 3, "stream": True}),
    )
    chunks = events(response)
    assert len(chunks) == 4 and chunks[-1] == "[DONE]"
    assert all("usage" not in c for c in chunks[:-1])


def test_repeated_prompt_reports_cached_tokens(make_options: Callable[..., EngineOptions]) -> None:
    prompt = "x" * 4 * 100  # 100 tokens: six full 16-token blocks
    request = ("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 2})
    first, second = call(make_options(), request, request)
    assert first.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert second.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 96


def test_token_id_prompt_and_priority_and_min_tokens(
    make_options: Callable[..., EngineOptions],
) -> None:
    payload = {
        "prompt": [5, 6, 7],
        "max_tokens": 4,
        "min_tokens": 2,
        "priority": -5,
        "ignore_eos": True,
        "temperature": 0.7,
        "top_p": 0.9,
        "seed": 1,
        "user": "u",
    }
    (response,) = call(
        make_options(scheduling_policy="priority"), ("POST", "/v1/completions", payload)
    )
    assert response.status_code == 200
    assert response.json()["usage"]["prompt_tokens"] == 3


def test_stop_string_cuts_text_and_names_itself(make_options: Callable[..., EngineOptions]) -> None:
    # The output text is "The quick brown fox jumps over ..." from some offset; find a word in it.
    (plain,) = call(make_options(), ("POST", "/v1/completions", {"prompt": "p", "max_tokens": 8}))
    text = plain.json()["choices"][0]["text"]
    stop = text[13:17]
    (cut,) = call(
        make_options(),
        ("POST", "/v1/completions", {"prompt": "p", "max_tokens": 8, "stop": [stop]}),
    )
    choice = cut.json()["choices"][0]
    assert choice["finish_reason"] == "stop" and choice["stop_reason"] == stop
    assert choice["text"] == text[: text.index(stop)]
    assert cut.json()["usage"]["completion_tokens"] == 5  # the token that completes the stop


def test_eos_length_distribution_stops_early_unless_ignore_eos(
    make_options: Callable[..., EngineOptions],
) -> None:
    options = make_options(eos_length_dist="uniform:2:3")
    stopped, ignored = call(
        options,
        ("POST", "/v1/completions", {"prompt": "q", "max_tokens": 20}),
        ("POST", "/v1/completions", {"prompt": "q", "max_tokens": 20, "ignore_eos": True}),
    )
    assert stopped.json()["choices"][0]["finish_reason"] == "stop"
    assert stopped.json()["usage"]["completion_tokens"] in (2, 3)
    assert ignored.json()["usage"]["completion_tokens"] == 20


def test_max_tokens_is_clamped_to_the_context(make_options: Callable[..., EngineOptions]) -> None:
    (response,) = call(
        make_options(), ("POST", "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 510})
    )
    assert response.status_code == 200
    assert response.json()["usage"]["completion_tokens"] == 509


def error(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert list(body) == ["error"] and list(body["error"]) == ["message", "type", "param", "code"]
    assert body["error"]["code"] == response.status_code
    error_info: dict[str, Any] = body["error"]
    return error_info


def test_errors_read_as_vllms(make_options: Callable[..., EngineOptions]) -> None:
    too_long_text = "a" * 4 * 600
    responses = call(
        make_options(),
        ("POST", "/v1/completions", {"model": "nope", "prompt": "x"}),
        ("POST", "/v1/completions", {"model": "tiny", "prompt": too_long_text}),
        ("POST", "/v1/completions", {"model": "tiny", "prompt": list(range(600))}),
        ("POST", "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 100000}),
        ("POST", "/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": "abc"}),
        ("POST", "/v1/completions", b'{"model": "tiny", '),
        ("POST", "/v1/completions", {"model": "tiny", "prompt": "x", "temperature": -1}),
        ("POST", "/v1/chat/completions", {"model": "tiny"}),
        ("POST", "/v1/completions", {"model": "tiny", "prompt": list(range(512))}),
    )
    wrong_model, long_text, long_ids, big_max, bad_type, bad_json, temp, no_msgs, full = responses
    assert wrong_model.status_code == 404
    assert error(wrong_model) == {
        "message": "The model `nope` does not exist. Valid aliases: tiny.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }
    assert error(long_text)["message"] == (
        "This model's maximum context length is 512 tokens. However, your prompt contains at "
        "least 513 input tokens, which exceeds this limit even without any output tokens. Please "
        "reduce the length of the input prompt. (parameter=input_tokens, value=513)"
    )
    assert error(long_text)["type"] == "BadRequestError"
    assert error(long_text)["param"] == "input_tokens"
    assert "contains 600 input tokens" in error(long_ids)["message"]
    assert error(big_max)["message"] == (
        "max_tokens=100000 cannot be greater than max_model_len=512. Please request fewer output "
        "tokens. (parameter=max_tokens, value=100000)"
    )
    assert error(bad_type) == {
        "message": "1 validation error:\n  {'type': 'int_parsing', 'loc': 'body.max_tokens', "
        "'msg': 'Input should be a valid integer, unable to parse string as an integer', "
        "'input': 'abc'}",
        "type": "Bad Request",
        "param": "body.max_tokens",
        "code": 400,
    }
    assert error(bad_json)["message"].startswith(
        "1 validation error:\n  {'type': 'json_invalid', 'loc': 'body.18', 'msg': 'JSON decode "
        "error', 'input': '<dict of 0 items>', 'ctx': {'error': "
    )
    assert error(temp)["message"] == (
        "temperature must be non-negative, got -1.0. (parameter=temperature, value=-1.0)"
    )
    assert error(no_msgs)["param"] == "body.messages"
    assert "'type': 'missing'" in error(no_msgs)["message"]
    assert error(full)["message"] == (
        "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"
    )


def test_wrong_content_type_unknown_route_and_method(
    make_options: Callable[..., EngineOptions],
) -> None:
    async def body() -> list[httpx.Response]:
        async with inprocess_engine(make_options()) as engine:
            client = engine.client
            return [
                await client.post(
                    "/v1/completions", content=b"x", headers={"content-type": "text/plain"}
                ),
                await client.get("/nope"),
                await client.get("/v1/completions"),
            ]

    media, route, method = asyncio.run(body())
    assert error(media)["message"] == (
        "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"
    )
    assert error(media)["param"] is None
    assert route.status_code == 404 and route.json() == {"detail": "Not Found"}
    assert method.status_code == 405 and method.json() == {"detail": "Method Not Allowed"}


def test_models_tokenize_detokenize_version(make_options: Callable[..., EngineOptions]) -> None:
    models, tok, detok, version, chat_tok, load = call(
        make_options(lora_modules=("utility-summarize",)),
        ("GET", "/v1/models", None),
        ("POST", "/tokenize", {"model": "tiny", "prompt": "hello world"}),
        ("POST", "/detokenize", {"model": "tiny", "tokens": [0]}),
        ("GET", "/version", None),
        ("POST", "/tokenize", {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}),
        ("GET", "/load", None),
    )
    data = models.json()["data"]
    assert models.json()["object"] == "list"
    assert [card["id"] for card in data] == ["tiny", "utility-summarize"]
    assert list(data[0]) == [
        "id",
        "object",
        "created",
        "owned_by",
        "root",
        "parent",
        "max_model_len",
        "permission",
    ]
    assert data[0]["max_model_len"] == 512 and data[0]["owned_by"] == "vllm"
    assert data[1]["parent"] == "tiny"
    assert data[0]["permission"][0]["object"] == "model_permission"
    tokens = tok.json()
    assert list(tokens) == ["count", "max_model_len", "tokens", "token_strs"]
    assert tokens["count"] == 3 and tokens["max_model_len"] == 512
    assert list(detok.json()) == ["prompt"]
    assert version.json()["version"].startswith("0.32.0")
    assert chat_tok.json()["count"] > 3
    assert load.json() == {"server_load": 0}


def test_lora_adapter_is_a_valid_model(make_options: Callable[..., EngineOptions]) -> None:
    (response,) = call(
        make_options(lora_modules=("utility-summarize=/x",)),
        ("POST", "/v1/completions", {"model": "utility-summarize", "prompt": "x", "max_tokens": 1}),
    )
    assert response.status_code == 200 and response.json()["model"] == "utility-summarize"


def test_health_is_503_until_loaded(make_options: Callable[..., EngineOptions]) -> None:
    async def body() -> tuple[int, int, int, int]:
        async with inprocess_engine(make_options(), loaded=False) as engine:
            before = (await engine.client.get("/health")).status_code
            refused = await engine.client.post("/v1/completions", json={"prompt": "x"})
            engine.state.is_loaded = True
            after = (await engine.client.get("/health")).status_code
            ping = (await engine.client.post("/ping")).status_code
            return before, refused.status_code, after, ping

    assert asyncio.run(body()) == (503, 503, 200, 200)


def test_queue_limit_answers_busy(make_options: Callable[..., EngineOptions]) -> None:
    async def body() -> list[int]:
        async with inprocess_engine(make_options(max_num_queued_reqs=1)) as engine:
            engine.state.runner.set_hang(True)  # nothing is scheduled: requests wait
            send = [
                engine.client.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})
                for _ in range(3)
            ]
            tasks = [asyncio.ensure_future(s) for s in send]
            await asyncio.sleep(0.2)
            engine.state.runner.set_hang(False)
            return sorted(r.status_code for r in await asyncio.gather(*tasks))

    assert asyncio.run(body()) == [200, 503, 503]


def test_a_next_turn_that_resends_the_answer_hits_its_cached_blocks(
    make_options: Callable[..., EngineOptions],
) -> None:
    """vLLM caches generated blocks too: a prompt that continues prompt + answer reuses them."""
    prompt_ids = list(range(100, 164))  # 64 tokens: four full blocks
    first_request = ("POST", "/v1/completions", {"prompt": prompt_ids, "max_tokens": 40})
    (first,) = call(make_options(), first_request)
    answer = first.json()["choices"][0]["text"]
    options = make_options()
    (tokenized,) = call(options, ("POST", "/tokenize", {"prompt": answer}))
    answer_ids = tokenized.json()["tokens"]
    follow_up = prompt_ids + answer_ids + [7, 8, 9]
    _, second = call(
        options,
        first_request,
        ("POST", "/v1/completions", {"prompt": follow_up, "max_tokens": 2}),
    )
    cached = second.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
    # The prompt's 4 blocks and the answer's full blocks (40 tokens: 2 more) are reused.
    assert cached == 96
