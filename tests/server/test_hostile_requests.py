"""Hostile and edge request bodies: each gets vLLM's 4xx and error shape, never a traceback."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

from inhouse.server.inprocess import inprocess_engine
from inhouse.server.state import EngineOptions


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


PARSE_ERROR = {
    "message": "There was an error parsing the body",
    "type": "Bad Request",
    "param": None,
    "code": 400,
}


def test_a_body_that_is_not_utf8_or_nests_too_deep_is_a_400(
    make_options: Callable[..., EngineOptions],
) -> None:
    not_utf8 = b'{"model": "tiny", "prompt": "\xff\xfe", "max_tokens": 2}'
    too_deep = b'{"model": "tiny", "prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    responses = post_raw(make_options(), "/v1/completions", not_utf8, too_deep)
    for response in responses:
        assert response.status_code == 400
        assert error_of(response) == PARSE_ERROR


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
    assert error_of(negative) == {
        "message": "Token id -1 is out of vocabulary",
        "type": "BadRequestError",
        "param": "prompt",
        "code": 400,
    }
    assert error_of(huge)["message"] == "Token id 1000000000000 is out of vocabulary"
    assert error_of(one_past)["message"] == "Token id 128256 is out of vocabulary"
    assert last.status_code == 200 and last.json()["usage"]["prompt_tokens"] == 2
