"""The live run: workload → prompts → sender → outcomes, on the wall clock.

    source = make_source(spec, run)          # when each request goes
    driver = Driver(spec, source, builder, sender)
    outcome of each job → builder.record_answer (session history) → source.complete (next turns)

The driver hands jobs to the sender a little ahead of their time (`lookahead`), so the sender's
timer, not the driver's loop, decides when a request leaves. Ctrl-C (`interrupt`) stops
dispatch at once, aborts what is in flight and keeps everything already measured. With a
journal (`records.Journal`), each request's record goes to disk as it ends, flushed once a
second, so a `kill -9` or a crash keeps what was measured up to then.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inhouse.bench.config import BenchSpec, build_workload
from inhouse.bench.gauges import GaugeSampler
from inhouse.bench.metrics import Outcome, RequestResult
from inhouse.bench.progress import Progress
from inhouse.bench.prompts import PromptBuilder
from inhouse.bench.records import Journal
from inhouse.bench.request_func import Job, Target
from inhouse.bench.schedule import (
    INF,
    ClosedSource,
    RanDry,
    ScheduleSource,
    Source,
    TimedSource,
    vllm_arrival_offsets,
)
from inhouse.bench.scrape import ServerCounters, fetch_model, scrape_all
from inhouse.bench.sender import LocalSender, ProcessSender, describe_stack
from inhouse.workload import Workload, WorkloadRun, WorkRequest

START_MARGIN_S = 0.05
WAKE_INTERVAL_S = 0.25
INTERRUPTED = "cancelled (interrupted)"


@dataclass
class BenchRun:
    """Everything one run measured, before it is summarized."""

    spec: BenchSpec
    results: list[RequestResult]
    duration_s: float
    meta: dict[str, Any] = field(default_factory=dict)
    health: list[dict[str, Any]] = field(default_factory=list)
    server: dict[str, Any] | None = None
    interrupted: bool = False
    num_interrupted: int = 0
    requested_rate: float | None = None
    theoretical_hit_rate_all: float | None = None
    simulated: dict[str, Any] | None = None
    t0: float | None = None  # the origin of requests.jsonl's times (min t_sched when None)
    # Wall-clock (Unix) seconds from just before the engines' counters were first read to just
    # after the last read: what another run's window must not overlap for the server-side hit
    # rate to be this run's own (`inhouse report`).
    window_unix_s: tuple[float, float] | None = None


def make_source(spec: BenchSpec, run: WorkloadRun) -> tuple[Source, float | None]:
    """The source for the spec's arrival mode, and the request rate it asks for (if any)."""
    mode = spec.arrival_mode
    if mode == "schedule":
        assert spec.rate is not None
        n = spec.schedule_size()
        offsets = vllm_arrival_offsets(n, spec.rate, spec.burstiness, spec.seed)
        return ScheduleSource(run, offsets), spec.rate
    if mode == "closed":
        assert spec.concurrency is not None
        duration = spec.effective_duration_s
        return ClosedSource(run, spec.concurrency, spec.num_requests, duration or INF), None
    return TimedSource(run, spec.num_requests), None


def start_run(spec: BenchSpec, workload: Workload) -> WorkloadRun:
    duration = spec.effective_duration_s if spec.arrival_mode == "timed" else None
    return workload.start(
        block_size=spec.block_size,
        seed=spec.seed,
        duration_s=duration if duration is not None else INF,
        rate_scale=spec.rate_scale,
    )


