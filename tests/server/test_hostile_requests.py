"""Hostile and edge request bodies: each gets vLLM's 4xx and error shape, never a traceback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx

from inhouse.server.inprocess import inprocess_engine
from inhouse.server.state import EngineOptions
from inhouse.server.tools import ToolOptions


def post_raw(options: EngineOptions, path: str, *bodies: bytes) -> list[httpx.Response]:
    """POST each body as `application/json` to a fresh in-process engine, in order."""

    async def run() -> list[httpx.Response]:
        async with inprocess_engine(options) as engine:
            headers = {"content-type": "application/json"}
            return [await engine.client.post(path, content=b, headers=headers) for b in bodies]

    return asyncio.run(run())


def error_of(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert list(body) == ["error"], body
    assert list(body["error"]) == ["message", "type", "param", "code"]
    assert body["error"]["code"] == response.status_code
    error: dict[str, Any] = body["error"]
    return error


# FastAPI's own answer to a body it cannot read, which vLLM sends as it is (not vLLM's
# error shape; checked against real vLLM in test_compat).
PARSE_ERROR = {"detail": "There was an error parsing the body"}


def test_a_body_that_is_not_utf8_or_nests_too_deep_is_a_400(
    make_options: Callable[..., EngineOptions],
) -> None:
    not_utf8 = b'{"model": "tiny", "prompt": "\xff\xfe", "max_tokens": 2}'
    too_deep = b'{"model": "tiny", "prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    responses = post_raw(make_options(), "/v1/completions", not_utf8, too_deep)
    for response in responses:
        assert response.status_code == 400
        assert response.json() == PARSE_ERROR


def test_a_token_id_prompt_outside_the_vocabulary_is_a_400(
    make_options: Callable[..., EngineOptions],
) -> None:
    options = make_options()
    bodies = [
        b'{"model": "tiny", "prompt": [5, -1], "max_tokens": 2}',
        b'{"model": "tiny", "prompt": [5, 1000000000000], "max_tokens": 2}',
        b'{"model": "tiny", "prompt": [[5, 128256]], "max_tokens": 2}',
        b'{"model": "tiny", "prompt": [5, 128255], "max_tokens": 2}',
    ]
    negative, huge, one_past, last = post_raw(options, "/v1/completions", *bodies)
    # A negative id fails the request's types (ids are >= 0), as in vLLM.
    assert error_of(negative)["param"] == "body.prompt.1"
    assert error_of(negative)["type"] == "Bad Request"
    assert error_of(huge) == {
        "message": "Token id 1000000000000 is out of vocabulary",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    assert error_of(one_past)["message"] == "Token id 128256 is out of vocabulary"
    assert last.status_code == 200 and last.json()["usage"]["prompt_tokens"] == 2


def _tool_request(function: str) -> bytes:
    return (
        b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 200, '
        b'"tool_choice": "required", "tools": [{"type": "function", "function": '
        + function.encode()
        + b"}]}"
    )


def test_a_tool_without_a_name_or_with_a_non_object_schema_is_a_400(
    make_options: Callable[..., EngineOptions],
) -> None:
    options = make_options(tools=ToolOptions(True, "hermes"), max_model_len=4096)
    no_name, bad_schema = post_raw(
        options,
        "/v1/chat/completions",
        _tool_request('{"parameters": {"type": "object"}}'),
        _tool_request('{"name": "f", "parameters": "not a schema"}'),
    )
    assert error_of(no_name) == {
        "message": "1 validation error:\n  {'type': 'missing', 'loc': "
        "'body.tools.0.function.name', 'msg': 'Field required', 'input': '<dict of 1 items>'}",
        "type": "Bad Request",
        "param": "body.tools.0.function.name",
        "code": 400,
    }
    assert error_of(bad_schema)["param"] == "body.tools.0.function.parameters"
    assert "'type': 'dict_type'" in error_of(bad_schema)["message"]


def test_a_schema_with_nonsense_keywords_still_gets_a_call(
    make_options: Callable[..., EngineOptions],
) -> None:
    """Keywords of the wrong type are ignored: the call's arguments are still JSON."""
    schema = (
        '{"type": "object", "properties": {'
        '"a": {"type": "integer", "minimum": "x"}, "b": {"type": "number", "minimum": 1e400}, '
        '"c": {"type": "number", "minimum": 2.5}, "d": {"enum": {"x": 1}}, '
        '"e": {"type": "object", "properties": ["p"]}, "f": {"type": "object", "required": [{}]}'
        "}}"
    )
    (reply,) = post_raw(
        make_options(tools=ToolOptions(True, "hermes"), max_model_len=4096),
        "/v1/chat/completions",
        _tool_request('{"name": "f", "parameters": ' + schema + "}"),
    )
    assert reply.status_code == 200, reply.text
    (call,) = reply.json()["choices"][0]["message"]["tool_calls"]
    arguments = json.loads(call["function"]["arguments"])
    assert arguments["a"] == 1 and arguments["b"] == 1 and arguments["c"] == 3
    assert arguments["e"] == {} and arguments["f"] == {}


