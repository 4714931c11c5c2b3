"""The gateway's API face: auth, errors in OpenAI's shape, the long-prompt gate, models,
health, metrics and the OpenAPI document."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from tests.gateway.conftest import (
    KEY,
    LiveEngine,
    chat,
    engines,
    gateway_for,
    one_tenant_stack,
    stack_data,
)

from inhouse.gateway.app import create_metrics_app
from inhouse.gateway.service import Gateway

Check = Callable[[httpx.AsyncClient, list[LiveEngine]], Awaitable[None]]


def run_with_gateway(check: Check, data: dict[str, Any] | None = None) -> None:
    async def main() -> None:
        async with engines(1) as live:
            data_ = data or stack_data(replicas=1)
            async with gateway_for(data_, {"chat": [live[0].url]}) as (_, client):
                await check(client, live)

    asyncio.run(main())


def assert_error(response: httpx.Response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == status
    if param is not None:
        assert error["param"] == param
    return error


def test_keys_and_models() -> None:
    async def check(client: httpx.AsyncClient, live: list[LiveEngine]) -> None:
        no_key = await client.post(
            "/v1/chat/completions", json=chat(), headers={"authorization": ""}
        )
        assert_error(no_key, 401)
        wrong = await client.post(
            "/v1/chat/completions", json=chat(), headers={"authorization": "Bearer nope"}
        )
        assert_error(wrong, 401)
        models = await client.get("/v1/models")
        assert [m["id"] for m in models.json()["data"]] == ["tiny"]
        assert models.json()["data"][0]["max_model_len"] == 512
        unknown = await client.post("/v1/chat/completions", json=chat(model="nope"))
        error = assert_error(unknown, 404, "model")
        assert error["message"] == "The model `nope` does not exist. Valid aliases: tiny."

    run_with_gateway(check)


def test_forbidden_model_for_tenant() -> None:
    key, _, data = one_tenant_stack(models=["other"])

    async def check(client: httpx.AsyncClient, live: list[LiveEngine]) -> None:
        denied = await client.post(
            "/v1/chat/completions", json=chat(), headers={"authorization": f"Bearer {key}"}
        )
        assert_error(denied, 403, "model")
        allowed = await client.post("/v1/chat/completions", json=chat(max_tokens=2))
        assert allowed.status_code == 200  # the demo tenant may use every model

    run_with_gateway(check, data)


def test_malformed_bodies_name_the_param() -> None:
    async def check(client: httpx.AsyncClient, live: list[LiveEngine]) -> None:
        headers = {"content-type": "application/json"}
        bad_json = await client.post("/v1/chat/completions", content=b"{nope", headers=headers)
        assert_error(bad_json, 400, "body")
        bad_type = await client.post("/v1/chat/completions", json=chat(max_tokens="abc"))
        assert_error(bad_type, 400, "max_tokens")
        no_messages = await client.post("/v1/chat/completions", json={"model": "tiny"})
        assert_error(no_messages, 400, "messages")
        bad_role = await client.post(
            "/v1/chat/completions", json={"model": "tiny", "messages": [{"content": "x"}]}
        )
        assert_error(bad_role, 400, "messages.0.role")
        bad_prompt = await client.post("/v1/completions", json={"model": "tiny", "prompt": 3})
        assert_error(bad_prompt, 400, "prompt")
        text = await client.post(
            "/v1/completions", content=b"x", headers={"content-type": "text/plain"}
        )
        assert_error(text, 400)
        route = await client.get("/v1/nothing")
        assert_error(route, 404)
        method = await client.get("/v1/chat/completions")
        assert_error(method, 405)
        assert live[0].state.runner.num_in_flight == 0

    run_with_gateway(check)


def test_body_size_limit_413() -> None:
    data = stack_data(replicas=1, gateway={"max_body_bytes": 1000})

    async def check(client: httpx.AsyncClient, live: list[LiveEngine]) -> None:
        big = await client.post("/v1/chat/completions", json=chat("x" * 2000))
        assert_error(big, 413)
        small = await client.post("/v1/chat/completions", json=chat(max_tokens=1))
        assert small.status_code == 200

    run_with_gateway(check, data)


def test_long_prompt_gate_answers_before_any_engine() -> None:
    async def check(client: httpx.AsyncClient, live: list[LiveEngine]) -> None:
        before = live[0].state.core.stats.num_prompt_tokens
        too_long = await client.post(
            "/v1/completions", json={"model": "tiny", "prompt": "abcd" * 513}
        )
        error = assert_error(too_long, 400, "input_tokens")
        assert error["message"].startswith(
            "This model's maximum context length is 512 tokens. However, your prompt contains "
            "at least 513 input tokens"
        )
        over = await client.post(
            "/v1/completions", json={"model": "tiny", "prompt": "abcd" * 500, "max_tokens": 20}
        )
        assert_error(over, 400, "max_tokens")
        huge_tokens = await client.post(
            "/v1/completions", json={"model": "tiny", "prompt": "a", "max_tokens": 100000}
        )
        error = assert_error(huge_tokens, 400, "max_tokens")
        assert "cannot be greater than max_model_len=512" in error["message"]
        # A chat client's limit may come as max_completion_tokens (it wins over max_tokens, as
        # in vLLM): the refusal names the field that was sent, as the engine's own does.
        newer = await client.post(
            "/v1/chat/completions",
            json={"model": "tiny", "messages": [{"role": "user", "content": "a"}],
                  "max_completion_tokens": 100000, "max_tokens": 5},
        )  # fmt: skip
        error = assert_error(newer, 400, "max_completion_tokens")
        assert error["message"].startswith("max_completion_tokens=100000 cannot be greater")
        ids = await client.post("/v1/completions", json={"model": "tiny", "prompt": [5] * 600})
        assert_error(ids, 400, "input_tokens")
        assert live[0].state.core.stats.num_prompt_tokens == before
        fits = await client.post(
            "/v1/completions", json={"model": "tiny", "prompt": "abcd" * 500, "max_tokens": 12}
        )
        assert fits.status_code == 200, fits.text
        assert fits.json()["usage"]["prompt_tokens"] == 500

    run_with_gateway(check)


def test_tenant_prompt_cap() -> None:
    key, _, data = one_tenant_stack({"max_prompt_tokens": 10})

    async def check(client: httpx.AsyncClient, live: list[LiveEngine]) -> None:
        auth = {"authorization": f"Bearer {key}"}
        capped = await client.post("/v1/chat/completions", json=chat("y" * 200), headers=auth)
        error = assert_error(capped, 400, "input_tokens")
        assert "at most 10 prompt tokens" in error["message"]

    run_with_gateway(check, data)


def test_stream_usage_only_when_asked_and_metrics() -> None:
    async def main() -> None:
        async with engines(1) as live:
            urls = {"chat": [live[0].url]}
            async with gateway_for(stack_data(replicas=1), urls) as (gateway, client):
                await check(gateway, client)

    async def check(gateway: Gateway, client: httpx.AsyncClient) -> None:
        plain = await client.post("/v1/chat/completions", json=chat(max_tokens=4, stream=True))
        assert plain.status_code == 200
        assert '"usage"' not in plain.text
        assert plain.text.endswith("data: [DONE]\n\n")
        asked = await client.post(
            "/v1/chat/completions",
            json=chat(max_tokens=4, stream=True, stream_options={"include_usage": True}),
        )
        events = [e for e in asked.text.split("\n\n") if e]
        usage = json.loads(events[-2][6:])["usage"]
        assert usage["completion_tokens"] == 4
        text = gateway.metrics.render().decode()
        assert (
            'inhouse_gateway_tokens_total{kind="completion",model="tiny",tenant="demo"} 8.0' in text
        )
        assert 'inhouse_gateway_requests_total{code="200",model="tiny",pool="chat"' in text
        assert "inhouse_gateway_ttft_seconds_bucket" in text
        # ... served on the metrics port, not on the API port clients reach
        assert (await client.get("/metrics")).status_code == 404
        transport = httpx.ASGITransport(app=create_metrics_app(gateway))
        async with httpx.AsyncClient(transport=transport, base_url="http://metrics") as scraper:
            scraped = await scraper.get("/metrics")
            assert scraped.status_code == 200
            assert "inhouse_gateway_ttft_seconds_bucket" in scraped.text
            assert (await scraper.get("/health")).status_code == 200

    asyncio.run(main())


def test_health_openapi_and_request_id() -> None:
    async def check(client: httpx.AsyncClient, live: list[LiveEngine]) -> None:
        assert (await client.get("/health")).status_code == 200
        doc = (await client.get("/openapi.json")).json()
        assert "/v1/chat/completions" in doc["paths"]
        answer = await client.post(
            "/v1/chat/completions", json=chat(max_tokens=1), headers={"x-request-id": "abc-123"}
        )
        assert answer.headers["x-request-id"] == "abc-123"
        assert answer.headers["x-inhouse-pool"] == "chat"

    run_with_gateway(check)


def test_priority_from_tier_reaches_the_engine() -> None:
    key, _, data = one_tenant_stack(tier="batch")

    async def check(client: httpx.AsyncClient, live: list[LiveEngine]) -> None:
        seen: list[int] = []
        admit = live[0].state.admit

        def spy(*args: Any, **kwargs: Any) -> Any:
            seen.append(args[6])
            return admit(*args, **kwargs)

        live[0].state.admit = spy  # type: ignore[method-assign]
        auth = {"authorization": f"Bearer {key}"}
        await client.post(
            "/v1/chat/completions", json=chat(max_tokens=1, priority=-5), headers=auth
        )
        await client.post("/v1/chat/completions", json=chat(max_tokens=1))
        assert seen == [10, 0]  # batch tier's priority; a client cannot jump ahead

    run_with_gateway(check, data)


def test_key_used_in_header_is_not_logged(caplog: Any) -> None:
    async def check(client: httpx.AsyncClient, live: list[LiveEngine]) -> None:
        await client.post("/v1/chat/completions", json=chat("secret prompt", max_tokens=1))

    import logging

    data = stack_data(replicas=1, gateway={"log": {"requests": True}})
    with caplog.at_level(logging.INFO, logger="inhouse.gateway.access"):
        run_with_gateway(check, data)
    records = [r for r in caplog.records if r.name == "inhouse.gateway.access"]
    assert records and records[0].fields["tenant"] == "demo"  # type: ignore[attr-defined]
    text = " ".join(str(r.__dict__) for r in caplog.records)
    assert "secret prompt" not in text and KEY not in text
