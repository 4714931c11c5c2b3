"""An engine loop that fails is reported as vLLM reports a dead engine: /health 503, new and
in-flight requests an error, never a request that waits forever behind a 200 /health."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from inhouse.engine import StepResult
from inhouse.server.inprocess import inprocess_engine
from inhouse.server.state import EngineOptions

DEAD = {
    "message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
    "type": "InternalServerError",
    "param": None,
    "code": 500,
}


def test_a_failed_engine_loop_answers_every_request_and_fails_health(
    make_options: Callable[..., EngineOptions],
) -> None:
    async def run() -> dict[str, Any]:
        async with inprocess_engine(make_options()) as engine:
            client, state = engine.client, engine.state

            def broken(now_s: float, max_steps: int = 1) -> StepResult | None:
                raise RuntimeError("a bug in the engine core")

            state.runner.set_hang(True)  # both requests are in flight before the failure
            body = {"model": "tiny", "prompt": "x", "max_tokens": 5}
            sent = asyncio.gather(
                client.post("/v1/completions", json=body),
                client.post("/v1/completions", json={**body, "stream": True}),
            )
            while state.runner.num_in_flight < 2:
                await asyncio.sleep(0.01)
            state.core.step = broken  # type: ignore[method-assign]
            state.runner.set_hang(False)
            in_flight, streamed = await asyncio.wait_for(sent, timeout=10)
            return {
                "in_flight": (in_flight.status_code, in_flight.json()),
                "streamed": streamed.text,
                "health": (await client.get("/health")).status_code,
                "new": (await client.post("/v1/completions", json=body)).json(),
                "metrics": (await client.get("/metrics")).text,
            }

    seen = asyncio.run(run())
    assert seen["in_flight"] == (500, {"error": DEAD})
    error_event = json.dumps({"error": DEAD}, separators=(",", ":"))
    assert seen["streamed"] == f"data: {error_event}\n\ndata: [DONE]\n\n"
    assert seen["health"] == 503
    assert seen["new"] == {"error": DEAD}
    reason = 'vllm:request_success_total{engine="0",finished_reason="error",model_name="tiny"}'
    assert f"{reason} 2.0" in seen["metrics"]
