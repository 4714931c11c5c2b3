"""GPU slots for LoRA adapters, as vLLM keeps them (`--max-loras`).

At most `max_loras` distinct adapters run in one batch. An adapter stays in its slot after its
last request leaves, so a later request finds it loaded; a request for an adapter not in a slot
takes the least recently used idle slot, and its adapter is loaded (copied from host memory) by
the step that schedules it. The scheduler asks `can_run` before admitting a request and defers
it (vLLM's scheduler skips it that step) when its adapter would be one too many.
"""

from __future__ import annotations

from collections import OrderedDict


class LoraSlots:
    def __init__(self, max_loras: int) -> None:
        assert max_loras > 0, "max_loras must be positive"
        self.max_loras = max_loras
        self._resident: OrderedDict[str, None] = OrderedDict()  # least recently used first
        self._running: dict[str, int] = {}  # adapter -> running requests using it
        self.num_loads = 0

    def can_run(self, adapter: str) -> bool:
        return adapter in self._running or len(self._running) < self.max_loras

    def acquire(self, adapter: str) -> bool:
        """A request of `adapter` starts running; True if its adapter had to be loaded."""
        assert self.can_run(adapter), "acquire only what can_run allows"
        self._running[adapter] = self._running.get(adapter, 0) + 1
        if adapter in self._resident:
            self._resident.move_to_end(adapter)
            return False
        if len(self._resident) >= self.max_loras:
            idle = next(a for a in self._resident if a not in self._running)
            del self._resident[idle]
        self._resident[adapter] = None
        self.num_loads += 1
        return True

    def release(self, adapter: str) -> None:
        """A request of `adapter` left the running set (finished, aborted or preempted)."""
        count = self._running[adapter] - 1
        if count:
            self._running[adapter] = count
        else:
            del self._running[adapter]
            self._resident.move_to_end(adapter)

    @property
    def resident(self) -> tuple[str, ...]:
        return tuple(self._resident)
