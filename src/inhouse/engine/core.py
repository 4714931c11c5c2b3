"""The engine core: a scheduler and a step-time model stepping in time given from outside.

    batch = scheduler.schedule(now)
    dt = step_model.step_time(batch)
    scheduler.update(batch, now + dt)

The core reads no clock: the fleet simulator drives it in virtual time, the HTTP engine in wall
time. In front of the scheduler sits the API server: it takes each prompt in turn
(`prompt_token_overhead_s` per token) and streams every sampled token
(`output_token_overhead_s`), so clients see a step's tokens once it has got to them. Its input
and output paths are two queues: each depends only on what reached it (arrivals, step ends),
so a caller that commits a decode jump late gets the times a step-by-step run gets.
When every running sequence is decoding and nothing can join, the next steps differ only by
their growing context, so `step` may jump over many of them at once (their times form an
arithmetic series); every token still gets its exact time.

With `recv_interval` above 1 (SGLang's `--scheduler-recv-interval`) the scheduler loop takes
the requests that reached it only at some steps: SGLang's recv skipper adds 1 to a counter per
decode step and far more than the interval per prefill step (or when idle), and receives when
the counter reaches the interval, then sets it to 0. So after a decode step a ready request
waits for every `recv_interval`-th step, and after a prefill at once. A jump runs over the
receiving steps before the first pending request is ready (they take nothing) and stops before
the first one after it.
"""

from __future__ import annotations

import heapq
import itertools
import math
from array import array
from dataclasses import dataclass, field

from inhouse.engine.config import EngineConfig
from inhouse.engine.rejection import Rejection, RejectionKind
from inhouse.engine.request import Request, Status, record_token_steps
from inhouse.engine.scheduler import Batch, Scheduler
from inhouse.perf.step import StepModel

# A jump over fewer steps than this is not worth its bookkeeping.
MIN_FAST_FORWARD_STEPS = 2
# `step`'s default `max_steps`: no limit but the horizon and the KV cache.
UNLIMITED_STEPS = 1 << 30


@dataclass(slots=True)
class StepResult:
    """What one call to `EngineCore.step` did: `num_steps` steps from `start_s` to `end_s`."""

    start_s: float
    end_s: float
    first_step: int
    num_steps: int
    emitted: list[Request] = field(default_factory=list)
    finished: list[Request] = field(default_factory=list)
    batch: Batch | None = None  # the batch of a single step; None for a jump


@dataclass(slots=True)
class EngineStats:
    """Counters over the engine's life, for metrics (vLLM's `_total` counters)."""

    num_prompt_tokens: int = 0
    num_generation_tokens: int = 0
    num_finished: int = 0
    num_aborted: int = 0
    num_steps: int = 0
    busy_s: float = 0.0


