"""`eager.start_eagerly`: the coroutine's first step runs at once, as the task it becomes, and
the rest of it behaves as any task's (result, exception, cancellation, context)."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any

import pytest

from inhouse.http1.eager import start_eagerly

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
