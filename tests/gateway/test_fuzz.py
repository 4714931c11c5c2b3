"""Hostile input: hypothesis-generated bodies and headers never get a 5xx, and every
rejection carries OpenAI's error shape."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.gateway.conftest import KEY, engines, gateway_for, stack_data

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
fields = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from(["tiny", "nope", ""]) | json_values,
        "messages": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "role": st.sampled_from(["user", "system"]) | json_values,
                    "content": st.text(max_size=60) | json_values,
                },
            ),
            max_size=3,
        )
        | json_values,
        "prompt": st.text(max_size=60) | st.lists(st.integers(-5, 10**6), max_size=5) | json_values,
        "max_tokens": st.integers(-3, 600) | json_values,
        "max_completion_tokens": st.integers(-3, 600) | json_values,
        "stream": st.booleans() | json_values,
        "stream_options": st.fixed_dictionaries({}, optional={"include_usage": json_values})
        | json_values,
        "priority": json_values,
        "temperature": json_values,
        "n": st.integers(-1, 3),
        "user": json_values,
    },
)
bodies = fields.map(lambda d: json.dumps(d).encode()) | st.binary(max_size=80)
headers = st.fixed_dictionaries(
    {},
    optional={
        "authorization": st.sampled_from([f"Bearer {KEY}", "Bearer x", "Basic abc", "", "Bearer"]),
        "content-type": st.sampled_from(
            ["application/json", "text/plain", "", "application/json; x"]
        ),
        "x-session-id": st.text(
            alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=20
        ),
    },
)


def test_fuzz_bodies_and_headers_never_5xx() -> None:
    async def main() -> None:
        async with engines(1) as live:
            data = stack_data(replicas=1, gateway={"max_body_bytes": 4096})
            async with gateway_for(data, {"chat": [live[0].url]}) as (_, client):
                cases: list[tuple[str, bytes, dict[str, str]]] = []

                @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
                @given(
                    st.sampled_from(["/v1/chat/completions", "/v1/completions"]), bodies, headers
                )
                def collect(path: str, body: bytes, head: dict[str, str]) -> None:
                    cases.append((path, body, head))

                collect()
                for path, body, head in cases:
                    head = {"authorization": "", **head}
                    r = await client.post(path, content=body, headers=head)
                    assert r.status_code < 500, (path, body, head, r.text)
                    if r.status_code >= 400:
                        check_error_shape(r.json(), r.status_code)

    asyncio.run(main())


def check_error_shape(body: Any, status: int) -> None:
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and isinstance(error["type"], str)
    assert error["param"] is None or isinstance(error["param"], str)
    assert error["code"] == status
