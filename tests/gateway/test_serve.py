"""`serve.collect_garbage`: with the collector's automatic runs off, cycles are still freed,
when enough objects pile up or after a while, and not before."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import weakref
from collections.abc import Iterator

from inhouse.gateway.serve import collect_garbage


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    """A reference cycle nobody holds: only the collector frees it."""
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@contextlib.contextmanager
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_cycles_are_freed_once_objects_pile_up_and_not_before() -> None:
    async def main() -> tuple[bool, bool]:
        task = asyncio.create_task(collect_garbage(0.01, 50_000, 3600.0))
        try:
            ref = _cycle()
            await asyncio.sleep(0.05)
            kept = ref() is not None  # few new objects: no run yet
            piled = [[] for _ in range(60_000)]  # noqa: F841 - objects that outlive allocation
            await asyncio.sleep(0.05)
            return kept, ref() is None
        finally:
            task.cancel()

    with collector_off():
        kept, freed = asyncio.run(main())
    assert kept and freed


def test_cycles_are_freed_after_a_while_even_with_few_new_objects() -> None:
    async def main() -> bool:
        task = asyncio.create_task(collect_garbage(0.01, 10**9, 0.05))
        try:
            ref = _cycle()
            await asyncio.sleep(0.2)
            return ref() is None
        finally:
            task.cancel()

    with collector_off():
        assert asyncio.run(main())