class Driver:
    def __init__(
        self,
        spec: BenchSpec,
        source: Source,
        builder: PromptBuilder,
        sender: LocalSender | ProcessSender,
        progress: Progress | None = None,
        journal: Journal | None = None,
    ) -> None:
        self.spec = spec
        self.journal = journal
        self._num_journaled = 0
        self.source = source
        self.builder = builder
        self.sender = sender
        self.progress = progress
        self.lookahead_s = 0.05 if isinstance(sender, ProcessSender) else 0.01
        self.results: list[RequestResult] = []
        self.pending: dict[int, WorkRequest] = {}
        self.outbox: deque[Outcome] = deque()
        self.num_interrupted = 0
        self.num_sent = 0
        self.stopping = False
        self.interrupted = False
        self.is_finished = False  # every request has ended: an interrupt comes too late
        self.t0 = 0.0
        self.t_stop: float | None = None
        self._wake: asyncio.Event | None = None

    def on_outcome(self, outcome: Outcome) -> None:
        self.outbox.append(outcome)
        if self._wake is not None:
            self._wake.set()

    def interrupt(self) -> None:
        """Ctrl-C: stop sending, abort in-flight requests, keep what was measured. After the
        last request (the counters scraped, the reports written) there is nothing to stop."""
        if not self.stopping and not self.is_finished:
            self.stopping = self.interrupted = True
            self.t_stop = time.perf_counter()
            if self._wake is not None:
                self._wake.set()

    async def run(self) -> float:
        """Run to the end (or the interrupt); returns the duration in seconds."""
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self.t0 = time.perf_counter() + START_MARGIN_S
        if self.journal is not None:
            self.journal.t0 = self.t0  # the rows' times count from the run's start
        source = self.source
        while True:
            self._collect()
            now = time.perf_counter() - self.t0
            if self.stopping:
                break
            gated = self._dispatch(now)
            self._write_journal()
            next_s = source.next_time_s(time.perf_counter() - self.t0)
            if not self.pending and math.isinf(next_s) and not self.outbox:
                break
            timeout = WAKE_INTERVAL_S
            if not gated and not math.isinf(next_s):
                timeout = min(timeout, max(0.0, next_s - self.lookahead_s - now))
            if self.progress is not None:
                self.progress.update(self)
            if self.outbox:
                continue
            self._wake.clear()
            handle = loop.call_later(timeout, self._wake.set)
            await self._wake.wait()
            handle.cancel()
        await self.sender.stop(cancel=self.stopping)
        self._collect()
        self._write_journal()
        self.is_finished = True
        if self.progress is not None:
            self.progress.finish(self)
        ends = [r.outcome.t_done for r in self.results if r.outcome.t_done]
        end = self.t_stop if self.interrupted and self.t_stop else max(ends, default=self.t0)
        return max(end - self.t0, 0.0)

    def _dispatch(self, now: float) -> bool:
        """Hand over every job due within the lookahead; True if the concurrency gate shut."""
        spec = self.spec
        source = self.source
        cap = spec.max_concurrency
        while True:
            if cap is not None and len(self.pending) >= cap:
                self.sender.flush()
                return True
            if source.next_time_s(now) > now + self.lookahead_s:
                break
            try:
                request, at_s = source.pop(now)
            except RanDry:
                break
            payload = self.builder.payload(request)
            index = self.num_sent
            self.num_sent += 1
            self.pending[index] = request
            job = Job(
                index,
                self.t0 + at_s,
                payload.path,
                payload.body,
                payload.keep_text,
                spec.request_timeout_s,
                spec.trace_server_times,
            )
            self.sender.submit(job)
        self.sender.flush()
        return False

    def _collect(self) -> None:
        while self.outbox:
            outcome = self.outbox.popleft()
            request = self.pending.pop(outcome.index, None)
            if request is None:
                continue
            if outcome.error == INTERRUPTED:
                self.num_interrupted += 1
                continue
            finish_s = (outcome.t_done or time.perf_counter()) - self.t0
            ok = outcome.success
            self.builder.record_answer(request, outcome.text, ok)
            self.source.complete(request, finish_s, ok)
            outcome.text = None
            result = RequestResult(
                outcome,
                request.request_id,
                request.num_prompt_tokens,
                request.num_ideal_cached_tokens,
                request.output_len,
                request.session_key,
            )
            self.results.append(result)

    def _write_journal(self) -> None:
        """The records of the requests ended since the last call, to the journal: after the
        jobs they made due are dispatched (a closed loop's next turn waits on no JSON)."""
        journal = self.journal
        if journal is None:
            return
        for result in self.results[self._num_journaled :]:
            journal.add(result)
        self._num_journaled = len(self.results)
        journal.tick()


