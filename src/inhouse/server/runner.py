"""The wall-clock engine loop: steps the pure `EngineCore` in real time and feeds the streams.

    start = previous step's end (or now, when idle); result = core.step(start, max_steps=1)
    sleep until start + step time; hand each emitted token to its stream; repeat

Time is `time.monotonic()` in seconds; the core sees it as its clock. Steps chain end to start,
so the asyncio wake-up jitter (a millisecond or so) does not stretch timings, and a step that
is delivered late (the process was descheduled, or a burst of work held the loop) is caught up:
the next steps run back to back until the loop is on the simulated clock again, so a request's
mean TPOT keeps the model's value. Only when the loop falls more than `catchup_window_s` behind
does it give up the lost time and restart from now: those timings are stretched.

Both are reported, never hidden: every step's lateness (`inhouse:engine_step_lag_seconds`,
`inhouse:engine_clock_lag_seconds`), steps later than `lag_tolerance_s`
(`inhouse:engine_lagging_steps_total`), simulated time given up
(`inhouse:engine_stretched_seconds_total`), and a warning at most every `LAG_LOG_INTERVAL_S`.

Faults (drills) act here: `slow_factor` stretches every step, `hang` stops stepping, `fill_kv`
holds KV blocks away from requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from inhouse.engine import EngineCore, Request, StepResult
from inhouse.engine.rejection import Rejection
from inhouse.server.generation import GenerationPlan
from inhouse.server.metrics import EngineMetrics, EngineSnapshot, FinishedRecord

log = logging.getLogger("inhouse.engine")

LAG_LOG_INTERVAL_S = 10.0


@dataclass(eq=False)
class Stream:
    """One in-flight request as its HTTP handler sees it."""

    request: Request
    plan: GenerationPlan
    max_tokens: int
    prompt_ids: list[int]
    event: asyncio.Event = field(default_factory=asyncio.Event)
    num_tokens: int = 0  # tokens generated so far
    finished: bool = False
    finish_reason: str | None = None  # "length" | "stop" | "abort" | "error"
    arrival_s: float = 0.0
    first_token_s: float | None = None
    last_token_s: float | None = None
    finish_s: float | None = None

    @property
    def request_id(self) -> str:
        return self.request.request_id


class EngineRunner:
    def __init__(
        self,
        core: EngineCore,
        metrics: EngineMetrics,
        time_scale: float = 1.0,
        lag_tolerance_s: float = 0.005,
        catchup_window_s: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.core = core
        self.metrics = metrics
        self.time_scale = time_scale
        self.slow_factor = 1.0
        self.lag_tolerance_s = lag_tolerance_s
        self.catchup_window_s = catchup_window_s
        self.stretched_s = 0.0
        self.clock = clock
        self.streams: dict[str, Stream] = {}
        self.num_lagging_steps = 0
        self.max_lag_s = 0.0
        self._wakeup = asyncio.Event()
        self._unhang = asyncio.Event()
        self._unhang.set()
        self._stopped = False
        self.is_dead = False  # the loop failed: nothing steps any more
        self._prev_end_s: float | None = None
        self._kv_held: list[int] = []
        self._lag_window: list[float] = []
        self._stretched_window = 0.0
        self._last_lag_log_s = -LAG_LOG_INTERVAL_S

    # -- requests ------------------------------------------------------------------------

    def submit(self, stream: Stream) -> Rejection | None:
        """Queue a stream's request; why it cannot be served, or None."""
        stream.arrival_s = stream.request.arrival_s
        reason = self.core.add_request(stream.request)
        if reason is None:
            self.streams[stream.request_id] = stream
            self._wakeup.set()
        return reason

    def abort(self, stream: Stream) -> None:
        """The client went away, or the server gave up on it (drain timeout)."""
        if stream.finished:
            return
        now = self.clock()
        self.core.abort_request(stream.request, now)
        self._finish(stream, "abort", now)

    @property
    def num_in_flight(self) -> int:
        return len(self.streams)

    def snapshot(self) -> EngineSnapshot:
        core = self.core
        kv = core.scheduler.kv
        return EngineSnapshot(
            num_running=core.num_running,
            num_waiting=core.num_waiting,
            kv_usage=core.kv_usage,
            prefix_queries=kv.num_query_tokens,
            prefix_hits=kv.num_hit_tokens,
            num_preemptions=core.scheduler.num_preemptions,
        )

    # -- faults --------------------------------------------------------------------------

    def set_hang(self, hang: bool) -> None:
        if hang:
            self._unhang.clear()
        else:
            self._unhang.set()

    @property
    def is_hung(self) -> bool:
        return not self._unhang.is_set()

    def fill_kv(self, fraction: float) -> int:
        """Hold KV blocks until `fraction` of the cache is in use; returns blocks now held."""
        self.release_kv()
        pool = self.core.scheduler.kv.pool
        target = int(fraction * pool.num_blocks) - (pool.num_blocks - pool.num_free)
        blocks = pool.allocate(max(0, min(target, pool.num_free))) or []
        pool.drain_evicted()  # NOTE: evicted prefixes are dropped, not offloaded, in a drill
        self._kv_held = blocks
        return len(blocks)

    def release_kv(self) -> None:
        if self._kv_held:
            self.core.scheduler.kv.pool.free(self._kv_held)
            self._kv_held = []
            self._wakeup.set()

    # -- the loop ------------------------------------------------------------------------

    def stop(self) -> None:
        self._stopped = True
        self._wakeup.set()
        self._unhang.set()

    async def run(self) -> None:
        """Step until stopped. A failure ends the loop for good, as a dead vLLM engine core:
        every in-flight request finishes with "error" and the server reports the death."""
        try:
            await self._run()
        except Exception:
            log.exception("the engine loop failed: the engine is dead (/health answers 503)")
            self.is_dead = True
            now = self.clock()
            for stream in list(self.streams.values()):
                self._finish(stream, "error", now)

    async def _run(self) -> None:
        while not self._stopped:
            if not self._unhang.is_set():
                self._prev_end_s = None
                await self._unhang.wait()
                continue
            now = self.clock()
            start = self._start_time(now)
            self._wakeup.clear()
            result = self.core.step(start, max_steps=1)
            if result is None:
                # Resume at the moment the next pending request becomes ready, if any.
                self._prev_end_s = await self._idle(now)
                continue
            scale = self.time_scale * self.slow_factor
            end = start + (result.end_s - start) * scale
            # When the engine's API server has streamed the step's tokens (at or after its end).
            seen = start + (self.core.timeline[result.first_step] - start) * scale
            delay = end - self.clock()
            # Behind: no sleep, but yield, so the handlers send what the last step produced.
            await asyncio.sleep(max(0.0, delay))
            self._note_lag(self.clock() - end, end)
            self._prev_end_s = end
            if seen > end:
                await asyncio.sleep(max(0.0, seen - self.clock()))
            self._deliver(result, max(seen, end))

    def _start_time(self, now: float) -> float:
        """Where the next step starts: the previous one's end (or the moment a pending request
        becomes ready) if the loop is on time or within the catch-up window, else now."""
        prev = self._prev_end_s
        if prev is None:
            return now
        behind = now - prev
        if behind <= self.catchup_window_s:
            return prev
        self.stretched_s += behind
        self.metrics.stretched.inc(behind)
        self._stretched_window += behind
        return now

    async def _idle(self, now: float) -> float | None:
        ready = self.core.next_ready_s()
        timeout = None if ready is None else max(0.0, ready - now)
        if timeout == 0.0:
            await asyncio.sleep(0)
            return ready
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wakeup.wait(), timeout)
        return ready

    def _note_lag(self, lag_s: float, at_s: float) -> None:
        lag_s = max(0.0, lag_s)
        metrics = self.metrics
        metrics.lag.set(lag_s)
        metrics.lag_hist.observe(lag_s)
        if lag_s <= self.lag_tolerance_s:
            return
        self.num_lagging_steps += 1
        self.max_lag_s = max(self.max_lag_s, lag_s)
        metrics.lagging_steps.inc()
        self._lag_window.append(lag_s)
        if at_s - self._last_lag_log_s >= LAG_LOG_INTERVAL_S:
            window = self._lag_window
            log.warning(
                "engine is behind the simulated clock: %d step(s) delivered late by up to "
                "%.1f ms (mean %.1f ms) since the last report, %.0f ms of simulated time given "
                "up (client timings stretched by that much); this host cannot keep pace",
                len(window),
                1000 * max(window),
                1000 * sum(window) / len(window),
                1000 * self._stretched_window,
            )
            self._lag_window = []
            self._stretched_window = 0.0
            self._last_lag_log_s = at_s

    def _deliver(self, result: StepResult, end_s: float) -> None:
        metrics = self.metrics
        if result.batch is not None:
            metrics.iteration_tokens.observe(result.batch.num_tokens)
        streams = self.streams
        metrics.generation_tokens.inc(len(result.emitted))
        for request in result.emitted:
            stream = streams.get(request.request_id)
            if stream is None:
                continue
            if stream.first_token_s is None:
                stream.first_token_s = end_s
                metrics.ttft.observe(end_s - stream.arrival_s)
                metrics.observe_prefilled(
                    request.num_prompt_tokens,
                    request.num_cached_tokens,
                    request.num_host_loaded_tokens,
                )
            else:
                assert stream.last_token_s is not None, "a later token follows a first one"
                metrics.itl.observe(end_s - stream.last_token_s)
            stream.last_token_s = end_s
            stream.num_tokens = request.num_output_tokens
            stream.event.set()
        for request in result.finished:
            stream = streams.get(request.request_id)
            if stream is not None:
                self._finish(stream, stream.plan.finish_reason, end_s)

    def _finish(self, stream: Stream, reason: str, end_s: float) -> None:
        stream.finished = True
        stream.finish_reason = reason
        stream.finish_s = end_s
        self.streams.pop(stream.request_id, None)
        stream.event.set()
        request = stream.request
        scheduled = request.first_scheduled_s
        first = stream.first_token_s
        queue_s = (scheduled - stream.arrival_s) if scheduled is not None else 0.0
        start = scheduled if scheduled is not None else end_s
        self.metrics.observe_finished(
            FinishedRecord(
                finished_reason=reason,
                num_prompt_tokens=request.num_prompt_tokens,
                num_generation_tokens=stream.num_tokens,
                max_tokens=stream.max_tokens,
                n=1,
                queue_s=max(0.0, queue_s),
                prefill_s=max(0.0, (first - start) if first is not None else 0.0),
                decode_s=max(0.0, (end_s - first) if first is not None else 0.0),
                inference_s=max(0.0, end_s - start),
                e2e_s=max(0.0, end_s - stream.arrival_s),
                num_preemptions=request.num_preemptions,
                num_computed_prompt_tokens=request.num_prompt_tokens - request.num_cached_tokens,
            )
        )