class EngineCore:
    def __init__(self, config: EngineConfig, step_model: StepModel) -> None:
        self.config = config
        self.step_model = step_model
        self.scheduler = Scheduler(config)
        self.stats = EngineStats()
        # When each step's tokens reach the client (the step's end, or later if the API
        # server is behind), by step index.
        self.timeline = array("d")
        self._prompts_free_s = 0.0  # when the API server has taken every prompt it has
        self._stream_free_s = 0.0  # when it has streamed every token it has
        self._pending: list[tuple[float, int, Request]] = []
        # SGLang's recv skipper: its counter after the last step's check, and whether that
        # step was a decode step (see the module docstring).
        self._recv_count = 0
        self._last_decode = False
        self._seq = itertools.count()
        self._capacity_tokens = config.num_gpu_blocks * config.block_size
        # The jump `fast_forward_end_s` planned, kept for the `step` that commits it:
        # (now_s, effective horizon then, free KV blocks then, plan). A new pending request
        # keeps it (it can only pull the horizon in: `step` trims the plan to it); any other
        # change to the engine drops it.
        self._planned: tuple[float, float, int, tuple[int, float, float] | None] | None = None

    # -- admission -----------------------------------------------------------------------

    def check_request(self, num_prompt_tokens: int, output_len: int) -> Rejection | None:
        """Why a request cannot be served at all, or None if it can."""
        max_len = self.config.max_model_len
        if num_prompt_tokens > max_len:
            kind = RejectionKind.PROMPT_OVER_CONTEXT
        elif num_prompt_tokens + output_len > max_len:
            kind = RejectionKind.REQUEST_OVER_CONTEXT
        elif num_prompt_tokens + output_len > self._capacity_tokens:
            return Rejection(
                RejectionKind.OVER_KV_CACHE, num_prompt_tokens, output_len, self._capacity_tokens
            )
        else:
            return None
        return Rejection(kind, num_prompt_tokens, output_len, max_len)

    def add_request(self, request: Request) -> Rejection | None:
        """Queue a request; it reaches the scheduler after the API server's overhead.
        Returns why it was rejected, or None."""
        reason = self.check_request(request.num_prompt_tokens, request.output_len)
        if reason is not None:
            return reason
        config = self.config
        # NOTE: prompts queue for the API server one at a time (tokenization and input
        # processing); the fixed overhead is latency (HTTP, IPC) that occupies no one.
        start_s = max(request.arrival_s, self._prompts_free_s)
        self._prompts_free_s = start_s + config.prompt_token_overhead_s * request.num_prompt_tokens
        request.ready_s = self._prompts_free_s + config.request_overhead_s
        request.status = Status.PENDING
        heapq.heappush(self._pending, (request.ready_s, next(self._seq), request))
        return None

    def abort_request(self, request: Request, now_s: float) -> bool:
        self._planned = None
        if request.status is Status.PENDING:
            self._pending = [p for p in self._pending if p[2] is not request]
            heapq.heapify(self._pending)
            request.status = Status.FINISHED
            request.finish_s = now_s
            self.stats.num_aborted += 1
            return True
        aborted = self.scheduler.abort(request, now_s)
        if aborted:
            self.stats.num_aborted += 1
        return aborted

    def _release_pending(self, now_s: float) -> bool:
        """Hand the requests ready by `now_s` to the scheduler; True if there were any."""
        pending = self._pending
        if not pending or pending[0][0] > now_s:
            return False
        while pending and pending[0][0] <= now_s:
            self.scheduler.add(heapq.heappop(pending)[2])
        return True

    def _effective_horizon_s(self, horizon_s: float) -> float:
        """The caller's horizon, or sooner when a pending request becomes ready first."""
        pending = self._pending
        return pending[0][0] if pending and pending[0][0] < horizon_s else horizon_s

    # -- state ---------------------------------------------------------------------------

    @property
    def num_running(self) -> int:
        return len(self.scheduler.running)

    @property
    def num_waiting(self) -> int:
        return len(self.scheduler.waiting) + len(self._pending)

    @property
    def has_unfinished(self) -> bool:
        return bool(self.scheduler.running or self.scheduler.waiting or self._pending)

    def next_ready_s(self) -> float | None:
        """When the next pending request reaches the scheduler, if any is pending."""
        return self._pending[0][0] if self._pending else None

    @property
    def kv_usage(self) -> float:
        return self.scheduler.kv.pool.usage

    def token_times(self, request: Request) -> list[float]:
        """Time of each output token of a request, from its recorded step runs."""
        runs = request.token_runs
        timeline = self.timeline
        out: list[float] = []
        for i in range(0, len(runs), 2):
            out.extend(timeline[runs[i] : runs[i + 1]])
        return out

    # -- stepping ------------------------------------------------------------------------

    def step(
        self, now_s: float, horizon_s: float = math.inf, max_steps: int = UNLIMITED_STEPS
    ) -> StepResult | None:
        """Run one step starting at `now_s`, or several decode-only steps at once when nothing
        can change before `horizon_s` (the caller's next event). None if there is nothing to run
        now (see `next_ready_s`)."""
        planned, self._planned = self._planned, None
        receives, self._recv_count = self._recv_check()
        released = receives and self._release_pending(now_s)
        scheduler = self.scheduler
        if not scheduler.running and not scheduler.waiting:
            return None
        if max_steps >= MIN_FAST_FORWARD_STEPS:
            plan = (
                self._replan(planned, now_s, horizon_s)
                if planned is not None
                and not released
                and max_steps == UNLIMITED_STEPS
                and self.config.recv_interval == 1
                else self._plan_fast_forward(now_s, horizon_s, max_steps, self._recv_count)
            )
            jumped = self._fast_forward(now_s, plan)
            if jumped is not None:
                return jumped
        batch = scheduler.schedule(now_s)
        if batch.is_empty:
            return None
        self._last_decode = batch.num_decodes == len(batch.scheduled)
        dt = self.step_model.step_time(batch.shape())
        lora = self.config.lora
        if lora is not None:
            dt += lora.step_s(dt, batch.num_tokens, batch.num_lora_tokens)
            dt += batch.num_lora_loads * lora.load_s
        end_s = now_s + dt
        index = len(self.timeline)
        seen_s = self._deliver(end_s, batch.num_sampled)
        self.timeline.append(seen_s)
        emitted, finished = scheduler.update(batch, index, seen_s)
        self._account(1, dt, batch.num_tokens - len(emitted), len(emitted), finished)
        return StepResult(now_s, end_s, index, 1, emitted, finished, batch)

    def takes_pending_at(self, now_s: float) -> bool:
        """Whether a step from `now_s` would hand pending requests to the scheduler: one is
        ready by then and the scheduler loop receives at that step; changes nothing."""
        pending = self._pending
        return bool(pending) and pending[0][0] <= now_s and self._recv_check()[0]

    def _recv_check(self) -> tuple[bool, int]:
        """Whether the scheduler loop about to run a step takes the requests that reached it,
        and SGLang's recv-skipper counter after the check; changes nothing."""
        interval = self.config.recv_interval
        scheduler = self.scheduler
        if interval == 1 or not self._last_decode:
            return True, 0
        if not scheduler.running and not scheduler.waiting:
            # NOTE: idle, SGLang's loop spins (each empty pass counts 1) and reaches the
            # interval within microseconds.
            return True, 0
        count = self._recv_count + 1
        return (True, 0) if count >= interval else (False, count)

    def _deliver(self, end_s: float, num_tokens: int) -> float:
        """When the `num_tokens` tokens of a step ending at `end_s` reach their clients."""
        per_token_s = self.config.output_token_overhead_s
        if per_token_s == 0.0:
            return end_s
        self._stream_free_s = max(end_s, self._stream_free_s) + num_tokens * per_token_s
        return self._stream_free_s

    def _account(
        self, num_steps: int, busy_s: float, prompt: int, generated: int, finished: list[Request]
    ) -> None:
        stats = self.stats
        stats.num_steps += num_steps
        stats.busy_s += busy_s
        stats.num_prompt_tokens += prompt
        stats.num_generation_tokens += generated
        stats.num_finished += len(finished)

    def fast_forward_end_s(self, now_s: float, horizon_s: float = math.inf) -> float | None:
        """When the jump that `step(now_s, horizon_s)` would make ends, or None if it would not
        jump; changes nothing. A caller may leave a decode-only engine alone until something
        reaches it (the fleet simulator does), then step it from `now_s` after all."""
        if self.takes_pending_at(now_s):
            self._planned = None
            return None
        plan = self._plan_fast_forward(now_s, horizon_s, UNLIMITED_STEPS, self._recv_check()[1])
        self._planned = (
            now_s,
            self._effective_horizon_s(horizon_s),
            self.scheduler.kv.num_free_blocks,
            plan,
        )
        if plan is None:
            return None
        steps, first_s, growth_s = plan
        return now_s + steps * first_s + growth_s * steps * (steps - 1) / 2

    def _replan(
        self,
        planned: tuple[float, float, int, tuple[int, float, float] | None],
        now_s: float,
        horizon_s: float,
    ) -> tuple[int, float, float] | None:
        """The plan `_plan_fast_forward(now_s, horizon_s)` would make, from the one
        `fast_forward_end_s` made if it still holds: same start, no request released into the
        scheduler and the same free blocks since (so the same running requests and the same
        KV room), and a horizon no later than that plan's.

        NOTE: a plan is `min(steps the outputs and the KV cache allow, steps starting before
        the horizon)`, and the second term only shrinks with the horizon, so trimming the old
        plan to the new horizon gives exactly the plan made afresh."""
        planned_s, planned_horizon_s, free, plan = planned
        horizon_s = self._effective_horizon_s(horizon_s)
        if (
            planned_s != now_s
            or free != self.scheduler.kv.num_free_blocks
            or horizon_s > planned_horizon_s
        ):
            return self._plan_fast_forward(now_s, horizon_s, UNLIMITED_STEPS, 0)
        if plan is None or horizon_s == planned_horizon_s:
            return plan
        steps, first_s, growth_s = plan
        steps = _steps_starting_before(now_s, horizon_s, first_s, growth_s, steps)
        return (steps, first_s, growth_s) if steps >= MIN_FAST_FORWARD_STEPS else None

    def _plan_fast_forward(
        self, now_s: float, horizon_s: float, max_steps: int, recv_count: int
    ) -> tuple[int, float, float] | None:
        """Steps of the jump from `now_s`, the first step's duration and the growth per step;
        `recv_count` is the recv skipper's counter after the first step's check."""
        scheduler = self.scheduler
        running = scheduler.running
        if not running:
            return None
        reservation_blocks = False
        if scheduler.waiting and len(running) < self.config.max_num_seqs:
            if scheduler.admission_may_change and not self.config.mixed_batches:
                # A decode batch with requests waiting: SGLang's reservation held them back.
                reservation_blocks = True
            elif not scheduler.admission_blocked_by_kv:
                return None
        ctx_sum = num_lora = 0
        steps = max_steps
        for request in running:
            if request.lora is not None:
                num_lora += 1
            computed = request.num_computed_tokens
            num_output = request.num_output_tokens
            # NOTE: a sequence with no output yet whose chunks (or prefix hit) left one prompt
            # token also runs one token against `computed` of context, but that step samples its
            # first token: it is a prefill's end, stepped on its own, not a decode to jump over.
            if num_output == 0 or request.num_prompt_tokens + num_output != computed + 1:
                return None
            ctx_sum += computed
            if request.output_len - num_output < steps:
                steps = request.output_len - num_output
        if reservation_blocks:
            steps = scheduler.decode_steps_without_admission(steps)
        if steps < MIN_FAST_FORWARD_STEPS:
            return None
        num_seqs = len(running)
        if not self.step_model.decode_is_linear(num_seqs, ctx_sum):
            return None
        base_s, per_ctx_s = self.step_model.decode_coefficients(num_seqs, ctx_sum)
        first_s = base_s + per_ctx_s * ctx_sum  # duration of the first step
        growth_s = per_ctx_s * num_seqs  # each step's context grows by one token per sequence
        # The line holds while the context stays below where sparse attention saturates.
        limit = self.step_model.linear_ctx_limit(num_seqs, ctx_sum)
        if limit != math.inf:
            steps = min(steps, int((limit - ctx_sum) // num_seqs))
        lora = self.config.lora
        if lora is not None and num_lora:
            # The adapters' share of each decode step is constant over the jump, so the steps'
            # times stay an arithmetic series (`LoraCost.step_s`, exactly).
            scale = 1.0 + lora.token_slowdown * num_lora / num_seqs
            first_s *= scale
            growth_s *= scale
        steps = min(steps, _steps_starting_before(now_s, horizon_s, first_s, growth_s, steps))
        if self._pending:
            # Stop before the first receiving step that starts once the head is ready: step
            # j (j >= 1) receives when (recv_count + j) is a multiple of the interval (every
            # step with an interval of 1, so the jump stops at the ready time).
            ready = _steps_starting_before(now_s, self._pending[0][0], first_s, growth_s, steps)
            if ready < steps:
                interval = self.config.recv_interval
                steps = min(steps, max(1, ready + (-(recv_count + ready)) % interval))
        steps = min(steps, self._steps_kv_allows(steps))
        if steps < MIN_FAST_FORWARD_STEPS:
            return None
        return steps, first_s, growth_s

    def _fast_forward(
        self, now_s: float, plan: tuple[int, float, float] | None
    ) -> StepResult | None:
        if plan is None:
            return None
        steps, first_s, growth_s = plan
        scheduler = self.scheduler
        running = scheduler.running
        num_seqs = len(running)
        index = len(self.timeline)
        ends = [now_s + j * first_s + growth_s * j * (j - 1) / 2 for j in range(1, steps + 1)]
        end_s = ends[-1]
        if self.config.output_token_overhead_s:
            ends = [self._deliver(e, num_seqs) for e in ends]
        self.timeline.extend(ends)
        seen_s = ends[-1]
        # NOTE: all allocations before any request finishes, unlike a step-by-step run: the
        # jump's blocks fit in the blocks free before it, which precede in the free queue any
        # block a finishing request frees, so the same blocks are taken either way.
        scheduler.kv.grow_decodes(running, steps)
        scheduler.on_decode_steps(steps)
        # The receiving checks of steps 1 .. steps-1 took nothing (the plan stops before any
        # that would); the counter counts on over them.
        self._recv_count = (self._recv_count + steps - 1) % self.config.recv_interval
        self._last_decode = True
        finished: list[Request] = []
        end_index = index + steps
        for request in running:
            request.num_computed_tokens += steps
            num_output = request.num_output_tokens + steps
            request.num_output_tokens = num_output
            if num_output >= request.output_len:
                finished.append(request)
        record_token_steps(running, index, end_index)
        for request in finished:
            scheduler.finish(request, seen_s)
        emitted = list(running)
        if finished:
            scheduler.running = [r for r in running if r.status is Status.RUNNING]
        self._account(steps, end_s - now_s, 0, num_seqs * steps, finished)
        return StepResult(now_s, end_s, index, steps, emitted, finished, None)

    def _steps_kv_allows(self, steps: int) -> int:
        """Largest number of decode steps (≤ steps) the free KV blocks can hold."""
        running = self.scheduler.running
        bs = self.config.block_size
        free = self.scheduler.kv.num_free_blocks
        if len(running) * -(-steps // bs) <= free:
            # NOTE: a running request's blocks hold all its computed tokens, so `steps` more
            # tokens take at most ceil(steps / bs) new blocks each.
            return steps

        def need(k: int) -> int:
            total = 0
            for r in running:
                extra = -(-(r.num_computed_tokens + k) // bs) - len(r.block_ids)
                if extra > 0:
                    total += extra
            return total

        if need(steps) <= free:
            return steps
        low, high = 0, steps  # need(low) fits, need(high) does not
        while high - low > 1:
            mid = (low + high) // 2
            if need(mid) <= free:
                low = mid
            else:
                high = mid
        return low


def _steps_starting_before(
    now_s: float, horizon_s: float, first_s: float, growth_s: float, limit: int
) -> int:
    """How many steps of durations first_s, first_s+growth_s, ... start before horizon_s."""
    if math.isinf(horizon_s):
        return limit

    def start(j: int) -> float:
        return now_s + j * first_s + growth_s * j * (j - 1) / 2

    if start(limit - 1) < horizon_s:
        return limit
    # Solve start(j) = horizon for j, then settle the boundary exactly.
    a = growth_s / 2
    b = first_s - a
    c = now_s - horizon_s
    j = -c / b if a == 0 else (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)
    count = max(int(j) + 1, 0)
    while count > 0 and start(count - 1) >= horizon_s:
        count -= 1
    while count < limit and start(count) < horizon_s:
        count += 1
    return count
