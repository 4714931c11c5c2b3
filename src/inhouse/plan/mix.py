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
from dataclasses import dataclass

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
        # The part whose arrival is next and its time, or None once a pop or a completion may
        # have changed that (a part's next arrival changes only on those two calls).
        self._next: tuple[float, int] | None = None

    @property
    def reaction_delay_s(self) -> float:
        return min(run.reaction_delay_s for _, run in self.runs)

    def _earliest(self) -> tuple[float, int]:
        if self._next is None:
            best_s, best = math.inf, 0
            for index, (_, run) in enumerate(self.runs):
                at_s = run.next_arrival_s()
                if at_s < best_s:  # NOTE: the first part wins a tie, as `min` picks it
                    best_s, best = at_s, index
            self._next = (best_s, best)
        return self._next

    def next_arrival_s(self) -> float:
        return self._earliest()[0]

    def pop_arrival(self) -> WorkRequest:
        name, run = self.runs[self._earliest()[1]]
        self._next = None
        request = run.pop_arrival()
        # NOTE: `dataclasses.replace`, spelled out (it looks the fields up on every call).
        renamed = WorkRequest(
            f"{name}{SEPARATOR}{request.request_id}",
            request.arrival_s,
            request.num_prompt_tokens,
            request.output_len,
            request.block_hashes,
            request.num_prompt_blocks,
            request.num_ideal_cached_tokens,
            request.session_key,
            request.model,
            self.priorities.get(name, request.priority),
        )
        self._origin[renamed.request_id] = (run, request)
        return renamed

    def on_complete(self, request: WorkRequest, finish_s: float, ok: bool = True) -> None:
        run, original = self._origin.pop(request.request_id)
        self._next = None
        run.on_complete(original, finish_s, ok)


def workload_of(request_id: str) -> str:
    """The part a mixed request id belongs to."""
    return request_id.split(SEPARATOR, 1)[0]
