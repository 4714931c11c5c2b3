"""`eager.start_eagerly`: the coroutine's first step runs at once, as the task it becomes, and
the rest of it behaves as any task's (result, exception, cancellation, context)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import time
import uuid
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import httpx
import pytest
from tests.gateway.conftest import KEY, chat, engines, free_port, stack_data
from tests.gateway.test_direct import served
from tests.gateway.test_failures import wait_for
from tests.gateway.test_limits import REDIS_URL, needs_redis

from inhouse.gateway import direct
from inhouse.gateway.eager import start_eagerly
from inhouse.gateway.keys import create_key
from inhouse.gateway.serve import _Server, uvicorn_config
from inhouse.gateway.service import Gateway
from inhouse.gateway.upstream import UpstreamPool
from inhouse.spec.gateway import parse_gateway
from inhouse.spec.stack import parse_stack

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


def in_callback(fn: object) -> asyncio.Future[object]:
    """Run `fn()` from a plain loop callback (as a protocol's `data_received` runs), not in a
    task; its return value is the future's result."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[object] = loop.create_future()

    def run() -> None:
        try:
            done.set_result(fn())  # type: ignore[operator]
        except BaseException as exc:
            done.set_exception(exc)

    loop.call_soon(run)
    return done


def test_the_first_step_runs_before_start_returns_and_the_rest_in_the_task() -> None:
    steps: list[str] = []

    async def handler(gate: asyncio.Future[None]) -> str:
        steps.append("first")
        await gate
        steps.append("rest")
        return "done"

    async def main() -> None:
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[None] = loop.create_future()

        def start() -> asyncio.Task[str]:
            task = start_eagerly(loop, handler(gate))
            assert steps == ["first"]  # already run, in the caller's turn
            return task

        task = await in_callback(start)
        assert isinstance(task, asyncio.Task)
        await asyncio.sleep(0)
        assert steps == ["first"] and not task.done()
        gate.set_result(None)
        assert await task == "done"
        assert steps == ["first", "rest"]

    asyncio.run(main())


@pytest.mark.parametrize("cancel", [False, True])
def test_a_coroutine_that_never_waits_ends_its_task_with_its_result_or_error(cancel: bool) -> None:
    """Even when the task is cancelled before its first turn: a task that ended before a cancel
    keeps its outcome (its error would be lost behind a CancelledError otherwise)."""

    async def ok() -> int:
        return 7

    async def bad() -> int:
        raise ValueError("broken")

    async def main() -> None:
        loop = asyncio.get_running_loop()

        def start(coro: Coroutine[Any, Any, int]) -> asyncio.Task[int]:
            task = start_eagerly(loop, coro)
            if cancel:
                task.cancel()
            return task

        task = await in_callback(lambda: start(ok()))
        assert await task == 7  # type: ignore[misc]
        task = await in_callback(lambda: start(bad()))
        with pytest.raises(ValueError, match="broken"):
            await task  # type: ignore[misc]

    asyncio.run(main())


def test_the_eager_part_runs_as_the_task_itself() -> None:
    """`current_task()` is the task, so `asyncio.timeout` (which redis-py's client uses) works
    in the eager part and cancels the right task."""
    seen: list[object] = []

    async def handler() -> str:
        seen.append(asyncio.current_task())
        try:
            async with asyncio.timeout(0.05):
                await asyncio.sleep(10)
        except TimeoutError:
            return "timed out"
        return "slept"

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = await in_callback(lambda: start_eagerly(loop, handler()))
        assert seen == [task]
        assert await task == "timed out"  # type: ignore[misc]
        assert asyncio.current_task() is not task  # the test's own task again

    asyncio.run(main())


def test_a_cancel_before_the_tasks_first_turn_reaches_the_coroutine() -> None:
    cleaned: list[str] = []

    async def handler(gate: asyncio.Future[None]) -> None:
        try:
            await gate
        finally:
            cleaned.append("finally")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[None] = loop.create_future()

        def start() -> asyncio.Task[None]:
            task = start_eagerly(loop, handler(gate))
            task.cancel()  # before the task's first turn of the loop
            return task

        task = await in_callback(start)
        with pytest.raises(asyncio.CancelledError):
            await task  # type: ignore[misc]
        assert cleaned == ["finally"]

    asyncio.run(main())


def test_a_cancel_before_the_first_turn_cancels_what_the_coroutine_waited_on() -> None:
    """As `Task.cancel` cancels the future a task waits on: a semaphore waited on in the eager
    part and cancelled before the task's first turn keeps no permit."""

    async def handler(semaphore: asyncio.Semaphore) -> None:
        async with semaphore:
            await asyncio.sleep(10)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        semaphore = asyncio.Semaphore(1)
        await semaphore.acquire()  # held: the handler waits in acquire()

        def start() -> asyncio.Task[None]:
            task = start_eagerly(loop, handler(semaphore))
            task.cancel()
            return task

        task = await in_callback(start)
        with pytest.raises(asyncio.CancelledError):
            await task  # type: ignore[misc]
        semaphore.release()
        await asyncio.wait_for(semaphore.acquire(), 1)  # the permit was not lost to it
        assert semaphore.locked()

    asyncio.run(main())


def test_the_eager_part_sets_context_variables_in_the_tasks_context_not_the_callers() -> None:
    async def handler(gate: asyncio.Future[None]) -> str:
        VAR.set("request")
        await gate
        return VAR.get()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[None] = loop.create_future()

        def start() -> tuple[asyncio.Task[str], str]:
            task = start_eagerly(loop, handler(gate))
            return task, VAR.get()  # the callback's own context

        started = await in_callback(start)
        assert isinstance(started, tuple)
        task, outside = started
        assert outside == "unset"
        gate.set_result(None)
        assert await task == "request"

    asyncio.run(main())


def test_inside_a_task_the_coroutine_starts_the_ordinary_way() -> None:
    steps: list[str] = []

    async def handler() -> None:
        steps.append("ran")

    async def main() -> None:
        task = start_eagerly(asyncio.get_running_loop(), handler())
        assert steps == []  # not run yet: the caller's task is current
        await task
        assert steps == ["ran"]

    asyncio.run(main())


# -- as the gateway's server uses it (`direct.GatewayProtocol`) ----------------------------


def _raw_post(path: str, body: bytes, extra: bytes = b"") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {KEY}\r\ncontent-length: {len(body)}\r\n".encode()
        + extra
        + b"\r\n"
        + body
    )


