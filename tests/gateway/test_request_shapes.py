"""Request bodies of every shape the API allows are read as the engine reads them: what the
gateway counts for the long-prompt gate and the reservation is what the engine bills, and a body
the gateway cannot forward is a 400 that holds nothing."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
from tests.gateway.conftest import (
    MODEL,
    engines,
    free_port,
    gateway_for,
    one_tenant_stack,
    recording_limits,
    stack_data,
)

from inhouse.gateway.limits import SECONDS_PER_DAY, MemoryLimits
from inhouse.gateway.prompt import LocalCounter, RemoteCounter, parse_request
from inhouse.openai_errors import ApiError
from inhouse.server.protocol import ChatCompletionRequest, message_dicts, parse_body
from inhouse.server.tools import tools_prompt
from inhouse.tokenizer import SimpleTokenizer, render_chat

CALLS = [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]


def _history(text: str, content_as_parts: bool) -> list[dict[str, Any]]:
    """An agent's turn: an assistant message that said `text` and called a tool, the tool's
    answer, and the user's next question."""
    content: Any = [{"type": "text", "text": text}] if content_as_parts else text
    return [
        {"role": "assistant", "content": content, "tool_calls": CALLS},
        {"role": "tool", "tool_call_id": "c1", "content": "found"},
        {"role": "user", "content": "and then?"},
    ]


def _engine_count(body: dict[str, Any]) -> int:
    """The simulated engine's prompt tokens for a chat body (its own parse and render)."""
    request = parse_body(json.dumps(body).encode(), "application/json", ChatCompletionRequest)
    extra = dict(request.model_extra or {})
    if request.tools is not None:
        extra["tools"] = [tool.model_dump(exclude_unset=True) for tool in request.tools]
    text = tools_prompt(extra) + render_chat(
        message_dicts(request.messages), request.add_generation_prompt
    )
    return len(SimpleTokenizer().encode(text))


def _gateway_count(body: dict[str, Any]) -> int:
    parsed = parse_request(json.dumps(body).encode(), "application/json", True)
    return asyncio.run(LocalCounter(SimpleTokenizer()).count(parsed, "tiny", 1 << 20))


def test_an_assistant_turn_with_tool_calls_counts_as_the_engine_counts_it() -> None:
    for as_parts in (False, True):
        for text in ("", "I will look that up.", "x" * 4000):
            body = {"model": "tiny", "messages": _history(text, as_parts)}
            assert _gateway_count(body) == _engine_count(body), (as_parts, len(text))


def _two_pools() -> dict[str, Any]:
    data = stack_data(replicas=1, long_prompt_tokens=200, long_pool="long")
    data["pools"][0]["knobs"]["max_model_len"] = 4096
    data["pools"].append(
        {
            "name": "long",
            "model": MODEL,
            "served_model_name": "long",
            "replicas": 1,
            "knobs": {"max_model_len": 8192, "max_num_seqs": 16},
        }
    )
    return data


def test_text_parts_beside_tool_calls_reach_the_long_pool() -> None:
    """1,000 prompt tokens in an assistant turn's text parts, beside its tool calls: over the
    pool's `long_prompt_tokens` (200), so the request goes to the long pool."""

    async def main() -> None:
        async with (
            engines(1, max_model_len=4096) as short,
            engines(1, max_model_len=8192, served_model_names=("long",)) as long,
        ):
            urls = {"chat": [short[0].url], "long": [long[0].url]}
            async with gateway_for(_two_pools(), urls) as (_, client):
                body = {"model": "tiny", "max_tokens": 1, "messages": _history("x" * 4000, True)}
                r = await client.post("/v1/chat/completions", json=body)
                assert r.status_code == 200, r.text
                assert r.json()["usage"]["prompt_tokens"] > 1000
                assert r.headers["x-inhouse-pool"] == "long"

    asyncio.run(main())


