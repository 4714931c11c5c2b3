"""The fault-injection port refuses values that would wedge the engine or fail its API with a
traceback, and leaves the switches as they were."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from inhouse.server.inprocess import inprocess_engine
from inhouse.server.state import EngineOptions

STATUS = "status must be a standard HTTP error status (4xx or 5xx), got {}"
BAD = [
    ("slow", b'{"factor": NaN}', "factor must be a finite number above 0, got nan"),
    ("slow", b'{"factor": Infinity}', "factor must be a finite number above 0, got inf"),
    ("fail", b'{"count": 1, "status": 99}', STATUS.format(99)),
    ("fail", b'{"count": 1, "status": 200}', STATUS.format(200)),
    ("fail", b'{"count": 1, "status": 599}', STATUS.format(599)),
    ("fail", b'{"count": 1, "status": "x"}', STATUS.format("'x'")),
    ("fail", b'{"count": 1, "status": 500.0}', STATUS.format("500.0")),
    ("fail", b'{"count": -3}', "count must be a whole number of requests, 0 or more, got -3"),
    ("fail", b'{"count": 1.5}', "count must be a whole number of requests, 0 or more, got 1.5"),
    ("fail", b'{"count": true}', "count must be a whole number of requests, 0 or more, got True"),
    ("exit", b'{"code": 256}', "code must be a process exit status, 0 to 255, got 256"),
    ("exit", b'{"code": -9}', "code must be a process exit status, 0 to 255, got -9"),
]


def test_bad_fault_values_are_refused_and_change_nothing(
    make_options: Callable[..., EngineOptions],
) -> None:
    async def run() -> tuple[list[httpx.Response], dict[str, object], int]:
        async with inprocess_engine(make_options()) as engine:
            replies = [await engine.admin.post(f"/faults/{n}", content=b) for n, b, _ in BAD]
            faults = (await engine.admin.get("/faults")).json()
            answer = await engine.client.post(
                "/v1/completions", json={"model": "tiny", "prompt": "x", "max_tokens": 1}
            )
            return replies, faults, answer.status_code

    replies, faults, status = asyncio.run(run())
    assert [(r.status_code, r.json()) for r in replies] == [(400, {"error": m}) for *_, m in BAD]
    assert faults == {
        "slow_factor": 1.0,
        "fail_next": 0,
        "fail_status": 500,
        "hang": None,
        "kv_usage": 0.0,
    }
    assert status == 200
