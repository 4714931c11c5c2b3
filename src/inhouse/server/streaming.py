"""Streaming (SSE) bodies of the simulated engine, chunk for chunk as vLLM 0.32 frames them:
the chat role chunk first, one chunk per token (the last with `finish_reason` and
`stop_reason`), the usage chunk with `choices: []` when asked, then `data: [DONE]`."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from inhouse.openai_errors import ENGINE_DEAD_MESSAGE, ApiError
from inhouse.server.generation import output_text
from inhouse.server.responses import DONE, SYSTEM_FINGERPRINT, sse, usage
from inhouse.server.runner import Stream
from inhouse.server.state import EngineState
from inhouse.server.tools import ToolCall
from inhouse.server.tools import delta as tool_delta


def usage_of(state: EngineState, stream: Stream, details: bool = True) -> dict[str, Any]:
    """The usage body. `created_cache_tokens` is a chat field: vLLM's chat handler fills it,
    its completions handler leaves it null."""
    request = stream.request
    # Only the prompt's full blocks count: `block_hashes` also covers the answer's blocks.
    prompt_blocks = min(len(request.block_hashes), request.num_prompt_tokens // state.block_size)
    created = max(0, prompt_blocks * state.block_size - request.num_cached_tokens)
    is_chat = stream.request_id.startswith("chatcmpl-")
    return usage(
        request.num_prompt_tokens,
        stream.num_tokens,
        request.num_cached_tokens,
        created if is_chat and state.replica.config.enable_prefix_caching else None,
        details,
    )


async def _token_batches(stream: Stream) -> AsyncIterator[tuple[int, int]]:
    """(start, end) ranges of newly generated tokens, until the stream finishes."""
    sent = 0
    while True:
        if stream.num_tokens > sent:
            yield sent, stream.num_tokens
            sent = stream.num_tokens
        if stream.finished:
            return
        await stream.event.wait()
        stream.event.clear()


async def stream_chat(
    state: EngineState,
    stream: Stream,
    model: str,
    include_usage: bool,
    continuous: bool,
    call: ToolCall | None = None,
) -> AsyncIterator[bytes]:
    created = int(time.time())
    head = (
        f'{{"id":"{stream.request_id}","object":"chat.completion.chunk",'
        f'"created":{created},"model":{json.dumps(model)},'
    )
    continuous = continuous and include_usage  # vLLM ignores it without include_usage
    role_usage = ""
    if continuous:  # the role chunk counts the prompt, no tokens yet
        prompt = stream.request.num_prompt_tokens
        role_usage = (
            f',"usage":{{"prompt_tokens":{prompt},"total_tokens":{prompt},'
            '"completion_tokens":0,"completion_tokens_details":null}'
        )
    yield sse(
        head + '"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
        f'"logprobs":null,"finish_reason":null}}]{role_usage},"prompt_token_ids":null,'
        '"prompt_text":null}'
    )

    def chunk_delta(delta: str, reason: str | None, usage_json: str) -> bytes:
        tail = (
            ',"finish_reason":null,"token_ids":null}'
            if reason is None
            else f',"finish_reason":"{reason}","stop_reason":{_stop_json(stream, reason)},'
            '"token_ids":null}'
        )
        if usage_json:  # chat's per-chunk usage names completion_tokens_details
            usage_json = usage_json[:-1] + ',"completion_tokens_details":null}'
        fingerprint = _last_chunk_fingerprint(reason, include_usage)
        return sse(
            f'{head}"choices":[{{"index":0,"delta":{delta},"logprobs":null{tail}]{usage_json}'
            f"{fingerprint}}}"
        )

    def chunk(text: str, reason: str | None, usage_json: str) -> bytes:
        return chunk_delta(
            f'{{"content":{json.dumps(text, ensure_ascii=False)}}}', reason, usage_json
        )

    events = chunk if call is None else _tool_chunks(call, chunk_delta)
    async for data in _events(state, stream, continuous, events, head, include_usage):
        yield data


def _last_chunk_fingerprint(reason: str | None, include_usage: bool) -> str:
    """`system_fingerprint` goes on the last chunk before [DONE]: the finish chunk, unless a
    usage chunk follows it."""
    if reason is None or include_usage:
        return ""
    return f',"system_fingerprint":"{SYSTEM_FINGERPRINT}"'


def _tool_chunks(
    call: ToolCall, chunk_delta: Callable[[str, str | None, str], bytes]
) -> Callable[[str, str | None, str], bytes]:
    """Chunks of a forced tool call: each token adds argument text (the first names the call);
    a token that adds none (the `required` array's wrapper) sends nothing, as vLLM's parser
    sends nothing, unless it carries the finish reason."""
    raw: list[str] = []
    shown = [""]
    named = [False]

    def tool_chunk(text: str, reason: str | None, usage_json: str) -> bytes:
        raw.append(text)
        visible = call.arguments_in("".join(raw))
        added = visible[len(shown[0]) :]
        shown[0] = visible
        if reason == "stop":
            reason = call.finish_reason
        if not added and reason is None:
            return b""
        delta: dict[str, Any] = {}
        if added:
            delta = tool_delta(call, not named[0], added)
            named[0] = True
        text_delta = json.dumps(delta, ensure_ascii=False, separators=(",", ":"))
        return chunk_delta(text_delta, reason, usage_json)

    return tool_chunk


async def stream_completion(
    state: EngineState, stream: Stream, model: str, include_usage: bool, continuous: bool
) -> AsyncIterator[bytes]:
    created = int(time.time())
    head = (
        f'{{"id":"{stream.request_id}","object":"text_completion",'
        f'"created":{created},"model":{json.dumps(model)},'
    )

    continuous = continuous and include_usage  # vLLM ignores it without include_usage

    def chunk(text: str, reason: str | None, usage_json: str) -> bytes:
        finish = "null" if reason is None else f'"{reason}"'
        stop = "null" if reason is None else _stop_json(stream, reason)
        fingerprint = _last_chunk_fingerprint(reason, include_usage)
        return sse(
            f'{head}"choices":[{{"index":0,"text":{json.dumps(text, ensure_ascii=False)},'
            f'"logprobs":null,"finish_reason":{finish},"stop_reason":{stop},'
            f'"prompt_token_ids":null,"token_ids":null}}]{usage_json}{fingerprint}}}'
        )

    async for data in _events(state, stream, continuous, chunk, head, include_usage):
        yield data


def _stop_json(stream: Stream, reason: str) -> str:
    stop_reason = stream.plan.stop_reason if reason == "stop" else None
    return json.dumps(stop_reason)


def _stream_usage(state: EngineState, stream: Stream) -> dict[str, Any]:
    body = usage_of(state, stream)
    details = body.pop("prompt_tokens_details")
    body.pop("completion_tokens_details")
    body["prompt_tokens_details"] = {
        k: v
        for k, v in details.items()
        if k in ("cached_tokens", "created_cache_tokens") and v is not None
    }
    return body


Piece = tuple[str, str | None, str]
ENDED_EARLY = ("abort", "error")  # no token carries these: an abort piece or error event does


async def _events(
    state: EngineState,
    stream: Stream,
    continuous: bool,
    chunk: Callable[[str, str | None, str], bytes],
    head: str,
    include_usage: bool,
) -> AsyncIterator[bytes]:
    """The token chunks of either endpoint (`chunk` shapes one), then the usage-only chunk
    when asked for, then `[DONE]`."""
    async for batch in _batches(state, stream, continuous):
        yield b"".join(chunk(*piece) for piece in batch)
    if stream.finish_reason == "error":  # the engine died: vLLM's error event, then [DONE]
        yield b"data: " + ApiError(500, ENGINE_DEAD_MESSAGE).body() + b"\n\n" + DONE
        return
    if include_usage:
        body = json.dumps(_stream_usage(state, stream), separators=(",", ":"))
        yield sse(
            f'{head}"choices":[],"usage":{body},"system_fingerprint":"{SYSTEM_FINGERPRINT}"}}'
        )
    yield DONE


async def _batches(
    state: EngineState, stream: Stream, continuous: bool
) -> AsyncIterator[list[Piece]]:
    """Per wake-up, one (text, finish_reason or None, usage JSON suffix) per new token; an
    aborted stream ends with an empty piece whose reason is "abort". NOTE: tokens that piled
    up while this handler waited go out in one write (one chunk each), which keeps a lagging
    server from falling further behind."""
    tokenizer = state.tokenizer
    plan = stream.plan
    raw_chars = 0
    prompt = stream.request.num_prompt_tokens
    async for start, end in _token_batches(stream):
        batch: list[Piece] = []
        for index in range(start, end):
            text, raw_chars = output_text(tokenizer, plan, index, index + 1, raw_chars)
            is_last = (
                stream.finished and index == end - 1 and stream.finish_reason not in ENDED_EARLY
            )
            reason = stream.finish_reason if is_last else None
            suffix = ""
            if continuous:
                done = index + 1
                suffix = (
                    f',"usage":{{"prompt_tokens":{prompt},"total_tokens":{prompt + done},'
                    f'"completion_tokens":{done}}}'
                )
            batch.append((text, reason, suffix))
        yield batch
    if stream.finish_reason == "abort":
        yield [("", "abort", "")]
