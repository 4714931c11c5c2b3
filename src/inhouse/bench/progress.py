"""A one-line progress bar on stderr (only when it is a terminal, or when asked)."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

BAR_WIDTH = 24
MIN_INTERVAL_S = 0.25


class Progress:
    def __init__(
        self,
        total_requests: int | None,
        duration_s: float | None,
        stream: TextIO | None = None,
    ) -> None:
        self.total_requests = total_requests
        self.duration_s = duration_s
        self.stream = stream or sys.stderr
        self._last = 0.0
        self._start = time.perf_counter()

    def update(self, driver: Any, force: bool = False) -> None:
        now = time.perf_counter()
        if not force and now - self._last < MIN_INTERVAL_S:
            return
        self._last = now
        elapsed = max(now - driver.t0, 0.0)
        done = len(driver.results)
        failed = sum(1 for r in driver.results if not r.success)
        fraction = self._fraction(done, elapsed)
        filled = int(BAR_WIDTH * fraction)
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        rate = done / elapsed if elapsed > 0 else 0.0
        line = (
            f"\r[{bar}] {100 * fraction:5.1f}% {elapsed:6.1f}s  done {done}  failed {failed}  "
            f"in flight {len(driver.pending)}  {rate:.1f} req/s "
        )
        self.stream.write(line)
        self.stream.flush()

    def _fraction(self, done: int, elapsed: float) -> float:
        parts = []
        if self.total_requests:
            parts.append(done / self.total_requests)
        if self.duration_s:
            parts.append(elapsed / self.duration_s)
        return min(max(parts, default=0.0), 1.0)

    def finish(self, driver: Any) -> None:
        self.update(driver, force=True)
        self.stream.write("\n")
        self.stream.flush()
