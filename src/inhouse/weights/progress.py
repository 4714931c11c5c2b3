"""A one-line progress bar for pulls, on stderr when it is a terminal (or when asked)."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

BAR_WIDTH = 24
MIN_INTERVAL_S = 0.25


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / 2**30:.2f}"


class PullProgress:
    """`start(total, have)` once, `add(n)` from any worker thread, `finish()` at the end."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self._lock = threading.Lock()
        self._total = 0
        self._have = 0
        self._fetched = 0
        self._start = time.monotonic()
        self._last = 0.0

    def start(self, total_bytes: int, have_bytes: int) -> None:
        with self._lock:
            self._total, self._have = total_bytes, have_bytes
            self._start = time.monotonic()
        if have_bytes:
            self.stream.write(f"resuming: {_gib(have_bytes)} GiB already here\n")
        self._draw(force=True)

    def add(self, num_bytes: int) -> None:
        with self._lock:
            self._fetched += num_bytes
        self._draw()

    def finish(self) -> None:
        self._draw(force=True)
        self.stream.write("\n")
        self.stream.flush()

    def _draw(self, force: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            if not force and now - self._last < MIN_INTERVAL_S:
                return
            self._last = now
            done = self._have + self._fetched
            fraction = done / self._total if self._total else 1.0
            elapsed = max(now - self._start, 1e-9)
            rate = self._fetched / elapsed
            left_s = (self._total - done) / rate if rate > 0 else float("inf")
        filled = int(BAR_WIDTH * min(fraction, 1.0))
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        eta = f"{left_s:5.0f}s left" if left_s != float("inf") else "   ?s left"
        self.stream.write(
            f"\r[{bar}] {100 * fraction:5.1f}% {_gib(done)}/{_gib(self._total)} GiB "
            f"{rate / 1e6:7.1f} MB/s {eta} "
        )
        self.stream.flush()
