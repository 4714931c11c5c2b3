"""Small probes of the live stack that drills read between faults: an engine's own gauges and
counters (its /metrics, summed over labels), when a URL's /health first answers 200 (as the
drill saw it), and when a simulated engine says its /health turned 200 (as it was)."""

from __future__ import annotations

import asyncio
import contextlib
import time

import httpx

from inhouse.bench.scrape import parse_counters


async def engine_value(url: str, name: str) -> float | None:
    """`name` summed over its series on the engine at `url`; None if it does not answer."""
    async with httpx.AsyncClient(timeout=2.0) as client:
        try:
            text = (await client.get(f"{url}/metrics")).text
        except httpx.HTTPError:
            return None
    return parse_counters(text, (name,)).get(name)


async def health_code(url: str) -> int:
    """The status of `url`/health, 0 when nothing answers."""
    async with httpx.AsyncClient(timeout=2.0) as client:
        try:
            return (await client.get(f"{url}/health")).status_code
        except httpx.HTTPError:
            return 0


async def wait_healthy(url: str, timeout_s: float, poll_s: float = 0.1) -> float | None:
    """The `perf_counter` time at which `url`/health first answered 200, or None."""
    deadline = time.perf_counter() + timeout_s
    async with httpx.AsyncClient(timeout=1.0) as client:
        while time.perf_counter() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"{url}/health")).status_code == 200:
                    return time.perf_counter()
            await asyncio.sleep(poll_s)
    return None


async def loaded_at(admin_url: str) -> float | None:
    """When the simulated engine behind `admin_url` (its fault port) turned /health 200, as a
    `perf_counter` time of this process; None if it does not say. The engine reports its own
    `time.monotonic()`, one clock for every process of the host: unlike `wait_healthy`'s
    answer, this is not late when this process's event loop is."""
    async with httpx.AsyncClient(timeout=5.0) as client:
        try:
            value = (await client.get(f"{admin_url}/loaded")).json().get("loaded_at_monotonic")
        except (httpx.HTTPError, ValueError):
            return None
    if not isinstance(value, int | float):
        return None
    return float(value) + (time.perf_counter() - time.monotonic())
