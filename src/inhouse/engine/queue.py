"""Waiting queues: first-come-first-served, or by priority (lower value first, as vLLM)."""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterator

from inhouse.engine.request import Request


class FcfsQueue:
    """Arrival order; a preempted request goes back to the front."""

    def __init__(self) -> None:
        self._items: deque[Request] = deque()

    def add(self, request: Request) -> None:
        self._items.append(request)

    def prepend(self, request: Request) -> None:
        self._items.appendleft(request)

    def peek(self) -> Request:
        return self._items[0]

    def pop(self) -> Request:
        return self._items.popleft()

    def remove(self, request: Request) -> bool:
        try:
            self._items.remove(request)
        except ValueError:
            return False
        return True

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Request]:
        return iter(self._items)


class PriorityQueue:
    """Ordered by `(priority, arrival_s)`; a preempted request keeps its place by that key."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, Request]] = []
        self._seq = itertools.count()

    def add(self, request: Request) -> None:
        heapq.heappush(self._heap, (request.priority, request.arrival_s, next(self._seq), request))

    prepend = add

    def peek(self) -> Request:
        return self._heap[0][3]

    def pop(self) -> Request:
        return heapq.heappop(self._heap)[3]

    def remove(self, request: Request) -> bool:
        for i, item in enumerate(self._heap):
            if item[3] is request:
                self._heap[i] = self._heap[-1]
                self._heap.pop()
                heapq.heapify(self._heap)
                return True
        return False

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[Request]:
        return (item[3] for item in sorted(self._heap))


def make_queue(policy: str) -> FcfsQueue | PriorityQueue:
    if policy == "fcfs":
        return FcfsQueue()
    if policy == "priority":
        return PriorityQueue()
    raise ValueError(f"unknown scheduling policy {policy!r}; use 'fcfs' or 'priority'")