STREAM_OPTIONS_ERROR = (
    "Stream options can only be defined when `stream=True`. (parameter=stream_options)"
)


def test_stream_options_without_stream_is_a_400_as_in_vllm(
    make_options: Callable[..., EngineOptions],
) -> None:
    completion = b'{"model": "tiny", "prompt": "x", "max_tokens": 2, '
    chat = b'{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2, '
    options = make_options()
    bare, not_streamed, empty = post_raw(
        options,
        "/v1/completions",
        completion + b'"stream_options": {"include_usage": true}}',
        completion + b'"stream": false, "stream_options": {"include_usage": false}}',
        completion + b'"stream_options": {}}',
    )
    (chat_bare,) = post_raw(
        options, "/v1/chat/completions", chat + b'"stream_options": {"include_usage": true}}'
    )
    # vLLM's `VLLMValidationError` from a model validator: a plain 400, not a validation list.
    assert error_of(bare) == {
        "message": STREAM_OPTIONS_ERROR,
        "type": "BadRequestError",
        "param": "stream_options",
        "code": 400,
    }
    assert error_of(not_streamed)["param"] == "stream_options"
    assert error_of(chat_bare)["param"] == "stream_options"
    assert empty.status_code == 200  # vLLM checks for a truthy value


def test_sampling_values_are_checked_as_vllm_checks_them(
    make_options: Callable[..., EngineOptions],
) -> None:
    def body(**fields: object) -> bytes:
        return json.dumps({"model": "tiny", "prompt": "x", "max_tokens": 1, **fields}).encode()

    replies = post_raw(
        make_options(),
        "/v1/completions",
        body(frequency_penalty=2.5),
        body(presence_penalty=-3),
        body(repetition_penalty=0),
        body(top_k=-2),
        body(min_p=1.5),
        body(temperature=2.5),  # vLLM 0.32 caps it at 2
        body(temperature=2, frequency_penalty=-2, presence_penalty=2, repetition_penalty=1.3,
             top_k=-1, min_p=0),
    )  # fmt: skip
    *refused, hot, edges = replies
    # vLLM words these without a parameter: no suffix, `param` null (test_compat checks it).
    assert [error_of(r)["message"] for r in refused] == [
        "frequency_penalty must be in [-2, 2], got 2.5.",
        "presence_penalty must be in [-2, 2], got -3.0.",
        "repetition_penalty must be greater than zero, got 0.0.",
        "top_k must be 0 (disable), or at least 1, got -2.",
        "min_p must be in [0, 1], got 1.5.",
    ]
    assert [error_of(r)["param"] for r in refused] == [None] * 5
    assert error_of(hot) == {
        "message": "temperature must be in [0, 2], got 2.5. (parameter=temperature, value=2.5)",
        "type": "BadRequestError",
        "param": "temperature",
        "code": 400,
    }
    assert edges.status_code == 200


def test_logprobs_and_echo_are_refused_not_silently_dropped(
    make_options: Callable[..., EngineOptions],
) -> None:
    def completion(**fields: object) -> bytes:
        return json.dumps({"model": "tiny", "prompt": "x", "max_tokens": 1, **fields}).encode()

    def chat(**fields: object) -> bytes:
        messages = [{"role": "user", "content": "x"}]
        return json.dumps(
            {"model": "tiny", "messages": messages, "max_tokens": 1, **fields}
        ).encode()

    options = make_options()
    *refused, unset = post_raw(
        options,
        "/v1/completions",
        completion(logprobs=0),
        completion(prompt_logprobs=1),
        completion(echo=True),
        completion(logprobs=None, echo=False),
    )
    *chat_refused, chat_unset = post_raw(
        options,
        "/v1/chat/completions",
        chat(logprobs=True, top_logprobs=5),
        chat(top_logprobs=2),
        chat(logprobs=False, top_logprobs=0),
    )
    assert [error_of(r)["param"] for r in refused + chat_refused] == [
        "logprobs",
        "prompt_logprobs",
        "echo",
        "logprobs",
        "top_logprobs",
    ]
    assert error_of(refused[0])["message"] == (
        "The simulated engine does not sample from a model, so it has no logprobs to return; "
        "leave `logprobs` unset. (parameter=logprobs, value=0)"
    )
    assert error_of(refused[2])["message"] == (
        "The simulated engine does not echo the prompt; leave `echo` unset. "
        "(parameter=echo, value=True)"
    )
    assert unset.status_code == 200 and chat_unset.status_code == 200


