"""Several workloads as one: the fleet simulator takes one workload, a plan serves several.

`MixedWorkload` starts every part with its own seed stream and merges their arrivals in time
order. Request ids are prefixed with the part's name (`chat/agent-12`), so records can be told
apart afterwards and two parts of the same kind never collide. Completions go back to the part
that issued the request. `priorities` gives a part's requests vLLM's `priority` (lower first; a
workload's tier), 0 by default.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from inhouse.workload.base import Workload, WorkloadRun, WorkRequest

SEPARATOR = "/"


@dataclass(frozen=True, slots=True)
class MixedWorkload:
    parts: tuple[tuple[str, Workload], ...]
    priorities: tuple[tuple[str, int], ...] = ()

    @property
    def name(self) -> str:
        return "+".join(name for name, _ in self.parts)

    def start(
        self, *, block_size: int, seed: int, duration_s: float, rate_scale: float = 1.0
    ) -> MixedRun:
        runs = [
            (
                name,
                workload.start(
                    block_size=block_size,
                    seed=seed * 1000 + index,
                    duration_s=duration_s,
                    rate_scale=rate_scale,
                ),
            )
            for index, (name, workload) in enumerate(self.parts)
        ]
        return MixedRun(runs, dict(self.priorities))


class MixedRun:
    def __init__(
        self, runs: Sequence[tuple[str, WorkloadRun]], priorities: dict[str, int] | None = None
    ) -> None:
        assert runs, "a mix needs at least one workload"
        self.runs = list(runs)
        self.priorities = priorities or {}
        self._origin: dict[str, tuple[WorkloadRun, WorkRequest]] = {}

    @property
    def reaction_delay_s(self) -> float:
        return min(run.reaction_delay_s for _, run in self.runs)

    def next_arrival_s(self) -> float:
        return min((run.next_arrival_s() for _, run in self.runs), default=math.inf)

    def pop_arrival(self) -> WorkRequest:
        name, run = min(self.runs, key=lambda item: item[1].next_arrival_s())
        request = run.pop_arrival()
        renamed = replace(
            request,
            request_id=f"{name}{SEPARATOR}{request.request_id}",
            priority=self.priorities.get(name, request.priority),
        )
        self._origin[renamed.request_id] = (run, request)
        return renamed

    def on_complete(self, request: WorkRequest, finish_s: float, ok: bool = True) -> None:
        run, original = self._origin.pop(request.request_id)
        run.on_complete(original, finish_s, ok)


def workload_of(request_id: str) -> str:
    """The part a mixed request id belongs to."""
    return request_id.split(SEPARATOR, 1)[0]
