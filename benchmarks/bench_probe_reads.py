"""What each health probe asks an engine: `/health` against `/v1/models`, per request.

    python benchmarks/bench_probe_reads.py URL [--requests 300]

The gateway reads a replica's `max_model_len` from `/v1/models` at every probe that finds it up
(a restart between two probes changes it without a failure to notice), so each probe is two
GETs where it was one. This times each path as the probe client asks it (httpx, one keep-alive
connection, sequential), twice in turn, on the engine at URL (a vLLM started by `inhouse up`,
or `inhouse engine` for the simulated one).
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx

PATHS = ("/health", "/v1/models", "/health", "/v1/models")


async def measure(url: str, num_requests: int) -> None:
    async with httpx.AsyncClient(timeout=5) as client:
        for path in PATHS:
            response = await client.get(url + path)
            t0 = time.perf_counter()
            for _ in range(num_requests):
                response = await client.get(url + path)
            per_ms = 1000 * (time.perf_counter() - t0) / num_requests
            print(f"{path:12s} {per_ms:.3f} ms a request, {len(response.content)} bytes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", help="the engine's base URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    asyncio.run(measure(args.url.rstrip("/"), args.requests))


if __name__ == "__main__":
    main()
