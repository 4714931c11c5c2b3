"""Admission: what a request reserves against its tenant's token budgets is what the engine can
bill, whatever the gateway knows of the pool (its context length) and whatever the body holds
(text or media parts)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from tests.gateway.conftest import (
    chat,
    engine_options,
    engines,
    gateway_for,
    one_tenant_stack,
    recording_limits,
)

from inhouse.gateway.limits import SECONDS_PER_DAY, MemoryLimits
from inhouse.gateway.replicas import HealthMonitor
from inhouse.tokenizer import SimpleTokenizer, render_chat

WALL = 1_800_000_000.0  # a fixed clock: the day whose spending the tests read
DAY = int(WALL // SECONDS_PER_DAY)
ENGINE_CONTEXT = engine_options().knobs.max_model_len  # what the simulated engines run


@pytest.fixture
def unknown_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """The engines' `/v1/models` names no `max_model_len` (an attached server that does not
    report it): the gateway cannot learn the context length from them."""

    async def silent(self: HealthMonitor, replica: object) -> None:
        return None

    monkeypatch.setattr(HealthMonitor, "_read_models", silent)


def _prompt_tokens(text: str) -> int:
    return len(SimpleTokenizer().encode(render_chat([{"role": "user", "content": text}])))


@pytest.mark.usefixtures("unknown_context")
def test_a_pool_of_unknown_context_cannot_spend_past_a_daily_budget() -> None:
    """A tenant of 600 tokens a day sends 4 chats at once without `max_tokens` to a pool whose
    context length neither the stack nor the engine states. Each chat may generate the rest
    of the engine's 512-token context, so the gateway cannot bound what it reserves: each is
    a 400 naming `max_tokens` that holds nothing. Chats that name it are served and billed
    what the engine reports."""
    key, tenant, data = one_tenant_stack({"daily_tokens": 600})
    del data["pools"][0]["knobs"]["max_model_len"]
    store = MemoryLimits(clock=lambda: (time.monotonic(), WALL))

    async def main() -> tuple[list[int], list[int]]:
        async with engines(1) as live:
            urls = {"chat": [live[0].url]}
            async with gateway_for(data, urls, None, store) as (gateway, client):
                assert gateway.backends.pools["chat"].max_model_len() is None
                auth = {"authorization": f"Bearer {key}"}
                body = chat("hi", ignore_eos=True)
                sent = [client.post("/v1/chat/completions", json=body, headers=auth)
                        for _ in range(4)]  # fmt: skip
                refused = await asyncio.gather(*sent)
                for r in refused:
                    assert r.status_code == 400, r.text
                    error = r.json()["error"]
                    assert error["param"] == "max_tokens", error
                    assert "Set `max_tokens`" in error["message"], error
                assert store.daily_used(tenant, DAY) == 0  # a refusal holds nothing
                bounded = chat("hi", ignore_eos=True, max_tokens=100)
                sent = [client.post("/v1/chat/completions", json=bounded, headers=auth)
                        for _ in range(4)]  # fmt: skip
                served = await asyncio.gather(*sent)
                totals = [r.json()["usage"]["total_tokens"] for r in served if r.status_code == 200]
                return [r.status_code for r in served], totals

    statuses, totals = asyncio.run(main())
    spent = store.daily_used(tenant, DAY)
    assert spent <= 600, f"tenant spent {spent} tokens of a 600-token daily budget ({statuses})"
    # Each reserves prompt + 100 (under 150): four fit in 600, and settle to what they used.
    assert statuses == [200] * 4
    assert totals == [_prompt_tokens("hi") + 100] * 4
    assert spent == sum(totals)


def test_an_engine_with_a_longer_context_than_the_stack_says_cannot_spend_past_a_budget() -> None:
    """The stack says the pool's context is 128 tokens, but its engine was started with 512
    (an attached server configured apart from the stack file). A chat naming no `max_tokens`
    reserved the stack's 128 while the engine generated up to its 512: four at once billed a
    600-token day far past it. The reservation now covers the longest context the gateway
    knows of (the stack's or an engine's), and the gate still holds prompts to the stack's."""
    key, tenant, data = one_tenant_stack({"daily_tokens": 600})
    data["pools"][0]["knobs"]["max_model_len"] = 128
    store = MemoryLimits(clock=lambda: (time.monotonic(), WALL))

    async def main() -> list[int]:
        async with engines(1) as live:  # the simulated engine's context: 512 tokens
            urls = {"chat": [live[0].url]}
            async with gateway_for(data, urls, None, store) as (gateway, client):
                pool = gateway.backends.pools["chat"]
                for _ in range(100):  # the engine's /v1/models is read as it joins
                    if any(r.max_model_len for r in pool.replicas):
                        break
                    await asyncio.sleep(0.05)
                auth = {"authorization": f"Bearer {key}"}
                body = chat("hi", ignore_eos=True)
                sent = [client.post("/v1/chat/completions", json=body, headers=auth)
                        for _ in range(4)]  # fmt: skip
                return [r.status_code for r in await asyncio.gather(*sent)]

    statuses = asyncio.run(main())
    spent = store.daily_used(tenant, DAY)
    assert spent <= 600, f"tenant spent {spent} tokens of a 600-token daily budget ({statuses})"
    assert 200 in statuses and 429 in statuses, statuses


