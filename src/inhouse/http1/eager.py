"""Start a coroutine as a task whose first steps run now, in the caller's turn of the loop.

`loop.create_task` runs a coroutine's first step on a later turn of the loop, after every I/O
callback already due in this one: under load the gateway's request handler waited there behind
other streams' chunks before it could even read its body. `start_eagerly` runs the coroutine at
once, up to its first real wait (for the gateway's generation routes: the engine's response
head, after the request was written to the engine), and hands the rest to a task, so the
request reaches the engine from the very callback that read it. This is Python 3.12's
`eager_start` task, for 3.11.

The task exists before the first step and is the current task while the step runs, so
`asyncio.current_task()`, `asyncio.timeout()`, anyio's cancel scopes and a `task.cancel()`
during the eager part all behave as they would inside the task; the step runs in the task's
own context (its `contextvars`), not the caller's.

NOTE: `asyncio.tasks._enter_task` and `_leave_task` are private, kept on purpose: the minimum
Python is 3.11 (pyproject's `requires-python`, and the interpreter CI and the images run), and
3.11 has no public way to make a task current for a step run outside the loop's scheduling.
The public ways start at 3.12 (`asyncio.eager_task_factory`, loop-wide: every task of the
process would start eagerly, not just request handlers) and 3.14 (`asyncio.Task(...,
eager_start=True)`, per task: what replaces `start_eagerly` once 3.14 is the minimum). Both
make the task current around its first step, as these two functions (stable since 3.7) do
here. Where a task is already current (a caller inside a task), the coroutine starts the
ordinary way.
"""

from __future__ import annotations

import asyncio
import contextvars
from asyncio.tasks import _enter_task, _leave_task
from collections.abc import Coroutine, Generator
from typing import Any


class _Rest(Coroutine[Any, Any, Any]):
    """The task's coroutine: its first step waits on what the eager part yielded (or ends with
    its result); every later step goes straight to the wrapped coroutine."""

    __slots__ = ("_coro", "_error", "_is_done", "_is_first", "_pending", "_result")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self._is_first = True
        self._is_done = False
        self._pending: Any = None
        self._result: Any = None
        self._error: BaseException | None = None

    def send(self, value: Any) -> Any:
        if self._is_first or self._is_done:
            self._is_first = False
            if self._is_done:
                if self._error is not None:
                    raise self._error
                raise StopIteration(self._result)
            return self._pending
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        if self._is_first:
            self._is_first = False
            if self._is_done:  # a cancel that came too late: the coroutine is over, as it ended
                return self.send(None)
            # What `Task.cancel` does to the future a task waits on, which this task never got
            # to see: code that awaited it tells "cancelled" from "granted, then cancelled" by
            # it (asyncio.Semaphore.acquire would otherwise keep a permit).
            pending = self._pending
            if isinstance(pending, asyncio.Future) and not pending.done():
                pending.cancel()
        if val is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)  # pragma: no cover - the task throws one value

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, Any]:  # pragma: no cover - a task's coroutine
        raise TypeError("the rest of an eagerly started coroutine is a task's, not awaitable")


def start_eagerly(
    loop: asyncio.AbstractEventLoop,
    coro: Coroutine[Any, Any, Any],
    context: contextvars.Context | None = None,
) -> asyncio.Task[Any]:
    """A task running `coro`, its first step already taken (see the module's docstring)."""
    context = context if context is not None else contextvars.copy_context()
    if asyncio.current_task(loop) is not None:
        return loop.create_task(coro, context=context)
    rest = _Rest(coro)
    task: asyncio.Task[Any] = loop.create_task(rest, context=context)
    _enter_task(loop, task)
    try:
        rest._pending = context.run(coro.send, None)
    except StopIteration as stop:
        rest._is_done = True
        rest._result = stop.value
    except BaseException as exc:  # the task ends with it, as if raised in its first step
        rest._is_done = True
        rest._error = exc
    finally:
        _leave_task(loop, task)
    return task
