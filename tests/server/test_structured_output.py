"""`response_format` (vLLM's structured outputs): a JSON answer that fits the schema, as vLLM
guarantees, instead of free text a client then fails to parse."""

from __future__ import annotations

import json
from collections.abc import Callable

from tests.server.test_hostile_requests import error_of, post_raw

from inhouse.server.state import EngineOptions

SCHEMA = {
    "type": "object",
    "properties": {
        "label": {"type": "string", "enum": ["spam", "ham"]},
        "score": {"type": "number", "minimum": 0},
    },
    "required": ["label", "score"],
}


def test_json_schema_and_json_object_answers_are_json(
    make_options: Callable[..., EngineOptions],
) -> None:
    schema_format = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": SCHEMA}}
    chat = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "classify: buy now"}],
        "max_tokens": 100,
        "response_format": schema_format,
    }
    completion = {
        "model": "tiny",
        "prompt": "classify: buy now",
        "max_tokens": 100,
        "response_format": {"type": "json_object"},
    }
    options = make_options()
    (chat_reply,) = post_raw(options, "/v1/chat/completions", json.dumps(chat).encode())
    (completion_reply,) = post_raw(options, "/v1/completions", json.dumps(completion).encode())
    (choice,) = chat_reply.json()["choices"]
    assert json.loads(choice["message"]["content"]) == {"label": "spam", "score": 1}
    assert choice["finish_reason"] == "stop"
    text = completion_reply.json()["choices"][0]["text"]
    assert isinstance(json.loads(text), dict)


def test_a_response_format_that_is_not_one_vllm_knows_is_a_400(
    make_options: Callable[..., EngineOptions],
) -> None:
    def body(response_format: object) -> bytes:
        return json.dumps(
            {"model": "tiny", "prompt": "x", "max_tokens": 5, "response_format": response_format}
        ).encode()

    unknown, no_schema, text = post_raw(
        make_options(),
        "/v1/completions",
        body({"type": "xml"}),
        body({"type": "json_schema"}),
        body({"type": "text"}),
    )
    assert error_of(unknown)["param"] == "body.response_format.type"  # vLLM's union of 3 shapes
    assert error_of(unknown)["message"].startswith("6 validation errors:")
    assert error_of(no_schema)["message"] == (  # vLLM's words
        "When response_format type is 'json_schema', the 'json_schema' field must be provided. "
        "(parameter=response_format)"
    )
    assert text.status_code == 200