def test_a_message_without_a_role_or_with_content_of_the_wrong_type_is_a_400(
    make_options: Callable[..., EngineOptions],
) -> None:
    def chat(*messages: object) -> bytes:
        return json.dumps({"model": "tiny", "messages": messages, "max_tokens": 1}).encode()

    options = make_options()
    no_role, number, role_number, fine = post_raw(
        options,
        "/v1/chat/completions",
        chat({"role": "user", "content": "hi"}, {"content": "x"}),
        chat({"role": "user", "content": 5}),
        chat({"role": 7, "content": "x"}),
        chat({"role": "developer", "content": [{"type": "text", "text": "hi"}]}, {"role": "user"}),
    )
    (tokenize,) = post_raw(
        options, "/tokenize", json.dumps({"messages": [{"content": "x"}]}).encode()
    )
    # vLLM names the first of its message classes that the message fails (test_compat.py has
    # the whole lists, checked against vLLM itself).
    assert error_of(no_role)["param"] == "body.messages.1.ChatCompletionDeveloperMessageParam.role"
    assert "'type': 'missing'" in error_of(no_role)["message"]
    assert (
        error_of(number)["param"] == "body.messages.0.ChatCompletionDeveloperMessageParam.content"
    )
    assert (
        error_of(role_number)["param"] == "body.messages.0.ChatCompletionDeveloperMessageParam.role"
    )
    # /tokenize takes a prompt request or a chat request: the first error is the prompt's
    # (as in vLLM, whose chat-message union then lists eleven more).
    assert error_of(tokenize)["param"] == "body.prompt"
    assert error_of(tokenize)["message"].startswith("12 validation errors:")
    assert (
        "'loc': 'body.messages.0.CustomChatCompletionMessageParam.role'"
        in error_of(tokenize)["message"]
    )
    assert fine.status_code == 200


def test_a_seed_outside_a_64_bit_integer_is_a_400(
    make_options: Callable[..., EngineOptions],
) -> None:
    def body(seed: int) -> bytes:
        return json.dumps({"model": "tiny", "prompt": "x", "max_tokens": 1, "seed": seed}).encode()

    too_big, smallest = post_raw(make_options(), "/v1/completions", body(2**63), body(-(2**63)))
    assert error_of(too_big) == {
        "message": "1 validation error:\n  {'type': 'less_than_equal', 'loc': 'body.seed', "
        "'msg': 'Input should be less than or equal to 9223372036854775807', "
        "'input': '9223372036854775808', 'ctx': {'le': 9223372036854775807}}",
        "type": "Bad Request",
        "param": "body.seed",
        "code": 400,
    }
    assert smallest.status_code == 200


def test_detokenize_refuses_negative_ids_and_skips_unknown_ones(
    make_options: Callable[..., EngineOptions],
) -> None:
    """As vLLM: a negative id fails the request's types; an id past the vocabulary is
    skipped (odd, but what a client of real vLLM sees)."""
    negative, past, fine = post_raw(
        make_options(),
        "/detokenize",
        b'{"model": "tiny", "tokens": [5, -1]}',
        b'{"model": "tiny", "tokens": [128255, 128256]}',
        b'{"model": "tiny", "tokens": [128255]}',
    )
    assert error_of(negative)["param"] == "body.tokens.1"
    assert error_of(negative)["message"].startswith(
        "1 validation error:\n  {'type': 'greater_than_equal', 'loc': 'body.tokens.1'"
    )
    assert past.status_code == 200 and past.json() == fine.json()


def test_text_with_a_lone_surrogate_is_a_400(make_options: Callable[..., EngineOptions]) -> None:
    """JSON may escape half a UTF-16 pair ("\\ud800"); no tokenizer can encode it."""
    options = make_options()
    (prompt,) = post_raw(options, "/v1/completions", b'{"prompt": "a\\ud800b", "max_tokens": 2}')
    (chat,) = post_raw(
        options,
        "/v1/chat/completions",
        b'{"messages": [{"role": "user", "content": "\\udfff"}], "max_tokens": 2}',
    )
    (tokenize,) = post_raw(options, "/tokenize", b'{"prompt": "\\ud800"}')
    assert error_of(prompt) == {
        "message": "The request's text is not valid Unicode ('utf-8' codec can't encode "
        "character '\\ud800' in position 1: surrogates not allowed); send UTF-8 text without "
        "lone surrogate escapes such as \\ud800.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    assert chat.status_code == 400 and tokenize.status_code == 400


def test_a_completion_suffix_is_refused_as_vllm_refuses_it(
    make_options: Callable[..., EngineOptions],
) -> None:
    suffix, none = post_raw(
        make_options(),
        "/v1/completions",
        b'{"model": "tiny", "prompt": "def f(", "suffix": "return x", "max_tokens": 2}',
        b'{"model": "tiny", "prompt": "def f(", "suffix": null, "max_tokens": 2}',
    )
    assert error_of(suffix) == {
        "message": "suffix is only supported for models with FIM completion rendering",
        "type": "BadRequestError",
        "param": "suffix",
        "code": 400,
    }
    assert none.status_code == 200