def test_text_parts_beside_tool_calls_cannot_spend_past_the_daily_budget() -> None:
    """A tenant with 300 tokens a day sends a 1,000-token prompt whose text sits in an
    assistant turn's parts beside its tool calls: refused (429), nothing spent."""
    key, tenant, data = one_tenant_stack({"daily_tokens": 300})
    data["pools"][0]["knobs"]["max_model_len"] = 4096
    wall = 1_800_000_000.0  # a fixed clock: the day whose spending the test reads
    store = MemoryLimits(clock=lambda: (time.monotonic(), wall))

    async def main() -> None:
        async with engines(1, max_model_len=4096) as live:
            urls = {"chat": [live[0].url]}
            async with gateway_for(data, urls, None, store) as (_, client):
                auth = {"authorization": f"Bearer {key}"}
                body = {"model": "tiny", "max_tokens": 1, "messages": _history("x" * 4000, True)}
                r = await client.post("/v1/chat/completions", json=body, headers=auth)
                assert r.status_code == 429, r.text
                assert r.json()["error"]["code"] == 429

    asyncio.run(main())
    spent = store.daily_used(tenant, int(wall // SECONDS_PER_DAY))
    assert spent <= 300, f"tenant spent {spent} tokens of a 300-token daily budget"


def test_tool_definitions_count_as_the_engine_renders_them() -> None:
    """The engine renders tools as `json.dumps` does (", " and ": " between items): a schema
    of many small items is half as long again as compact JSON, and must count so."""
    enum = list(range(10)) * 300
    schema = {"type": "object", "properties": {"k": {"enum": enum}}}
    function = {"name": "pick", "description": "é 😀 x", "parameters": schema}
    tools = [{"type": "function", "function": function}]
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "tools": tools}
    assert _gateway_count(body) == _engine_count(body)


def _nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


def test_a_body_nested_too_deep_to_forward_is_a_400_that_holds_no_slot() -> None:
    """A body the JSON parser reads but the gateway cannot write back (nested past orjson's
    255 levels) is refused naming `body`, before it reserves: the tenant's one concurrency slot
    stays free for its next request."""
    key, _, data = one_tenant_stack({"max_concurrency": 1})

    async def main() -> None:
        async with engines(1) as live:
            urls = {"chat": [live[0].url]}
            async with gateway_for(data, urls, None, MemoryLimits()) as (_, client):
                headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
                messages = '[{"role":"user","content":"hi"}]'
                extras = [f'"metadata":{_nested(300)}', f'"tools":[{_nested(300)}]',
                          f'"tools":[{_nested(1000)}]']  # fmt: skip
                for extra in extras:
                    raw = f'{{"model":"tiny","max_tokens":1,"messages":{messages},{extra}}}'
                    r = await client.post("/v1/chat/completions", content=raw, headers=headers)
                    assert r.status_code == 400, r.text
                    assert r.json()["error"]["param"] == "body"
                    assert "nested" in r.json()["error"]["message"]
                ok = f'{{"model":"tiny","max_tokens":1,"messages":{messages}}}'
                r = await client.post("/v1/chat/completions", content=ok, headers=headers)
                assert r.status_code == 200, r.text

    asyncio.run(main())


def test_a_completion_without_max_tokens_reserves_the_engines_default_of_16() -> None:
    """vLLM (and OpenAI) generate 16 tokens for a completion that names no `max_tokens`: the
    gateway reserves that, not the whole context, so a tenant of 300 tokens a minute is served
    (it was told to "lower max_tokens", which it never sent); `max_tokens: null` asks for the
    rest of the context and reserves it."""
    key, _, data = one_tenant_stack({"tpm": 300})
    store, reserved = recording_limits()

    async def main() -> None:
        async with engines(1) as live:
            urls = {"chat": [live[0].url]}
            async with gateway_for(data, urls, None, store) as (_, client):
                auth = {"authorization": f"Bearer {key}"}
                body = {"model": "tiny", "prompt": "abcdefgh"}  # 2 tokens
                r = await client.post("/v1/completions", json=body, headers=auth)
                assert r.status_code == 200, r.text
                assert r.json()["usage"]["completion_tokens"] <= 16
                unbounded = {**body, "max_tokens": None}
                r = await client.post("/v1/completions", json=unbounded, headers=auth)
                assert r.status_code == 429, r.text  # 2 + 510 > 300 tokens a minute

    asyncio.run(main())
    assert reserved == [2 + 16, 2 + 510]


def test_a_key_sent_twice_reaches_the_engine_with_the_value_the_gateway_reserved() -> None:
    """`max_tokens` twice: the gateway reads the last and forwards the body as it re-writes it,
    so the engine generates what was reserved; with both names on a chat, vLLM's
    `max_completion_tokens` rules in the reservation as at the engine."""
    key, _, data = one_tenant_stack({"tpm": 100_000})
    store, reserved = recording_limits()
    messages = '"messages":[{"role":"user","content":"abcd"}]'

    async def main() -> None:
        async with engines(1) as live:
            urls = {"chat": [live[0].url]}
            async with gateway_for(data, urls, None, store) as (_, client):
                headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
                for fields, expected in (
                    ('"max_tokens":400,"max_tokens":3', 3),
                    ('"max_tokens":400,"max_completion_tokens":3', 3),
                ):
                    raw = f'{{"model":"tiny","ignore_eos":true,{fields},{messages}}}'
                    r = await client.post("/v1/chat/completions", content=raw, headers=headers)
                    assert r.status_code == 200, r.text
                    assert r.json()["usage"]["completion_tokens"] == expected
                raw = f'{{"model":"tiny","max_tokens":3,"max_tokens":600,{messages}}}'
                r = await client.post("/v1/chat/completions", content=raw, headers=headers)
                assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"

    asyncio.run(main())
    prompt = len(SimpleTokenizer().encode(render_chat([{"role": "user", "content": "abcd"}])))
    assert reserved == [prompt + 3, prompt + 3]


def test_tools_count_through_the_engines_tokenize_too() -> None:
    """A pool of attached engines is counted by their `/tokenize`, which renders the tools as
    the chat does (vLLM's does): a 1,000-token tool description goes to the long pool."""
    data = _two_pools()
    data["engine"] = "vllm"
    description = "d" * 4000
    tools = [{"type": "function", "function": {"name": "f", "description": description}}]

    async def main() -> None:
        async with (
            engines(1, max_model_len=4096) as short,
            engines(1, max_model_len=8192, served_model_names=("long",)) as long,
        ):
            urls = {"chat": [short[0].url], "long": [long[0].url]}
            async with gateway_for(data, urls) as (gateway, client):
                assert "Remote" in type(gateway.backends.pools["chat"].counter).__name__
                body = {"model": "tiny", "max_tokens": 1, "tools": tools, "tool_choice": "none",
                        "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
                r = await client.post("/v1/chat/completions", json=body)
                assert r.status_code == 200, r.text
                assert r.json()["usage"]["prompt_tokens"] > 1000
                assert r.headers["x-inhouse-pool"] == "long"

    asyncio.run(main())


def test_an_attached_pool_that_cannot_count_answers_503_with_retry_after() -> None:
    """Counting an attached pool's prompt asks its `/tokenize`; with no replica answering the
    client gets the 503 + Retry-After of a pool that is down, not a 500."""
    data = stack_data(replicas=1)
    data["engine"] = "vllm"

    async def main() -> None:
        dead = f"http://127.0.0.1:{free_port()}"
        async with gateway_for(data, {"chat": [dead]}) as (_, client):
            body = {
                "model": "tiny",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": "hi"}],
            }
            r = await client.post("/v1/chat/completions", json=body)
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == 503
            assert int(r.headers["retry-after"]) >= 1

    asyncio.run(main())


def test_a_tokenize_answer_without_a_count_is_a_502() -> None:
    parsed = parse_request(b'{"prompt":"hello"}', "application/json", False)
    for answer in ({"tokens": [1]}, {"count": "7"}, {"count": -1}, ["count"]):

        async def post(path: str, payload: dict[str, Any], answer: object = answer) -> object:
            return answer

        try:
            asyncio.run(RemoteCounter(post).count(parsed, "tiny", 512))
        except ApiError as error:
            assert error.status == 502, answer
        else:
            raise AssertionError(f"{answer!r} was taken as a count")
    ok = RemoteCounter(lambda path, payload: asyncio.sleep(0, {"count": 2}))
    assert asyncio.run(ok.count(parsed, "tiny", 512)) == 2


def test_an_attached_pool_relays_what_its_tokenize_refused_as_one_error() -> None:
    """A body the engine's `/tokenize` refuses gets the engine's own message and `param`, not
    the engine's JSON quoted inside a message; one nested too deep to send there is the
    gateway's 400 naming `body`, not a 500."""
    data = stack_data(replicas=1)
    data["engine"] = "vllm"
    headers = {"content-type": "application/json"}

    def body(content: str) -> str:
        message = f'{{"role":"user","content":{content}}}'
        return f'{{"model":"tiny","max_tokens":1,"messages":[{message}]}}'

    async def main() -> None:
        async with engines(1) as live, gateway_for(data, {"chat": [live[0].url]}) as (_, client):
            r = await client.post("/v1/chat/completions", content=body("[5]"), headers=headers)
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            # A part that is no part type passes vLLM's message classes and fails as /tokenize
            # reads it: vLLM's plain 400 with no param (as real vLLM 0.32 answers; see
            # tests/server/test_compat.py), the same words as the engine's chat route gives.
            async with httpx.AsyncClient(base_url=live[0].url) as engine:
                alone = await engine.post("/v1/chat/completions", content=body("[5]"),
                                          headers=headers)  # fmt: skip
            assert alone.status_code == 400, alone.text
            assert error == alone.json()["error"], (error, alone.text)
            assert error["param"] is None, error
            assert error["type"] == "BadRequestError", error
            assert error["message"].startswith("4 validation errors for ValidatorIterator\n")
            assert "body.prompt" not in error["message"], error
            tool = json.dumps({"type": "function"})  # no function: vLLM's /tokenize refuses it
            raw = body('"hi"')[:-1] + f',"tools":[{tool}]}}'
            r = await client.post("/v1/chat/completions", content=raw, headers=headers)
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == "body.tools.0.function", r.text
            assert r.json()["error"]["message"].startswith("1 validation error:"), r.text
            raw = body(f"[{_nested(1000)}]")
            r = await client.post("/v1/chat/completions", content=raw, headers=headers)
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == "body"

    asyncio.run(main())


def test_an_engine_refusal_is_relayed_in_one_shape() -> None:
    from inhouse.gateway.backends import engine_refusal

    shaped = engine_refusal(400, b'{"error":{"message":"no","param":"messages","code":400}}')
    assert (shaped.status, shaped.message, shaped.param) == (400, "no", "messages")
    plain = engine_refusal(422, b"not json")
    assert (plain.status, plain.message, plain.param) == (422, "not json", None)
    for odd in (b'{"detail":"x"}', b'{"error":"x"}', b"[]"):
        assert engine_refusal(400, odd).message == odd.decode()
    failed = engine_refusal(500, b'{"error":{"message":"boom"}}')
    assert failed.status == 502 and failed.retry_after_s and "boom" in failed.message
