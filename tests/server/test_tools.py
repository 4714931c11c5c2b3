"""Tool calling in the simulated engine (issue 16 item 9): vLLM 0.32's rules for `tools` and
`tool_choice`, and a well-formed tool call whenever one is forced, streamed or not."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from tests.server.test_api import MESSAGE_KEYS, call, events

from inhouse.server.state import EngineOptions
from inhouse.server.tools import ToolOptions, example_value

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1},
            },
            "required": ["city", "unit"],
        },
    },
}
CRM = {
    "type": "function",
    "function": {
        "name": "lookup_account",
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
    },
}
PARSER = ToolOptions(enable_auto_tool_choice=True, tool_call_parser="llama3_json")
TOOL_ID = re.compile(r"^chatcmpl-tool-[0-9a-f]{32}$")


def chat(tool_choice: object = None, stream: bool = False, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "weather in Oslo?"}],
        "tools": [WEATHER, CRM],
        "max_tokens": 200,
        "stream": stream,
        **extra,
    }
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    return body


def named(name: str = "get_weather") -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


def test_a_named_function_is_called_with_arguments_that_fit_its_schema(
    make_options: Callable[..., EngineOptions],
) -> None:
    (reply,) = call(make_options(tools=PARSER), ("POST", "/v1/chat/completions", chat(named())))
    assert reply.status_code == 200, reply.text
    (choice,) = reply.json()["choices"]
    message = choice["message"]
    assert list(message) == [*MESSAGE_KEYS[:-1], "tool_calls", "reasoning"]
    assert message["content"] == ""
    (tool_call,) = message["tool_calls"]
    assert TOOL_ID.match(tool_call["id"]) and tool_call["type"] == "function"
    assert tool_call["function"]["name"] == "get_weather"
    arguments = json.loads(tool_call["function"]["arguments"])
    assert set(arguments) == {"city", "unit"} and arguments["unit"] == "celsius"
    assert isinstance(arguments["city"], str)
    assert choice["finish_reason"] == "stop"  # OpenAI's: "stop" for a named function
    usage = reply.json()["usage"]
    assert 0 < usage["completion_tokens"] < 200  # the call's tokens, not max_tokens


def test_required_picks_a_tool_and_finishes_with_tool_calls(
    make_options: Callable[..., EngineOptions],
) -> None:
    (reply,) = call(make_options(tools=PARSER), ("POST", "/v1/chat/completions", chat("required")))
    (choice,) = reply.json()["choices"]
    (tool_call,) = choice["message"]["tool_calls"]
    assert tool_call["function"]["name"] in {"get_weather", "lookup_account"}
    json.loads(tool_call["function"]["arguments"])
    assert choice["finish_reason"] == "tool_calls"


@pytest.mark.parametrize("tool_choice", [named(), "required"])
def test_a_streamed_call_names_itself_first_then_adds_arguments(
    make_options: Callable[..., EngineOptions], tool_choice: object
) -> None:
    body = chat(tool_choice, stream=True, stream_options={"include_usage": True})
    (reply,) = call(make_options(tools=PARSER), ("POST", "/v1/chat/completions", body))
    chunks = events(reply)
    role, *deltas, final_usage, done = chunks
    assert done == "[DONE]" and role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in deltas if c["choices"][0]["delta"]]
    first, *rest = calls
    assert TOOL_ID.match(first["id"]) and first["type"] == "function" and first["index"] == 0
    assert all(
        set(c) == {"index", "function"} and set(c["function"]) == {"arguments"} for c in rest
    )
    arguments = "".join(c["function"]["arguments"] for c in calls)
    assert set(json.loads(arguments)) >= ({"city", "unit"} if first["function"]["name"] ==
                                          "get_weather" else {"id"})  # fmt: skip
    expected = "stop" if isinstance(tool_choice, dict) else "tool_calls"
    assert deltas[-1]["choices"][0]["finish_reason"] == expected
    assert final_usage["usage"]["completion_tokens"] >= len(calls)


def test_a_call_cut_by_max_tokens_finishes_with_length(
    make_options: Callable[..., EngineOptions],
) -> None:
    (reply,) = call(
        make_options(tools=PARSER), ("POST", "/v1/chat/completions", chat(named(), max_tokens=3))
    )
    (choice,) = reply.json()["choices"]
    assert choice["finish_reason"] == "length"
    assert reply.json()["usage"]["completion_tokens"] == 3


def test_auto_and_none_answer_in_text(make_options: Callable[..., EngineOptions]) -> None:
    for tool_choice in ("auto", "none", None):
        (reply,) = call(
            make_options(tools=PARSER), ("POST", "/v1/chat/completions", chat(tool_choice))
        )
        message = reply.json()["choices"][0]["message"]
        assert "tool_calls" not in message and message["content"]


@pytest.mark.parametrize(
    ("options", "body", "message"),
    [
        (PARSER, chat(tools=[]), "`tools` must not be an empty array"),
        (
            PARSER,
            {**chat(named()), "tools": None},
            "When using `tool_choice`, `tools` must be set.",
        ),
        (PARSER, chat("sometimes"), "Invalid value for `tool_choice`: sometimes!"),
        (PARSER, chat(named("nope")), "does not match any of the specified `tools`"),
        (PARSER, chat({"type": "function"}), "Invalid value for `function`: `None`"),
        (ToolOptions(), chat(), '"auto" tool choice requires --enable-auto-tool-choice'),
        (ToolOptions(), chat("required"), 'tool_choice="required" requires --tool-call-parser'),
        (ToolOptions(), chat(named()), 'tool_choice=function "get_weather" requires'),
    ],
)
def test_bad_tool_requests_get_vllms_errors(
    make_options: Callable[..., EngineOptions], options: ToolOptions, body: Any, message: str
) -> None:
    (reply,) = call(make_options(tools=options), ("POST", "/v1/chat/completions", body))
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert message in error["message"] and error["code"] == 400


def test_tools_count_as_prompt_tokens_and_a_stable_prefix(
    make_options: Callable[..., EngineOptions],
) -> None:
    plain = {"model": "tiny", "messages": chat()["messages"], "max_tokens": 2}
    replies = call(
        make_options(tools=PARSER, max_model_len=4096),
        ("POST", "/v1/chat/completions", plain),
        ("POST", "/v1/chat/completions", chat("none", max_tokens=2)),
        ("POST", "/v1/chat/completions", chat("none", max_tokens=2)),
    )
    without, with_tools, again = (r.json()["usage"] for r in replies)
    assert with_tools["prompt_tokens"] > without["prompt_tokens"]
    assert again["prompt_tokens_details"]["cached_tokens"] > 0


def test_example_values_follow_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string"}},
            "ok": {"type": "boolean"},
            "note": {"type": ["null", "string"]},
            "nested": {"type": "object", "properties": {"n": {"type": "number", "minimum": 3}}},
        },
    }
    value = example_value(schema, 5, 0)
    assert value["ok"] is True and value["nested"] == {"n": 3}
    assert isinstance(value["tags"], list) and isinstance(value["tags"][0], str)
    assert isinstance(value["note"], str)
    assert example_value(schema, 5, 0) == value  # the same request, the same call


def test_an_agents_next_turn_reuses_the_call_it_was_given(
    make_options: Callable[..., EngineOptions],
) -> None:
    """The assistant turn that called a tool is part of the next prompt, so its blocks hit."""
    options = make_options(tools=PARSER, max_model_len=4096)
    first = chat(named(), max_tokens=100)
    (reply,) = call(options, ("POST", "/v1/chat/completions", first))
    message = reply.json()["choices"][0]["message"]
    result = {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "sunny"}
    turn2 = {**first, "messages": [*first["messages"], message, result], "tool_choice": "none"}
    replies = call(
        options, ("POST", "/v1/chat/completions", first), ("POST", "/v1/chat/completions", turn2)
    )
    usage = replies[1].json()["usage"]
    assert usage["prompt_tokens"] > replies[0].json()["usage"]["prompt_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] > 0


def test_tokenize_counts_the_tools_as_the_chat_prompt_does(
    make_options: Callable[..., EngineOptions],
) -> None:
    """`/tokenize` of a chat renders its tools, as vLLM's does and as the chat itself bills
    them: a gateway counts prompts there for its long-prompt gate and token limits."""
    body = chat("none", max_tokens=1)
    tokenize = {"model": "tiny", "messages": body["messages"], "tools": body["tools"]}
    answered, counted = call(
        make_options(), ("POST", "/v1/chat/completions", body), ("POST", "/tokenize", tokenize)
    )
    assert answered.status_code == 200 and counted.status_code == 200, counted.text
    assert counted.json()["count"] == answered.json()["usage"]["prompt_tokens"]