@pytest.mark.usefixtures("unknown_context")
def test_a_pool_of_unknown_context_serves_what_it_can_bound() -> None:
    """Without token limits nothing needs a bound: a chat naming no `max_tokens` is served as
    sent and the engine generates the rest of its context. With the tenant's
    `default_max_tokens` the gateway sends that and reserves it; a completion naming no
    `max_tokens` reserves the engine's 16; `max_tokens: null` on one is refused as a chat."""
    free = one_tenant_stack({"max_concurrency": 4})
    default = one_tenant_stack({"daily_tokens": 10_000, "default_max_tokens": 20})
    tpm = one_tenant_stack({"tpm": 10_000})
    data = free.data
    for other in (default, tpm):
        data["gateway"]["tenants"] += other.data["gateway"]["tenants"]
    free_key, default_key, tpm_key = free.key, default.key, tpm.key
    del data["pools"][0]["knobs"]["max_model_len"]
    store, reserved = recording_limits()
    completion: dict[str, Any] = {"model": "tiny", "prompt": "abcdefgh", "ignore_eos": True}

    async def post(client: Any, key: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        r = await client.post(path, json=body, headers={"authorization": f"Bearer {key}"})
        return {"status": r.status_code, **r.json()}

    async def main() -> None:
        async with engines(1) as live:
            urls = {"chat": [live[0].url]}
            async with gateway_for(data, urls, None, store) as (_, client):
                r = await post(
                    client, free_key, "/v1/chat/completions", chat("hi", ignore_eos=True)
                )
                assert r["status"] == 200 and r["usage"]["total_tokens"] == ENGINE_CONTEXT, r
                r = await post(client, default_key, "/v1/chat/completions",
                               chat("hi", ignore_eos=True))  # fmt: skip
                assert r["status"] == 200 and r["usage"]["completion_tokens"] == 20, r
                r = await post(client, default_key, "/v1/completions", completion)
                assert r["status"] == 200 and r["usage"]["completion_tokens"] == 20, r
                r = await post(client, tpm_key, "/v1/completions", completion)
                assert r["status"] == 200 and r["usage"]["completion_tokens"] == 16, r
                r = await post(
                    client, tpm_key, "/v1/completions", {**completion, "max_tokens": None}
                )
                assert r["status"] == 400 and r["error"]["param"] == "max_tokens", r

    asyncio.run(main())
    prompt = _prompt_tokens("hi")
    # The first tenant's reservation holds a concurrency slot; its tokens count against nothing.
    assert reserved[1:] == [prompt + 20, 2 + 20, 2 + 16]


IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
MEDIA_PARTS = [
    IMAGE,
    {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
    {"type": "video_url", "video_url": {"url": "https://example.invalid/v.mp4"}},
    {"type": "file", "file": {"file_data": "JVBERi0=", "filename": "a.pdf"}},
]


def test_a_media_part_is_refused_by_a_text_only_pool_and_holds_nothing() -> None:
    """An image (audio, video, file) part counts no prompt tokens locally, so it would pass the
    long-prompt gate and the budgets for free: the pools serve text-only models, so it is a 400
    naming the part's `type`, in vLLM's words, and reserves nothing. Text parts are served."""
    key, _, data = one_tenant_stack({"daily_tokens": 100_000, "max_concurrency": 1})
    store, reserved = recording_limits()
    text = {"type": "text", "text": "what is this?"}

    async def main() -> None:
        async with engines(1) as live:
            urls = {"chat": [live[0].url]}
            async with gateway_for(data, urls, None, store) as (_, client):
                auth = {"authorization": f"Bearer {key}"}
                for part in MEDIA_PARTS:
                    messages = [{"role": "system", "content": "be brief"},
                                {"role": "user", "content": [text, part]}]  # fmt: skip
                    body = {"model": "tiny", "max_tokens": 5, "messages": messages}
                    r = await client.post("/v1/chat/completions", json=body, headers=auth)
                    assert r.status_code == 400, r.text
                    error = r.json()["error"]
                    assert error["param"] == "messages.1.content.1.type", error
                    assert error["message"].startswith("tiny is not a multimodal model: "), error
                    assert f"value={part['type']}" in error["message"], error
                untyped = {"image_url": IMAGE["image_url"]}  # vLLM reads the kind from the key
                body = chat(max_tokens=5, messages=[{"role": "user", "content": [untyped]}])
                r = await client.post("/v1/chat/completions", json=body, headers=auth)
                assert r.status_code == 400, r.text
                assert r.json()["error"]["param"] == "messages.0.content.0", r.text
                assert reserved == []  # no refusal reserved anything
                body = chat(max_tokens=5, messages=[{"role": "user", "content": [text, text]}])
                r = await client.post("/v1/chat/completions", json=body, headers=auth)
                assert r.status_code == 200, r.text

    asyncio.run(main())
    assert len(reserved) == 1
