"""When each request is sent: the three ways a benchmark turns a workload into arrivals.

* `TimedSource`: the workload's own arrival times (its Poisson/gamma process, trace timestamps,
  or agent sessions whose next turn comes a think time after the last one finished).
* `ScheduleSource`: `vllm bench serve`'s schedule for `--rate R --burstiness B`: N gaps drawn
  from Gamma(shape=B, scale=1/(R·B)) with numpy's legacy RNG seeded by `--seed` (what
  `np.random.seed(seed)` then `np.random.gamma` gives), summed, then rescaled so the last arrival
  is at N/R. The workload supplies the content, in order.
* `ClosedSource`: `--concurrency C` over a workload without sessions: C requests always in
  flight; a completion lets the next one go at once.

Times are seconds from the start of dispatch. Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

from inhouse.workload import WorkloadRun, WorkRequest

INF = math.inf


class RanDry(Exception):
    """The workload has no more requests to give."""


def vllm_arrival_offsets(
    num_requests: int, rate_per_s: float, burstiness: float = 1.0, seed: int = 0
) -> list[float]:
    """Arrival offsets exactly as vLLM's `get_request` computes them (no ramp-up)."""
    assert num_requests > 0, "need at least one request"
    assert burstiness > 0, "burstiness must be positive"
    if math.isinf(rate_per_s):
        return [0.0] * num_requests
    assert rate_per_s > 0, "rate must be positive"
    rng = np.random.RandomState(seed)
    delays: list[float] = []
    for _ in range(num_requests):
        if math.isinf(burstiness):
            delays.append(1.0 / rate_per_s)
        else:
            theta = 1.0 / (rate_per_s * burstiness)
            delays.append(float(rng.gamma(shape=burstiness, scale=theta)))
    for i in range(1, num_requests):
        delays[i] += delays[i - 1]
    if delays[-1] != 0:
        factor = (num_requests / rate_per_s) / delays[-1]
        delays = [d * factor for d in delays]
    return delays


class Source(Protocol):
    def next_time_s(self, now_s: float) -> float:
        """When the next request should go (may be in the past); `inf` if none is known."""
        ...

    def pop(self, now_s: float) -> tuple[WorkRequest, float]:
        """The next request and its scheduled time."""
        ...

    def complete(self, request: WorkRequest, finish_s: float, ok: bool) -> None: ...

    @property
    def is_exhausted(self) -> bool:
        """No request will ever come again, whatever completes."""
        ...


def pull_content(run: WorkloadRun) -> WorkRequest | None:
    """The run's next request regardless of its time, for sources that set their own times.
    It is completed at once, so closed-loop generators (`fixed`) keep producing."""
    if math.isinf(run.next_arrival_s()):
        return None
    request = run.pop_arrival()
    run.on_complete(request, request.arrival_s, True)
    return request


class TimedSource:
    def __init__(self, run: WorkloadRun, max_requests: int | None = None) -> None:
        self.run = run
        self.max_requests = max_requests
        self.num_popped = 0
        self.num_in_flight = 0

    def next_time_s(self, now_s: float) -> float:
        if self.max_requests is not None and self.num_popped >= self.max_requests:
            return INF
        return self.run.next_arrival_s()

    def pop(self, now_s: float) -> tuple[WorkRequest, float]:
        request = self.run.pop_arrival()
        self.num_popped += 1
        self.num_in_flight += 1
        return request, request.arrival_s

    def complete(self, request: WorkRequest, finish_s: float, ok: bool) -> None:
        self.num_in_flight -= 1
        self.run.on_complete(request, finish_s, ok)

    @property
    def is_exhausted(self) -> bool:
        if self.max_requests is not None and self.num_popped >= self.max_requests:
            return True
        return math.isinf(self.run.next_arrival_s()) and self.num_in_flight == 0


class ScheduleSource:
    def __init__(self, run: WorkloadRun, offsets_s: list[float]) -> None:
        self.run = run
        self.offsets_s = offsets_s
        self.num_popped = 0
        self._ran_dry = False

    def next_time_s(self, now_s: float) -> float:
        if self._ran_dry or self.num_popped >= len(self.offsets_s):
            return INF
        return self.offsets_s[self.num_popped]

    def pop(self, now_s: float) -> tuple[WorkRequest, float]:
        request = pull_content(self.run)
        if request is None:
            self._ran_dry = True
            raise RanDry
        at_s = self.offsets_s[self.num_popped]
        self.num_popped += 1
        return request, at_s

    def complete(self, request: WorkRequest, finish_s: float, ok: bool) -> None:
        return None

    @property
    def is_exhausted(self) -> bool:
        return self._ran_dry or self.num_popped >= len(self.offsets_s)


class ClosedSource:
    def __init__(
        self,
        run: WorkloadRun,
        concurrency: int,
        max_requests: int | None = None,
        duration_s: float = INF,
    ) -> None:
        assert concurrency > 0, "concurrency must be positive"
        self.run = run
        self.concurrency = concurrency
        self.max_requests = max_requests
        self.duration_s = duration_s
        self.num_popped = 0
        self.num_in_flight = 0
        self._ran_dry = False

    def _can_start(self, now_s: float) -> bool:
        if self._ran_dry or now_s >= self.duration_s:
            return False
        return self.max_requests is None or self.num_popped < self.max_requests

    def next_time_s(self, now_s: float) -> float:
        if self.num_in_flight < self.concurrency and self._can_start(now_s):
            return now_s
        return INF

    def pop(self, now_s: float) -> tuple[WorkRequest, float]:
        request = pull_content(self.run)
        if request is None:
            self._ran_dry = True
            raise RanDry
        self.num_popped += 1
        self.num_in_flight += 1
        return request, now_s

    def complete(self, request: WorkRequest, finish_s: float, ok: bool) -> None:
        self.num_in_flight -= 1

    @property
    def is_exhausted(self) -> bool:
        if self._ran_dry:
            return True
        return self.max_requests is not None and self.num_popped >= self.max_requests
