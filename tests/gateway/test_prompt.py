"""Prompt reading and the relay's byte handling, without any server."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inhouse.gateway.prompt import (
    LocalCounter,
    ParsedRequest,
    chat_refusal,
    parse_request,
    prompt_blocks,
)
from inhouse.gateway.relay import StreamState, flush, is_role_only, relay_piece
from inhouse.openai_errors import ApiError
from inhouse.tokenizer import SimpleTokenizer


def parsed(text: str) -> ParsedRequest:
    body = json.dumps({"model": "m", "prompt": text}).encode()
    return parse_request(body, "application/json", is_chat=False)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=300))
def test_local_count_equals_the_engine_tokenizer(text: str) -> None:
    tokenizer = SimpleTokenizer()
    count = asyncio.run(LocalCounter(tokenizer).count(parsed(text), "m", 10**6))
    assert count == len(tokenizer.encode(text))


def test_blocks_are_chained_and_prefix_stable() -> None:
    a = prompt_blocks(parsed("x" * 1000 + "tail one"), 7, 64)
    b = prompt_blocks(parsed("x" * 1000 + "tail two, longer"), 7, 64)
    assert len(a) == 3 and a == b[:3]  # 256-character blocks; the tail is a partial block
    other_root = prompt_blocks(parsed("x" * 1000), 8, 64)
    assert not set(other_root) & set(a)


def events(*payloads: str) -> bytes:
    return b"".join(f"data: {p}\n\n".encode() for p in payloads)


def test_relay_keeps_event_boundaries_and_drops_the_usage_it_added() -> None:
    usage = '{"id":"x","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}'
    stream = events('{"choices":[{"text":"a"}]}', '{"choices":[{"text":"b"}]}', usage, "[DONE]")
    state = StreamState(wants_usage=False)
    out = b"".join(relay_piece(state, stream[i : i + 7]) for i in range(0, len(stream), 7))
    out += flush(state)
    assert out == events('{"choices":[{"text":"a"}]}', '{"choices":[{"text":"b"}]}', "[DONE]")
    assert state.usage == {"prompt_tokens": 3, "completion_tokens": 2}
    assert state.has_first_token
    kept = StreamState(wants_usage=True)
    assert relay_piece(kept, stream) == stream


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
def test_relay_cuts_and_reads_events_of_an_engine_that_ends_lines_with_cr(newline: str) -> None:
    """SSE lines may end in CRLF or CR (an OpenAI-compatible engine behind some proxies does):
    the relay still forwards each event as it comes, sees the first token and takes the usage
    it asked for; before, it held the whole stream until the end (no first token, no usage,
    nothing billed). Cut at every byte, so a CR and its LF arrive apart."""
    usage = '{"id":"x","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}'
    lf = events('{"choices":[{"text":"a"}]}', usage, "[DONE]")
    stream = lf.replace(b"\n", newline.encode())
    state = StreamState(wants_usage=False)
    # A CR that ends a piece may be half a CRLF: the event goes out with the next byte.
    cut = stream.index(b"data: {", 1) + 1
    first = relay_piece(state, stream[:cut])
    assert first == events('{"choices":[{"text":"a"}]}') and state.has_first_token
    rest = stream[cut:]
    out = first + b"".join(relay_piece(state, rest[i : i + 1]) for i in range(len(rest)))
    out += flush(state)
    assert out == events('{"choices":[{"text":"a"}]}', "[DONE]")
    assert state.usage == {"prompt_tokens": 3, "completion_tokens": 2}
    assert state.num_events == 1


def test_role_chunk_alone_is_held_back() -> None:
    role = events('{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}')
    assert is_role_only(role)
    assert not is_role_only(role + events('{"choices":[{"delta":{"content":"x"}}]}'))
    state = StreamState(wants_usage=False)
    relay_piece(state, role)
    assert not state.has_first_token


def test_the_first_part_that_is_not_text_is_named() -> None:
    """What a text-only pool refuses: the first content part whose `type` (or, without one,
    whose key) is not text; text parts and what the engine must judge (a part that is not an
    object, a `type` that is not a string) pass."""

    def media(*contents: object) -> tuple[str, str] | None:
        messages = [{"role": "user", "content": content} for content in contents]
        body = json.dumps({"messages": messages}).encode()
        return parse_request(body, "application/json", is_chat=True).media_part

    text = {"type": "text", "text": "a"}
    assert media("plain", [text, {"type": "input_text", "text": "b"}, {"text": "c"}]) is None
    assert media([text, 5, {"type": 7}, {}], None) is None
    assert media([text], [text, {"type": "input_audio"}, {"type": "file"}]) == (
        "messages.1.content.1.type",
        "input_audio",
    )
    assert media([{"video_url": {"url": "v"}}]) == ("messages.0.content.0", "video_url")


def test_an_assistant_refusal_part_is_text_and_counted() -> None:
    """OpenAI's assistant turns may carry a `refusal` part, which vLLM renders as text: it is
    served, not refused as media, and its words count as prompt tokens (the gate and budgets)."""
    refusal = "I cannot help with that request, it asks for something I will not do. " * 20
    turns = [
        {"role": "user", "content": "do the thing"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": refusal}]},
        {"role": "user", "content": "please"},
    ]
    body = json.dumps({"messages": turns}).encode()
    request = parse_request(body, "application/json", is_chat=True)
    assert request.media_part is None
    without = json.dumps({"messages": [turns[0], {"role": "assistant", "content": []}, turns[2]]})
    bare = parse_request(without.encode(), "application/json", is_chat=True)
    counter = LocalCounter(SimpleTokenizer())
    counts = [asyncio.run(counter.count(r, "tiny", 100_000)) for r in (request, bare)]
    counted = counts[0] - counts[1]
    assert counted >= len(SimpleTokenizer().encode(refusal)), counted


def test_finish_chunks_wait_for_the_fingerprint_of_the_usage_chunk_the_gateway_drops() -> None:
    """vLLM stamps `system_fingerprint` on each finish chunk unless a usage chunk follows;
    the gateway's own include_usage moved it there. For a client that did not ask usage, each
    finish chunk waits for the usage chunk and gets its fingerprint; the other choice's tokens
    go on meanwhile (n=2)."""
    finish0 = '{"choices":[{"index":0,"text":"a","finish_reason":"length"}]}'
    token1 = '{"choices":[{"index":1,"text":"b","finish_reason":null}]}'
    finish1 = '{"choices":[{"index":1,"text":"c","finish_reason":"stop"}]}'
    usage = '{"choices":[],"usage":{"prompt_tokens":3},"system_fingerprint":"vllm-x"}'
    state = StreamState(wants_usage=False)
    assert relay_piece(state, events(finish0)) == b""
    assert relay_piece(state, events(token1)) == events(token1)
    assert relay_piece(state, events(finish1, usage, "[DONE]")) == events(
        finish0[:-1] + ',"system_fingerprint":"vllm-x"}',
        finish1[:-1] + ',"system_fingerprint":"vllm-x"}',
        "[DONE]",
    )
    assert state.usage == {"prompt_tokens": 3} and state.num_events == 3
    # A client that asked usage gets the engine's stream as it came.
    kept = StreamState(wants_usage=True)
    assert relay_piece(kept, events(finish0, usage, "[DONE]")) == events(finish0, usage, "[DONE]")


def test_finish_chunks_go_before_done_or_an_error_when_no_usage_chunk_comes() -> None:
    """An engine that sends no usage chunk (or no fingerprint on it): the held finish chunk
    goes out as it came, before `[DONE]`, an error event or the stream's end."""
    finish = '{"choices":[{"index":0,"text":"a","finish_reason":"length"}]}'
    error = '{"error":{"message":"boom","type":"InternalServerError","param":null,"code":500}}'
    for tail in ("[DONE]", error):
        state = StreamState(wants_usage=False)
        assert relay_piece(state, events(finish)) == b""
        assert relay_piece(state, events(tail)) == events(finish, tail)
    no_print = '{"choices":[],"usage":{"prompt_tokens":3}}'
    state = StreamState(wants_usage=False)
    assert relay_piece(state, events(finish, no_print)) == events(finish)
    state = StreamState(wants_usage=False)
    assert relay_piece(state, events(finish)) == b""
    assert flush(state) == events(finish) and state.num_events == 1


def test_a_chat_tokenize_refusal_names_the_fields_the_client_sent() -> None:
    """vLLM's two-shape `/tokenize` refuses a chat body with the prompt shape's error first;
    the client, who sent `messages`, gets the chat shape's errors alone, counted again."""
    prompt = "  {'type': 'missing', 'loc': 'body.prompt', 'msg': 'Field required'}"
    chat = [f"  {{'type': 'string_type', 'loc': 'body.messages.{i}.content'}}" for i in range(11)]
    many = ApiError(400, "\n".join(["12 validation errors:", prompt, *chat[:9],
                                    "  ...and 2 more errors"]), "body.prompt")  # fmt: skip
    relayed = chat_refusal(many)
    assert relayed.param == "body.messages.0.content"
    assert relayed.message == "\n".join(["11 validation errors:", *chat[:9],
                                         "  ...and 2 more errors"])  # fmt: skip
    odd = chat_refusal(ApiError(400, "prompt is required", "body.prompt"))
    assert (odd.message, odd.param) == ("prompt is required", "messages")
    other = ApiError(400, "1 validation error:\n" + chat[0], "body.messages.0.content")
    assert chat_refusal(other) is other
