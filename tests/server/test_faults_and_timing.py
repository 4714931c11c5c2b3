"""Wall-clock behaviour of the engine loop: timings follow the step-time model, lag is reported
instead of hidden, and the admin port's faults act."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import pytest

from inhouse.engine import Request, build_replica
from inhouse.predict import run_closed_loop
from inhouse.server.inprocess import inprocess_engine
from inhouse.server.runner import Stream
from inhouse.server.state import EngineOptions


def test_one_stream_matches_the_closed_loop_prediction(
    make_options: Callable[..., EngineOptions],
) -> None:
    """E2E of one request against `predict` for the same shape (in process, no HTTP cost)."""
    options = make_options(max_model_len=2048)
    isl, osl = 512, 64
    predicted = run_closed_loop(build_replica(options.replica_spec()), isl, osl, 1, 1)
    expected_s = (predicted.mean_ttft_ms + predicted.mean_tpot_ms * (osl - 1)) / 1000

    async def body() -> tuple[float, int]:
        async with inprocess_engine(options) as engine:
            payload = {"prompt": list(range(1000, 1000 + isl)), "max_tokens": osl}
            start = time.monotonic()
            response = await engine.client.post("/v1/completions", json=payload)
            assert response.json()["usage"]["completion_tokens"] == osl
            return time.monotonic() - start, engine.state.runner.stretched_s

    measured_s, stretched_s = asyncio.run(body())
    if stretched_s:
        # A busy host held the loop longer than the catch-up window: timings stretched, and
        # the engine said so (the lag tests check the reporting); nothing to compare.
        assert measured_s > expected_s
        return
    assert measured_s == pytest.approx(expected_s, rel=0.05, abs=0.01)


def test_lag_is_reported_when_the_host_cannot_keep_pace(
    make_options: Callable[..., EngineOptions], caplog: pytest.LogCaptureFixture
) -> None:
    async def body(block_s: float) -> tuple[int, float, float, str]:
        async with inprocess_engine(make_options()) as engine:

            async def hog() -> None:
                for _ in range(3):
                    time.sleep(block_s)  # a blocked event loop: steps are delivered late
                    await asyncio.sleep(0.005)

            request = engine.client.post("/v1/completions", json={"prompt": "x", "max_tokens": 80})
            await asyncio.gather(request, hog())
            metrics = (await engine.client.get("/metrics")).text
            runner = engine.state.runner
            return runner.num_lagging_steps, runner.max_lag_s, runner.stretched_s, metrics

    with caplog.at_level(logging.WARNING, logger="inhouse.engine"):
        # Short holds: late steps, caught up within the window, nothing stretched.
        lagging, max_lag, stretched, metrics = asyncio.run(body(0.03))
        assert lagging >= 1 and max_lag >= 0.02 and stretched == 0.0
        assert "inhouse:engine_lagging_steps_total" in metrics
        assert any("cannot keep pace" in r.getMessage() for r in caplog.records)
        # Holds longer than the 0.2 s window: the lost time is given up and counted.
        lagging, max_lag, stretched, metrics = asyncio.run(body(0.3))
        assert stretched >= 0.25
        assert 'inhouse:engine_stretched_seconds_total{engine="0",model_name="tiny"}' in metrics


def test_no_lag_at_low_load(make_options: Callable[..., EngineOptions]) -> None:
    async def body() -> int:
        async with inprocess_engine(make_options()) as engine:
            await engine.client.post("/v1/completions", json={"prompt": "x", "max_tokens": 50})
            return engine.state.runner.num_lagging_steps

    # NOTE: a busy shared CI host may delay a step now and then; a steady lag would fail.
    assert asyncio.run(body()) <= 5


def test_slow_fault_stretches_steps(make_options: Callable[..., EngineOptions]) -> None:
    async def body() -> tuple[float, float]:
        async with inprocess_engine(make_options()) as engine:
            payload = {"prompt": "x", "max_tokens": 40}
            start = time.monotonic()
            await engine.client.post("/v1/completions", json=payload)
            normal = time.monotonic() - start
            reply = await engine.admin.post("/faults/slow", json={"factor": 3})
            assert reply.json()["slow_factor"] == 3
            start = time.monotonic()
            await engine.client.post("/v1/completions", json=payload)
            return normal, time.monotonic() - start

    normal, slow = asyncio.run(body())
    assert slow / normal == pytest.approx(3, rel=0.25)


def test_fail_fault_fails_the_next_n(make_options: Callable[..., EngineOptions]) -> None:
    async def body() -> list[int]:
        async with inprocess_engine(make_options()) as engine:
            await engine.admin.post("/faults/fail", json={"count": 2, "status": 500})
            codes = []
            for _ in range(3):
                reply = await engine.client.post("/v1/completions", json={"prompt": "x"})
                codes.append(reply.status_code)
            return codes

    assert asyncio.run(body()) == [500, 500, 200]


def test_hang_and_clear(make_options: Callable[..., EngineOptions]) -> None:
    async def body() -> tuple[bool, int]:
        async with inprocess_engine(make_options()) as engine:
            await engine.admin.post("/faults/hang", json={"scope": "engine"})
            pending = asyncio.ensure_future(
                engine.client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
            )
            await asyncio.sleep(0.3)
            stalled = not pending.done()
            await engine.admin.post("/faults/clear")
            return stalled, (await pending).status_code

    assert asyncio.run(body()) == (True, 200)


def test_hang_all_stalls_health_too(make_options: Callable[..., EngineOptions]) -> None:
    async def body() -> tuple[bool, int]:
        async with inprocess_engine(make_options()) as engine:
            await engine.admin.post("/faults/hang", json={"scope": "all"})
            probe = asyncio.ensure_future(engine.client.get("/health"))
            await asyncio.sleep(0.2)
            stalled = not probe.done()
            await engine.admin.post("/faults/clear")
            return stalled, (await probe).status_code

    assert asyncio.run(body()) == (True, 200)


def test_fill_kv_raises_usage_and_queues_requests(
    make_options: Callable[..., EngineOptions],
) -> None:
    async def body() -> tuple[float, bool, int]:
        async with inprocess_engine(make_options()) as engine:
            reply = await engine.admin.post("/faults/fill_kv", json={"fraction": 1.0})
            usage = reply.json()["kv_usage"]
            pending = asyncio.ensure_future(
                engine.client.post("/v1/completions", json={"prompt": "x" * 200, "max_tokens": 2})
            )
            await asyncio.sleep(0.2)
            stalled = not pending.done()
            await engine.admin.post("/faults/clear")
            return usage, stalled, (await pending).status_code

    usage, stalled, status = asyncio.run(body())
    assert usage == 1.0 and stalled and status == 200


def test_bad_fault_requests_are_400(make_options: Callable[..., EngineOptions]) -> None:
    async def body() -> list[int]:
        async with inprocess_engine(make_options()) as engine:
            admin = engine.admin
            return [
                (await admin.post("/faults/slow", json={"factor": 0})).status_code,
                (await admin.post("/faults/hang", json={"scope": "x"})).status_code,
                (await admin.post("/faults/nope")).status_code,
                (await admin.get("/faults")).status_code,
            ]

    assert asyncio.run(body()) == [400, 400, 404, 200]


def test_real_time_schedule_replays_exactly_in_virtual_time(
    make_options: Callable[..., EngineOptions],
) -> None:
    """The engine loop's token times are the core's: replaying the arrivals the server saw
    through a fresh core in virtual time gives the same first-token and finish times."""
    options = make_options(max_model_len=2048)

    async def body() -> tuple[list[Stream], float]:
        async with inprocess_engine(options) as engine:
            runner = engine.state.runner
            seen: list[Stream] = []
            submit = runner.submit

            def record(stream: Stream) -> str | None:
                seen.append(stream)
                return submit(stream)

            runner.submit = record  # type: ignore[method-assign]

            async def one(i: int) -> None:
                await asyncio.sleep(0.013 * i)  # staggered: joins running batches mid-decode
                prompt = list(range(100 * i, 100 * i + 200 + 37 * i))
                payload = {"prompt": prompt, "max_tokens": 20 + 3 * i}
                response = await engine.client.post("/v1/completions", json=payload)
                assert response.status_code == 200

            await asyncio.gather(*(one(i) for i in range(12)))
            return seen, runner.stretched_s

    streams, stretched_s = asyncio.run(body())
    if stretched_s:
        pytest.skip("the host stalled the loop past the catch-up window (reported as lag)")
    core = build_replica(options.replica_spec()).new_engine()
    replayed = {}
    for stream in streams:
        original = stream.request
        copy = Request(
            original.request_id,
            original.num_prompt_tokens,
            original.output_len,
            original.arrival_s,
            list(original.block_hashes),
            original.priority,
        )
        assert core.add_request(copy) is None
        replayed[copy.request_id] = copy
    now = min(s.arrival_s for s in streams)
    while core.has_unfinished:
        result = core.step(now, max_steps=1)
        if result is None:
            ready = core.next_ready_s()
            assert ready is not None
            now = ready
            continue
        now = result.end_s
    for stream in streams:
        twin = replayed[stream.request_id]
        assert stream.first_token_s == pytest.approx(twin.first_token_s, abs=1e-6)
        assert stream.finish_s == pytest.approx(twin.finish_s, abs=1e-6)
