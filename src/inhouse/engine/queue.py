"""Waiting queues: first-come-first-served, or by priority (lower value first, as vLLM)."""

from __future__ import annotations

import heapq
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


def priority_order(request: Request) -> tuple[int, float, int]:
    """The priority policy's key: lower `priority` first, then earlier `arrival_s`, then the
    order requests reached the scheduler (`arrival_seq`). vLLM breaks the last ties by request
    id, so a request that leaves the waiting queue and comes back (deferred for its LoRA
    adapter, preempted) keeps its place among equals, and so do requests here.

    NOTE: not the request id itself: ours are strings whose order is not the order requests
    came in ("r10" sorts before "r2" in `predict`; the server's are random), while `arrival_seq`
    gives equals exactly the order a push counter gave them before anyone was requeued (a
    requeue used to draw a new number, so a request went behind every equal still waiting)."""
    seq = request.arrival_seq
    assert seq is not None, f"{request!r} never reached the scheduler (`Scheduler.add`)"
    return request.priority, request.arrival_s, seq


class PriorityQueue:
    """Ordered by `priority_order`; a request put back (preempted, deferred) keeps its place."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, Request]] = []

    def add(self, request: Request) -> None:
        heapq.heappush(self._heap, (*priority_order(request), request))

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