async def _raw_connection(
    client: httpx.AsyncClient,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A plain socket to the server `client` talks to (for what httpx will not send)."""
    port = int(str(client.base_url).rsplit(":", 1)[1].rstrip("/"))
    return await asyncio.open_connection("127.0.0.1", port)


async def _read_responses(
    reader: asyncio.StreamReader, count: int
) -> list[tuple[int, dict[str, str], bytes]]:
    """`count` whole HTTP/1.1 responses with a content-length (no chunked bodies here)."""
    out = []
    while len(out) < count:
        line = await asyncio.wait_for(reader.readline(), 30)
        if line.startswith(b"HTTP/1.1 100"):
            await reader.readline()
            continue
        status = int(line.split()[1])
        headers: dict[str, str] = {}
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers["content-length"]))
        out.append((status, headers, body))
    return out


def test_a_generation_request_reaches_the_engine_from_the_callback_that_read_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No turn of the loop between reading a request and writing it to the engine: the write
    happens inside the client connection's `data_received`."""
    inside: list[bool] = []
    reading = [False]
    received = direct.GatewayProtocol.data_received

    def data_received(self: direct.GatewayProtocol, data: bytes) -> None:
        reading[0] = True
        try:
            received(self, data)
        finally:
            reading[0] = False

    request = UpstreamPool.request

    def traced(self: UpstreamPool, *args: object, **kwargs: object) -> object:
        inside.append(reading[0])
        return request(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(direct.GatewayProtocol, "data_received", data_received)
    monkeypatch.setattr(UpstreamPool, "request", traced)
    data = stack_data(replicas=1)

    async def main() -> None:
        async with engines(1) as live, served(data, [live[0].url]) as (_, client):
            for stream in (False, True):
                r = await client.post("/v1/chat/completions", json=chat(stream=stream))
                assert r.status_code == 200
            r = await client.post("/v1/completions", json={"model": "tiny", "prompt": "hi"})
            assert r.status_code == 200

    asyncio.run(main())
    assert inside == [True, True, True]


def test_requests_the_eager_start_does_not_wait_for_are_answered() -> None:
    """A body past uvicorn's read buffer (started as it arrives), `Expect: 100-continue` (the
    client waits for the 100 before its body), and two requests pipelined in one write."""
    data = stack_data(replicas=1)
    small = json.dumps(chat("hello", max_tokens=4)).encode()

    async def main() -> None:
        async with engines(1) as live, served(data, [live[0].url]) as (_, client):
            reader, writer = await _raw_connection(client)
            try:
                # 1. 200 KB of body: counted, refused by the long-prompt gate, never hung.
                big = json.dumps(chat("word " * 40_000, max_tokens=4)).encode()
                writer.write(_raw_post("/v1/chat/completions", big))
                [(status, _, body)] = await _read_responses(reader, 1)
                assert status == 400 and json.loads(body)["error"]["param"] == "input_tokens"
                # 2. Expect: 100-continue: the head alone first, the body after the 100.
                raw = _raw_post("/v1/chat/completions", small, b"expect: 100-continue\r\n")
                head, _, body_part = raw.partition(b"\r\n\r\n")
                writer.write(head + b"\r\n\r\n")
                assert (await asyncio.wait_for(reader.readline(), 30)).startswith(b"HTTP/1.1 100")
                await reader.readline()
                writer.write(body_part)
                [(status, _, body)] = await _read_responses(reader, 1)
                assert status == 200 and json.loads(body)["choices"]
                # 3. Two requests in one write, answered in order.
                writer.write(_raw_post("/v1/chat/completions", small) * 2)
                answers = await _read_responses(reader, 2)
                assert [status for status, _, _ in answers] == [200, 200]
                ids = [h["x-request-id"] for _, h, _ in answers]
                assert len(set(ids)) == 2
            finally:
                writer.close()

    asyncio.run(main())


@needs_redis
def test_limits_shared_in_redis_work_from_the_eager_start() -> None:
    """redis-py's client needs a current task (`asyncio.timeout`): the eager part runs as the
    request's task, so reserving in Redis from it works, and the limit holds."""
    from inhouse.gateway.redis_limits import RedisLimits

    tenant = f"eager-{uuid.uuid4().hex[:6]}"
    key, entry = create_key()
    tenants = [{"name": tenant, "keys": [entry], "limits": {"rpm": 2}}]
    data = stack_data(replicas=1, gateway={"tenants": tenants})
    auth = {"authorization": f"Bearer {key}"}

    async def main() -> None:
        limits = RedisLimits(REDIS_URL)
        await limits.reset(tenant)
        try:
            async with engines(1) as live, served(data, [live[0].url], limits) as (_, client):
                codes = []
                for _ in range(3):
                    body = chat(max_tokens=4, stream=True)
                    r = await client.post("/v1/chat/completions", json=body, headers=auth)
                    codes.append(r.status_code)
                assert codes == [200, 200, 429]
        finally:
            await limits.reset(tenant)
            await limits.close()

    asyncio.run(main())


@contextlib.asynccontextmanager
async def _served_with_keep_alive(data: dict, url: str, keep_alive_s: float) -> AsyncIterator[int]:
    stack = parse_stack(data)
    gateway = Gateway(stack, parse_gateway(stack.gateway), {"chat": [url]}, KEY)
    await gateway.start()
    port = free_port()
    config = uvicorn_config(gateway, "127.0.0.1", port)
    config.timeout_keep_alive = keep_alive_s  # type: ignore[assignment]
    server = _Server(config)
    task = asyncio.create_task(server.serve())
    await wait_for(lambda: server.started)
    try:
        yield port
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        await gateway.stop()


def test_a_request_pipelined_behind_an_answer_given_at_once_is_not_cut_by_keep_alive() -> None:
    """A 401 is answered inside the read that brought it, which arms uvicorn's keep-alive
    timer; the stream pipelined behind it in the same read must outlive that timer."""
    data = stack_data(replicas=1)
    body = json.dumps(chat("tell me", max_tokens=60, ignore_eos=True, stream=True)).encode()
    refused = _raw_post("/v1/chat/completions", body).replace(KEY.encode(), b"wrong-key")

    async def main() -> bytes:
        async with (
            engines(1, time_scale=1.0) as live,
            _served_with_keep_alive(data, live[0].url, 0.3) as port,
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            started = time.perf_counter()
            writer.write(refused + _raw_post("/v1/chat/completions", body))
            received = b""
            while b"data: [DONE]" not in received:
                chunk = await asyncio.wait_for(reader.read(65536), 30)
                if not chunk:
                    break  # closed: cut off
                received += chunk
            assert time.perf_counter() - started > 0.3, "too fast to test the timer"
            writer.close()
            return received

    received = asyncio.run(main())
    assert received.startswith(b"HTTP/1.1 401")
    assert b"HTTP/1.1 200" in received and b"data: [DONE]" in received


def test_nothing_pipelined_behind_a_closing_answer_reaches_an_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """uvicorn's 500 for a handler that failed closes the connection; when it went out inside
    the read, a request pipelined behind it is dropped (as uvicorn drops it), not served."""
    from inhouse.gateway.proxy import GenerationRoute

    handle = GenerationRoute.__call__
    calls = [0]

    async def failing_once(
        self: GenerationRoute, scope: dict, receive: object, send: object
    ) -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("a bug in the handler")
        await handle(self, scope, receive, send)  # type: ignore[arg-type]

    sent: list[int] = []
    request = UpstreamPool.request

    def counted(self: UpstreamPool, *args: object, **kwargs: object) -> object:
        sent.append(1)
        return request(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(GenerationRoute, "__call__", failing_once)
    monkeypatch.setattr(UpstreamPool, "request", counted)
    data = stack_data(replicas=1)
    body = json.dumps(chat("hello", max_tokens=4)).encode()

    async def main() -> bytes:
        async with engines(1) as live, served(data, [live[0].url]) as (_, client):
            reader, writer = await _raw_connection(client)
            writer.write(_raw_post("/v1/chat/completions", body) * 2)
            received = await asyncio.wait_for(reader.read(), 30)  # until the server closes
            writer.close()
            await asyncio.sleep(0.2)
            return received

    received = asyncio.run(main())
    assert received.startswith(b"HTTP/1.1 500")
    assert received.count(b"HTTP/1.1") == 1
    assert sent == [] and calls[0] == 1
