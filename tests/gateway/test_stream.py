"""The stream a client gets through the gateway is the one the engine would send it alone:
the usage the gateway asks for on its own behalf (to settle token budgets) never shows."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from tests.gateway.conftest import (
    chat,
    engines,
    first_generation_request,
    gateway_for,
    stack_data,
)

# What the client asked for in `stream_options`: neither, each, both.
OPTIONS: list[dict[str, Any] | None] = [
    None,
    {},
    {"continuous_usage_stats": True},
    {"include_usage": True},
    {"include_usage": True, "continuous_usage_stats": True},
    {"include_usage": False, "continuous_usage_stats": True},
    {"include_usage": 1, "continuous_usage_stats": "yes"},  # booleans as vLLM reads them
]


def _normalized(text: str) -> list[Any]:
    """The stream's events, parsed, with the fields that differ between two runs (the id, the
    clock) blanked."""
    out: list[Any] = []
    for event in text.split("\n\n"):
        if not event:
            continue
        assert event.startswith("data: "), event
        data = event[6:]
        if data == "[DONE]":
            out.append(data)
            continue
        body = json.loads(data)
        body["id"], body["created"] = "-", 0
        out.append(body)
    return out


async def _stream(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> list[Any]:
    response = await client.post(path, json=body)
    assert response.status_code == 200, response.text
    return _normalized(response.text)


@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("is_chat", [True, False])
def test_a_stream_is_what_the_engine_sends_for_the_options_asked(
    options: dict[str, Any] | None, is_chat: bool
) -> None:
    """For each `stream_options` the client may send, its stream through the gateway is the
    engine's own stream, event for event: no usage-only chunk it did not ask for, no usage on
    each chunk when it asked `continuous_usage_stats` without `include_usage` (vLLM ignores
    that alone), and `system_fingerprint` on the finish chunk where the engine puts it when no
    usage chunk follows (before, the gateway's own include_usage moved it onto the usage chunk
    it then dropped: the client never saw it)."""
    extra: dict[str, Any] = {"max_tokens": 5, "stream": True, "seed": 1}
    if options is not None:
        extra["stream_options"] = options
    if is_chat:
        path, body = "/v1/chat/completions", chat(**extra)
    else:
        path, body = "/v1/completions", {"model": "tiny", "prompt": "Hello there", **extra}

    async def main() -> tuple[list[Any], list[Any]]:
        async with engines(2) as live:  # two: the second request would hit the first's cache
            urls = {"chat": [live[0].url]}
            async with gateway_for(stack_data(replicas=1), urls) as (_, client):
                through = await _stream(client, path, dict(body))
            async with httpx.AsyncClient(base_url=live[1].url, timeout=30) as direct:
                alone = await _stream(direct, path, dict(body, priority=0))
        return through, alone

    through, alone = asyncio.run(main())
    assert through == alone
    assert alone[-1] == "[DONE]"
    wants_usage = bool(options and options.get("include_usage"))  # the cases' values: truthy
    assert ("usage" in alone[-2]) is wants_usage
    fingerprints = [e for e in alone if isinstance(e, dict) and "system_fingerprint" in e]
    assert len(fingerprints) == 1 and re.match(r"vllm-", fingerprints[0]["system_fingerprint"])


ROLE = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
TOKEN = {"choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}]}
FINISH = {"choices": [{"index": 0, "delta": {"content": "!"}, "finish_reason": "length"}]}
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _piece(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(payload: object) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


@contextlib.asynccontextmanager
async def paced_engine(pieces: list[bytes], ends: bool) -> AsyncIterator[str]:
    """An engine whose generation routes answer a 200 stream of `pieces`, a moment apart (each
    its own read at the gateway), then end the body (`ends`) or close the connection."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await first_generation_request(reader, writer)
            writer.write(HEAD)
            for piece in pieces:
                writer.write(_piece(piece))
                await writer.drain()
                await asyncio.sleep(0.05)
            if ends:
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


def _through(pieces: list[bytes], ends: bool) -> str:
    async def main() -> str:
        async with paced_engine(pieces, ends) as url:
            data = stack_data(replicas=1, gateway={"health": {"interval_s": 30}})
            async with gateway_for(data, {"chat": [url]}) as (_, client):
                response = await client.post("/v1/chat/completions", json=chat(stream=True))
                assert response.status_code == 200, response.text
                return response.text

    return asyncio.run(main())


def test_a_finish_chunk_held_for_a_usage_chunk_that_never_comes_goes_before_done() -> None:
    """An engine that sends no usage chunk, its `[DONE]` a read of its own: the finish chunk
    the relay held for the usage chunk's fingerprint goes out before `[DONE]`, not after."""
    pieces = [_event(ROLE), _event(TOKEN), _event(TOKEN), _event(FINISH), b"data: [DONE]\n\n"]
    assert _through(pieces, ends=True) == b"".join(pieces).decode()


def test_a_finish_chunk_held_when_the_engine_dies_goes_before_the_error_event() -> None:
    """The engine's connection drops after the finish chunk, before the usage chunk: the
    client gets the finish chunk, then the error event."""
    pieces = [_event(ROLE), _event(TOKEN), _event(FINISH)]
    text = _through(pieces, ends=False)
    assert text.startswith(b"".join(pieces).decode()), text
    assert json.loads(text[len(b"".join(pieces)) :].split("\n\n")[0][6:])["error"]


def test_a_stream_the_engine_ends_without_done_ends_with_an_error_event() -> None:
    """The engine's body ends cleanly after some tokens but without `data: [DONE]` (its
    stream was cut short upstream of the gateway): the client gets the tokens, then an error
    event; before, the stream just ended, which an OpenAI client reads as a whole answer."""
    pieces = [_event(ROLE), _event(TOKEN), _event(TOKEN)]
    text = _through(pieces, ends=True)
    assert text.startswith(b"".join(pieces).decode()), text
    rest = [e for e in text[len(b"".join(pieces)) :].split("\n\n") if e]
    assert len(rest) == 2 and rest[1] == "data: [DONE]", rest
    error = json.loads(rest[0][6:])["error"]
    assert "[DONE]" in error["message"] and error["code"] == 502, error


def test_a_stream_the_engine_ends_before_any_token_is_a_502_not_an_empty_answer() -> None:
    """A 200 event stream with no event at all (or only the role chunk) and no `[DONE]`:
    nothing reached the client, so it is a failure of the replica (retried on the other, then
    a 502), not an empty 200 stream."""
    for pieces in ([], [_event(ROLE)]):

        async def main(pieces: list[bytes] = pieces) -> httpx.Response:
            async with paced_engine(pieces, ends=True) as url:
                data = stack_data(replicas=2, gateway={"health": {"interval_s": 30}})
                data["gateway"]["proxy"] = {"retries": 1}
                async with gateway_for(data, {"chat": [url, url]}) as (_, client):
                    return await client.post("/v1/chat/completions", json=chat(stream=True))

        response = asyncio.run(main())
        assert response.status_code == 502, response.text
        assert "[DONE]" in response.json()["error"]["message"], response.text
