"""Client input never grows the gateway's state or output without bound, and what a request
costs counts all of it (issue 15, defects 6 and 7): unknown model names are one series, names
quoted back and `x-request-id` are capped, tool definitions are prompt tokens, and `n` outputs
reserve `n` times max_tokens."""

from __future__ import annotations

import asyncio
import uuid

from tests.gateway.conftest import (
    chat,
    engines,
    gateway_for,
    one_tenant_stack,
    recording_limits,
    stack_data,
)

from inhouse.gateway.prompt import parse_request
from inhouse.gateway.request_io import MAX_QUOTED_CHARS, MAX_REQUEST_ID_CHARS


def test_unknown_model_names_share_one_series_and_are_quoted_only_in_part() -> None:
    async def main() -> None:
        async with engines(1) as live:
            urls = {"chat": [live[0].url]}
            async with gateway_for(stack_data(replicas=1), urls) as (gateway, client):
                before = len(gateway.metrics.render())
                for i in range(300):
                    body = chat(max_tokens=1)
                    body["model"] = f"no-such-model-{uuid.uuid4().hex}-{i}"
                    r = await client.post("/v1/chat/completions", json=body)
                    assert r.status_code == 404
                huge = chat(max_tokens=1)
                huge["model"] = "m" * 1_000_000
                r = await client.post("/v1/chat/completions", json=huge)
                assert r.status_code == 404
                assert len(r.content) < MAX_QUOTED_CHARS + 500
                text = gateway.metrics.render().decode()
                assert len(text) - before < 2000  # a handful of series, not 301
                assert 'model="unknown"' in text
                assert "no-such-model" not in text

    asyncio.run(main())


def test_a_long_request_id_is_cut_where_it_is_echoed() -> None:
    async def main() -> None:
        async with engines(1) as live:
            urls = {"chat": [live[0].url]}
            async with gateway_for(stack_data(replicas=1), urls) as (_, client):
                long_id = "r" * 60_000
                r = await client.post(
                    "/v1/chat/completions",
                    json=chat(max_tokens=1),
                    headers={"x-request-id": long_id},
                )
                assert r.status_code == 200
                assert r.headers["x-request-id"] == long_id[:MAX_REQUEST_ID_CHARS]

    asyncio.run(main())


def test_tool_definitions_count_as_prompt_tokens() -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "description": "d" * 200_000,
                                                "parameters": {"type": "object"}}}]  # fmt: skip
    plain = parse_request(b'{"messages":[{"role":"user","content":"hi"}]}', "application/json",
                          True)  # fmt: skip
    import json

    raw = json.dumps({"messages": [{"role": "user", "content": "hi"}], "tools": tools}).encode()
    with_tools = parse_request(raw, "application/json", True)
    assert with_tools.text is not None and plain.text is not None
    assert len(with_tools.text) > len(plain.text) + 200_000
    calls = [{"id": "1", "type": "function", "function": {"name": "lookup",
                                                          "arguments": "a" * 5000}}]  # fmt: skip
    history = {"messages": [{"role": "assistant", "content": None, "tool_calls": calls},
                            {"role": "tool", "content": "ok", "tool_call_id": "1"}]}  # fmt: skip
    parsed = parse_request(json.dumps(history).encode(), "application/json", True)
    assert parsed.text is not None and "a" * 5000 in parsed.text

    async def main() -> None:
        async with engines(1) as live:
            urls = {"chat": [live[0].url]}
            async with gateway_for(stack_data(replicas=1), urls) as (_, client):
                body = chat(max_tokens=1, tools=tools)
                r = await client.post("/v1/chat/completions", json=body)
                assert r.status_code == 400, r.text  # far past max_model_len 512
                assert r.json()["error"]["param"] == "input_tokens"

    asyncio.run(main())


def test_n_outputs_reserve_n_times_max_tokens() -> None:
    key, _, data = one_tenant_stack({"tpm": 1000})
    store, reserved = recording_limits()

    async def main() -> None:
        async with engines(1) as live:
            urls = {"chat": [live[0].url]}
            async with gateway_for(data, urls, None, store) as (_, client):
                auth = {"authorization": f"Bearer {key}"}
                body = chat("hi", max_tokens=200, n=6)
                r = await client.post("/v1/chat/completions", json=body, headers=auth)
                assert r.status_code == 429, r.text  # 6 x 200 > 1000 tokens a minute
                assert "lower max_tokens" in r.json()["error"]["message"]
                bad = await client.post("/v1/chat/completions", json=chat("hi", n=0), headers=auth)
                assert bad.status_code == 400 and bad.json()["error"]["param"] == "n"

    asyncio.run(main())
    assert reserved and reserved[0] >= 6 * 200
