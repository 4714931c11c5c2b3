"""The gateway in front of real vLLM (its CPU build, a tiny random Llama; `pytest -m vllm`, see
tests/server/test_compat.py): what a client gets through the gateway is what vLLM alone would
send it, for streams whose usage the gateway asks for on its own behalf and for a chat body
vLLM's `/tokenize` refuses."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.gateway.conftest import chat, gateway_for, stack_data
from tests.server.test_compat import up_engine

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Real vLLM serving the tiny Llama as `tiny`, started through `inhouse up`."""
    with up_engine("vllm", tmp_path_factory.mktemp("vllm")) as url:
        yield url


def _gateway_stack() -> dict[str, Any]:
    """One pool of attached vLLM: counted by its `/tokenize` (the model is no directory)."""
    data = stack_data(replicas=1, gateway={"health": {"interval_s": 30}})
    data["engine"] = "vllm"
    return data


def _events(text: str) -> list[Any]:
    out: list[Any] = []
    for event in filter(None, text.split("\n\n")):
        assert event.startswith("data: "), event
        data = event[6:]
        body = data if data == "[DONE]" else json.loads(data)
        if isinstance(body, dict):
            body["id"], body["created"] = "-", 0
        out.append(body)
    return out


def _stream(text: str) -> tuple[str, list[Any]]:
    """What a stream says, apart from where it splits into chunks: the text its deltas join
    to, and each chunk's shape in order (the delta's content blanked, a run of equal shapes
    once), the finish chunk and any usage chunk among them. How vLLM's tokens fall into
    chunks depends on timing (an empty delta while the detokenizer holds bytes back, tokens
    merged when the reader lags), so two streams of one request differ there and nowhere
    else."""
    events = _events(text)
    assert events[-1] == "[DONE]", events[-1]
    joined, shapes = "", []
    for chunk in events[:-1]:
        delta = chunk["choices"][0]["delta"] if chunk["choices"] else {}
        joined += delta.get("content") or ""
        shape = json.loads(json.dumps(chunk))
        if "content" in delta:
            shape["choices"][0]["delta"]["content"] = "..."
        if shape not in shapes[-1:]:
            shapes.append(shape)
    return joined, shapes


@pytest.mark.parametrize("options", [None, {"continuous_usage_stats": True}])
def test_a_stream_through_the_gateway_is_what_vllm_sends(
    vllm_url: str, options: dict[str, Any] | None
) -> None:
    """No usage chunk and no per-chunk usage the client did not ask for, and the finish
    chunk's `system_fingerprint` where vLLM puts it without `include_usage`."""
    extra: dict[str, Any] = {"max_tokens": 6, "stream": True, "temperature": 0}
    if options is not None:
        extra["stream_options"] = options
    body = chat(**extra)

    async def main() -> tuple[str, str]:
        async with gateway_for(_gateway_stack(), {"chat": [vllm_url]}) as (_, client):
            through = await client.post("/v1/chat/completions", json=body)
        async with httpx.AsyncClient(base_url=vllm_url, timeout=60) as direct:
            alone = await direct.post("/v1/chat/completions", json=dict(body, priority=0))
        assert through.status_code == alone.status_code == 200, (through.text, alone.text)
        return through.text, alone.text

    through, alone = asyncio.run(main())
    joined, shapes = _stream(alone)
    assert joined and shapes[-1]["choices"][0]["finish_reason"] == "length", alone
    assert _stream(through) == (joined, shapes)
    assert '"usage"' not in alone and '"system_fingerprint":"vllm-' in alone


def test_a_chat_body_vllm_tokenize_refuses_gets_vllm_chat_error(vllm_url: str) -> None:
    """vLLM's `/tokenize` names `body.prompt` first for a chat body it refuses (a tool without
    its function); the client gets the error vLLM's chat route gives the same body."""
    body = chat(max_tokens=1, tools=[{"type": "function"}])

    async def main() -> tuple[httpx.Response, httpx.Response]:
        async with gateway_for(_gateway_stack(), {"chat": [vllm_url]}) as (gateway, client):
            assert type(gateway.backends.pools["chat"].counter).__name__ == "RemoteCounter"
            through = await client.post("/v1/chat/completions", json=body)
        async with httpx.AsyncClient(base_url=vllm_url, timeout=60) as direct:
            alone = await direct.post("/v1/chat/completions", json=body)
        return through, alone

    through, alone = asyncio.run(main())
    assert through.status_code == alone.status_code == 400, (through.text, alone.text)
    assert through.json() == alone.json()
    assert through.json()["error"]["param"] == "body.tools.0.function"
