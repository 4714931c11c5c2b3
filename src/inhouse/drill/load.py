"""Load for drills, from `inhouse bench`'s own machinery, and what clients saw of it.

`Load` runs one `run_live` benchmark as a task beside the drill's faults and keeps every
request's outcome; `samples` turns them into the timeline's `Sample`s, with times relative to
the drill's clock (`time.perf_counter()`, the bench client's clock). A request failed
`before-stream` when no token reached the client (the gateway should have retried it),
`mid-stream` when it had tokens and then an error event or a broken connection, `rejected-4xx`
when the gateway refused it (limits, validation).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from inhouse.bench.config import BenchSpec
from inhouse.bench.driver import BenchRun, Driver, run_live
from inhouse.bench.metrics import RequestResult
from inhouse.bench.schedule import INF, RanDry, Source
from inhouse.drill.evidence import DrillResult, Sample
from inhouse.workload import WorkRequest

BEFORE, MID, REJECTED = "before-stream", "mid-stream", "rejected-4xx"


def classify(result: RequestResult) -> str:
    """'' for a request that streamed to its end, else how it failed."""
    o = result.outcome
    broken = o.error.startswith("error event") or (o.num_chunks > 0 and not o.success)
    if o.num_chunks > 0:
        return MID if broken else ""
    if 400 <= o.status < 500:
        return REJECTED
    return BEFORE


class _StoppableSource:
    """The run's own source until `stop()`; then no more requests (in-flight ones finish)."""

    def __init__(self, inner: Source) -> None:
        self.inner = inner
        self.stopped = False

    def next_time_s(self, now_s: float) -> float:
        return INF if self.stopped else self.inner.next_time_s(now_s)

    def pop(self, now_s: float) -> tuple[WorkRequest, float]:
        if self.stopped:
            raise RanDry
        return self.inner.pop(now_s)

    def complete(self, request: WorkRequest, finish_s: float, ok: bool) -> None:
        self.inner.complete(request, finish_s, ok)

    @property
    def is_exhausted(self) -> bool:
        return self.stopped or self.inner.is_exhausted


class Load:
    """One benchmark run against the drill's gateway, started now, collected at `finish`."""

    def __init__(
        self,
        target: str,
        api_key: str,
        workload: str,
        params: Mapping[str, Any],
        duration_s: float,
        *,
        model: str,
        rate: float | None = None,
        seed: int = 0,
        request_timeout_s: float = 120.0,
        metrics_urls: tuple[str, ...] = (),
    ) -> None:
        self.spec = BenchSpec(
            workload=workload,
            target=target,
            api_key=api_key,
            workload_params={k: str(v) for k, v in params.items()},
            rate=rate,
            duration_s=duration_s,
            model=model,
            seed=seed,
            request_timeout_s=request_timeout_s,
            metrics_urls=metrics_urls,
        )
        self.driver: Driver | None = None
        self.task: asyncio.Task[BenchRun] | None = None
        self.run: BenchRun | None = None
        self.source: _StoppableSource | None = None

    def start(self) -> Load:
        def keep(driver: Driver) -> None:
            self.driver = driver
            self.source = driver.source = _StoppableSource(driver.source)

        self.task = asyncio.get_running_loop().create_task(run_live(self.spec, on_driver=keep))
        return self

    @property
    def results(self) -> list[RequestResult]:
        if self.run is not None:
            return self.run.results
        return list(self.driver.results) if self.driver is not None else []

    def stop_sending(self) -> None:
        """No new requests from now; those in flight run to their end."""
        if self.source is not None:
            self.source.stopped = True

    async def finish(self, timeout_s: float = 180.0) -> list[RequestResult]:
        """Wait for the run to end (the arrivals stop at its duration, in-flight requests run
        to their end); interrupt it if it has not ended after `timeout_s`."""
        assert self.task is not None, "start() first"
        self.stop_sending()
        try:
            self.run = await asyncio.wait_for(asyncio.shield(self.task), timeout_s)
        except TimeoutError:
            if self.driver is not None:
                self.driver.interrupt()
            self.run = await self.task
        return self.run.results

    async def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            if self.driver is not None:
                self.driver.interrupt()
            with contextlib.suppress(Exception):
                self.run = await asyncio.wait_for(self.task, 30)


def samples(results: Iterable[RequestResult], t0: float) -> list[Sample]:
    out = []
    for r in results:
        o = r.outcome
        ttft = o.ttft_s if o.num_chunks > 0 else None
        end = round(o.t_done - t0, 4) if o.t_done else None
        out.append(Sample(round(o.t_send - t0, 4), ttft, classify(r), o.status, end))
    return sorted(out, key=lambda s: s.t_s)


def p95_ttft_ms(results: Iterable[RequestResult], start: float, end: float) -> float | None:
    """p95 TTFT of the requests sent in [start, end) (perf_counter times) that streamed."""
    values = [
        r.outcome.ttft_s * 1000.0
        for r in results
        if start <= r.outcome.t_send < end and r.outcome.num_chunks > 0
    ]
    return float(np.percentile(values, 95)) if values else None


def cut_at(results: Iterable[RequestResult], t: float) -> list[RequestResult]:
    """The requests in flight at `t` (sent before, done after) that failed or were cut."""
    return [
        r
        for r in results
        if r.outcome.t_send < t < (r.outcome.t_done or 0)
        and (r.outcome.error or not r.outcome.success)
    ]


def count(results: Iterable[RequestResult], kind: str, start: float = 0.0) -> int:
    return sum(1 for r in results if r.outcome.t_send >= start and classify(r) == kind)


def check_clients(res: DrillResult, results: list[RequestResult], name: str, expected: str) -> bool:
    """The check that clients were unaffected: no request failed, before its first token or
    mid-stream, and none was refused (4xx); and there were requests (a load the gateway refused
    outright, or one cut mid-stream, passed as "0 failed" when only the first kind counted)."""
    failed = count(results, BEFORE) + count(results, MID)
    refused = count(results, REJECTED)
    return res.check(
        name,
        expected,
        f"{failed} failed, {refused} refused (4xx) of {len(results)}",
        failed == 0 and refused == 0 and bool(results),
    )
