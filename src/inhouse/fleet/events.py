"""The discrete-event kernel's one ordering key: `(time_s, priority, seq)`.

Events pop by time; at equal times by the kind's priority — a step's end (its completions)
before arrivals, arrivals before engine steps start, so a request arriving at the instant a
replica frees up is routed with that replica's finished requests already counted out, and a
step starting at that instant already sees it; at equal time and priority, in push order (`seq`),
which makes every run deterministic. Nothing else in the simulator orders events.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from typing import Generic, TypeVar

T = TypeVar("T")


class EventKind(enum.IntEnum):
    """Kinds of events; the value is the priority at equal times (lower first)."""

    STEP_END = 0
    ARRIVAL = 1
    STEP = 2


EventKey = tuple[float, int, int]


class EventQueue(Generic[T]):
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, EventKind, T]] = []
        self._seq = itertools.count()

    def push(self, time_s: float, kind: EventKind, payload: T) -> EventKey:
        seq = next(self._seq)
        heapq.heappush(self._heap, (time_s, int(kind), seq, kind, payload))
        return (time_s, int(kind), seq)

    def pop(self) -> tuple[float, EventKind, T]:
        time_s, _, _, kind, payload = heapq.heappop(self._heap)
        return time_s, kind, payload

    def peek_time_s(self) -> float:
        return self._heap[0][0] if self._heap else float("inf")

    def __len__(self) -> int:
        return len(self._heap)

    def __bool__(self) -> bool:
        return bool(self._heap)
