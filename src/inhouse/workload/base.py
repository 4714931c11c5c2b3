"""Workloads as data, runs as generators the fleet drives.

A *workload* is a frozen dataclass of parameters (what a planner or a stack file can state). Its
`start(...)` returns a *run*: a seeded generator of `WorkRequest`s in arrival order. Arrivals of
closed-loop and multi-turn workloads depend on completions, so the run is driven, not iterated:

    while run.next_arrival_s() <= now: request = run.pop_arrival(); ...
    run.on_complete(request, finish_s)   # may schedule later arrivals

Every request says what an infinite prefix cache would have hit for it
(`num_ideal_cached_tokens`, in arrival order), so measured hit rates can be judged against the
workload's theoretical best.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

INF = math.inf


@dataclass(frozen=True, slots=True)
class WorkRequest:
    """One request of a workload.

    `block_hashes`: chained hashes (`inhouse.hashing`) of the prompt's full blocks, followed,
    for multi-turn sessions, by those of the output blocks the next turn re-sends (the engine
    caches output blocks whose hashes it knows). `num_prompt_blocks` says where the prompt's
    end. `num_ideal_cached_tokens`: the prompt tokens an infinite cache would hold when this
    request arrives (full blocks only, one prompt token always left to compute, as the engine).
    """

    request_id: str
    arrival_s: float
    num_prompt_tokens: int
    output_len: int
    block_hashes: list[int]
    num_prompt_blocks: int
    num_ideal_cached_tokens: int = 0
    session_key: str | None = None
    model: str | None = None
    priority: int = 0

    @property
    def prompt_hashes(self) -> list[int]:
        return self.block_hashes[: self.num_prompt_blocks]


class WorkloadRun(Protocol):
    """A running workload. Times are seconds of virtual time from 0."""

    @property
    def reaction_delay_s(self) -> float:
        """A lower bound on the delay between a completion and any arrival it causes (`inf`
        for open-loop workloads): the simulator's lookahead."""
        ...

    def next_arrival_s(self) -> float:
        """When the next known request arrives; `inf` if none is known now."""
        ...

    def pop_arrival(self) -> WorkRequest:
        """The next request, in arrival order."""
        ...

    def on_complete(self, request: WorkRequest, finish_s: float, ok: bool = True) -> None:
        """A request finished (or failed, `ok=False`) at `finish_s`."""
        ...


class Workload(Protocol):
    """Parameters of a workload; `start` makes a fresh, seeded run."""

    @property
    def name(self) -> str: ...

    def start(
        self, *, block_size: int, seed: int, duration_s: float, rate_scale: float = 1.0
    ) -> WorkloadRun: ...


def ideal_cached_tokens(num_prompt_tokens: int, num_known_blocks: int, block_size: int) -> int:
    """Tokens an infinite cache holding the first `num_known_blocks` blocks would serve."""
    usable = min(num_known_blocks, (num_prompt_tokens - 1) // block_size)
    return max(usable, 0) * block_size


Builder = Callable[[str, float], WorkRequest]


class ScheduledRun:
    """Base of the runs: a heap of future arrivals, each built only when it arrives.

    Subclasses push `(time, builder)`; `builder(request_id, arrival_s)` runs at pop time, in
    arrival order, so anything that depends on what arrived before (the ideal cache) is exact.
    Arrivals at or after `end_s` are dropped.
    """

    reaction_delay_s: float = INF

    def __init__(self, name: str, end_s: float) -> None:
        self.name = name
        self.end_s = end_s
        self._heap: list[tuple[float, int, Builder]] = []
        self._seq = itertools.count()
        self._num_emitted = 0
        self.num_prompt_tokens = 0
        self.num_ideal_cached_tokens = 0

    def schedule(self, at_s: float, builder: Builder) -> None:
        if at_s < self.end_s:
            heapq.heappush(self._heap, (at_s, next(self._seq), builder))

    def next_arrival_s(self) -> float:
        return self._heap[0][0] if self._heap else INF

    def pop_arrival(self) -> WorkRequest:
        at_s, _, builder = heapq.heappop(self._heap)
        request = builder(f"{self.name}-{self._num_emitted}", at_s)
        self._num_emitted += 1
        self.num_prompt_tokens += request.num_prompt_tokens
        self.num_ideal_cached_tokens += request.num_ideal_cached_tokens
        return request

    def on_complete(self, request: WorkRequest, finish_s: float, ok: bool = True) -> None:
        return None

    @property
    def num_emitted(self) -> int:
        return self._num_emitted

    @property
    def theoretical_hit_rate(self) -> float:
        """Token-weighted best prefix-cache hit rate over the requests emitted so far."""
        if not self.num_prompt_tokens:
            return 0.0
        return self.num_ideal_cached_tokens / self.num_prompt_tokens
