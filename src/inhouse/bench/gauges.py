"""Server gauges sampled during a run: KV-cache use and the running and waiting queues.

Counters need only a scrape before and one after (`scrape.py`); a gauge has to be watched. Every
`interval_s` each metrics URL is scraped and, per gauge, the largest series (the busiest replica
when one URL serves several) is kept as that engine's sample. `result.json` -> `server_gauges`
gets, per gauge, the statistics over all samples of all engines: `samples`, `mean`, `p50`,
`p95`, `max` (KV use as a fraction, 0..1). vLLM's names: `vllm:kv_cache_usage_perc` (before
0.10 `vllm:gpu_cache_usage_perc`), `vllm:num_requests_running`, `vllm:num_requests_waiting`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np

from inhouse.bench.scrape import samples

GAUGES = {
    "kv_cache_usage_perc": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "num_requests_running": ("vllm:num_requests_running",),
    "num_requests_waiting": ("vllm:num_requests_waiting",),
}
TIMEOUT_S = 2.0


def parse_gauges(text: str) -> dict[str, float]:
    """The largest sample of each gauge in one exposition (labels ignored)."""
    wanted = {name: key for key, names in GAUGES.items() for name in names}
    out: dict[str, float] = {}
    for name, value in samples(text):
        key = wanted.get(name)
        if key is not None:
            out[key] = max(value, out.get(key, value))
    return out


class GaugeSampler:
    """Scrapes `urls` every `interval_s` until stopped; `summary()` gives the statistics."""

    def __init__(self, urls: Sequence[str], interval_s: float = 1.0) -> None:
        self.urls = tuple(urls)
        self.interval_s = interval_s
        self.samples: dict[str, list[float]] = {key: [] for key in GAUGES}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
            while True:
                for url in self.urls:
                    await self._sample(client, url)
                await asyncio.sleep(self.interval_s)

    async def _sample(self, client: httpx.AsyncClient, url: str) -> None:
        try:
            response = await client.get(url)
        except httpx.HTTPError:
            return
        if response.status_code != 200:
            return
        for key, value in parse_gauges(response.text).items():
            self.samples[key].append(value)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"interval_s": self.interval_s, "urls": list(self.urls)}
        for key, values in self.samples.items():
            if not values:
                out[key] = None
                continue
            arr = np.asarray(values)
            out[key] = {
                "samples": len(values),
                "mean": float(arr.mean()),
                "p50": float(np.percentile(arr, 50)),
                "p95": float(np.percentile(arr, 95)),
                "max": float(arr.max()),
            }
        return out