async def run_live(
    spec: BenchSpec,
    progress: Progress | None = None,
    on_driver: Any = None,
    out_dir: Path | None = None,
) -> BenchRun:
    """One benchmark against `spec.target`. `on_driver(driver)` is called once it exists (the
    CLI hooks Ctrl-C there). With `out_dir`, each request's record is appended to its
    `requests.jsonl.partial` as the request ends (`records.Journal`)."""
    assert spec.target is not None, "a live run needs a target"
    target = Target.parse(spec.target, spec.api_key)
    model = spec.model or await fetch_model(target)
    workload = build_workload(spec)
    run = start_run(spec, workload)
    source, requested_rate = make_source(spec, run)
    arrivals = getattr(workload, "arrivals", None)
    if requested_rate is None and arrivals is not None and spec.arrival_mode == "timed":
        requested_rate = arrivals.rate_per_s * spec.rate_scale  # the workload's own process
    salt = spec.prompt_salt if spec.prompt_salt is not None else random.getrandbits(63)
    builder = PromptBuilder(
        salt=salt,
        block_size=spec.block_size,
        endpoint=spec.endpoint,
        model=model,
        ignore_eos=spec.ignore_eos,
        continuous_usage=spec.continuous_usage,
        stream=spec.stream,
    )
    metrics_urls = spec.metrics_urls or (f"{target.base_url}/metrics",)
    window_start = time.time()
    before = await scrape_all(metrics_urls)
    driver_box: list[Driver] = []

    def on_outcome(outcome: Outcome) -> None:
        driver_box[0].on_outcome(outcome)

    prewarm = _prewarm_size(spec)
    sender: LocalSender | ProcessSender
    if spec.kernel_timestamps:
        from inhouse.http1.kernel_ts import check_available

        check_available()
    if spec.workers > 1:
        sender = ProcessSender(target, on_outcome, spec.workers, prewarm, spec.kernel_timestamps)
    else:
        sender = LocalSender(target, on_outcome, prewarm, kernel_timestamps=spec.kernel_timestamps)
    journal = Journal.open(out_dir, (spec.api_key,)) if out_dir is not None else None
    driver = Driver(spec, source, builder, sender, progress, journal)
    driver_box.append(driver)
    if on_driver is not None:
        on_driver(driver)
    try:
        await sender.start()
        gauges = GaugeSampler(metrics_urls)
        gauges.start()
        try:
            duration_s = await driver.run()
        finally:
            await gauges.stop()
    finally:
        if journal is not None:
            journal.close()  # what it holds is on disk, whatever happened
    after = await scrape_all(metrics_urls)
    window = (window_start, time.time())
    meta = {
        "model_id": model,
        "target": target.base_url,
        "prompt_salt": salt,
        "arrival_mode": spec.arrival_mode,
        "workload_name": getattr(workload, "name", spec.workload),
        "client": {
            **describe_stack(),
            "timestamps": "kernel" if spec.kernel_timestamps else "user",
        },
        "num_history_misses": builder.num_history_misses,
        "num_sent": driver.num_sent,
    }
    theoretical = getattr(run, "theoretical_hit_rate", None)
    return BenchRun(
        spec,
        driver.results,
        duration_s,
        meta,
        sender.health(),
        {**ServerCounters.delta(before, after), "gauges": gauges.summary()},
        driver.interrupted,
        driver.num_interrupted,
        requested_rate,
        theoretical,
        t0=driver.t0,
        window_unix_s=window,
    )


def _prewarm_size(spec: BenchSpec) -> int:
    """Connections to open ahead: enough for the expected concurrency, within reason."""
    if spec.max_concurrency is not None:
        return min(spec.max_concurrency, 256)
    if spec.concurrency is not None:
        return min(spec.concurrency, 256)
    if spec.rate is not None and not math.isinf(spec.rate):
        return int(min(max(8, spec.rate * 0.25), 256))
    return 32
