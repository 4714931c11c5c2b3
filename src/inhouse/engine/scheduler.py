"""A scheduler with vLLM V1's semantics: continuous batching under a token budget.

Each step, running requests are served first (decodes take one token, unfinished prefills their
next chunk); if KV blocks run out, the lowest-priority running request is preempted — its blocks
freed, its progress reset, recomputed later. Only when no one was preempted are waiting requests
admitted, in queue order, each first matched against the prefix cache, up to `max_num_seqs` and
the remaining token budget. A step that completes a sequence's known tokens samples one more.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from inhouse.engine.config import EngineConfig
from inhouse.engine.kv_cache import KVCacheManager
from inhouse.engine.lora_slots import LoraSlots
from inhouse.engine.queue import make_queue, priority_order
from inhouse.engine.request import FinishReason, Request, Status, record_token_steps
from inhouse.engine.reservation import TokenReservation
from inhouse.perf.step import StepShape


@dataclass(slots=True)
class Batch:
    """What one step runs: `(request, num_new_tokens)` pairs, and the step's shape."""

    scheduled: list[tuple[Request, int]] = field(default_factory=list)
    preempted: list[Request] = field(default_factory=list)
    num_tokens: int = 0
    num_sampled: int = 0
    ctx_tokens: int = 0
    attn_pairs: int = 0
    host_load_tokens: int = 0
    num_decodes: int = 0
    decode_ctx_tokens: int = 0
    num_lora_tokens: int = 0  # tokens of requests on a LoRA adapter
    num_lora_loads: int = 0  # adapters copied into a GPU slot before this step

    @property
    def is_empty(self) -> bool:
        return not self.scheduled

    def shape(self) -> StepShape:
        return StepShape(
            num_seqs=len(self.scheduled),
            num_tokens=self.num_tokens,
            num_sampled=self.num_sampled,
            ctx_tokens=self.ctx_tokens,
            attn_pairs=self.attn_pairs,
            host_load_tokens=self.host_load_tokens,
            num_decodes=self.num_decodes,
            decode_ctx_tokens=self.decode_ctx_tokens,
        )

    def add(self, request: Request, num_new: int) -> None:
        self.scheduled.append((request, num_new))
        history = request.num_computed_tokens
        self.num_tokens += num_new
        if request.lora is not None:
            self.num_lora_tokens += num_new
        self.ctx_tokens += history
        self.attn_pairs += num_new * history + num_new * (num_new + 1) // 2
        if history + num_new == request.num_tokens:
            self.num_sampled += 1
        if num_new == 1 and request.num_output_tokens > 0:
            self.num_decodes += 1
            self.decode_ctx_tokens += history


class Scheduler:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.kv = KVCacheManager(
            config.num_gpu_blocks,
            config.block_size,
            config.enable_prefix_caching,
            config.num_host_blocks,
        )
        self.waiting = make_queue(config.scheduling_policy)
        self._arrival_seqs = itertools.count()
        self.running: list[Request] = []
        self.lora_slots = LoraSlots(config.lora.max_loras) if config.lora is not None else None
        self.num_preemptions = 0
        # True when the last admission stopped because KV blocks ran short: until blocks are
        # freed, decode-only steps cannot admit anyone, so the core may jump over them.
        self.admission_blocked_by_kv = False
        # SGLang's admission, when configured: KV held back for running requests' futures.
        self.reservation = TokenReservation() if config.reserve_new_tokens else None

    def add(self, request: Request) -> None:
        request.status = Status.WAITING
        request.arrival_seq = next(self._arrival_seqs)
        self.waiting.add(request)
        # NOTE: a newcomer may sort ahead of the request that found no room (priority) or
        # need fewer blocks: only a fresh admission pass can say it cannot get in.
        self.admission_blocked_by_kv = False

    def _chunk(self, num_new: int, budget: int) -> int:
        threshold = self.config.long_prefill_token_threshold
        if threshold and num_new > threshold:
            num_new = threshold
        return min(num_new, budget)

    def _pick_victim(self) -> Request:
        if self.config.scheduling_policy == "priority":
            # vLLM's victim: the last by (priority, arrival). Its arrival times are wall-clock
            # and hardly ever equal; ours are often (a burst at t=0), and list order, which
            # `max` fell back on, changes as requests are preempted and readmitted, so equals
            # go by `priority_order`: the last to reach the scheduler, as the last to arrive
            # would be in vLLM.
            return max(self.running, key=priority_order)
        return self.running[-1]

    def _preempt(self, victim: Request, batch: Batch) -> None:
        self.running.remove(victim)
        self._release_lora(victim)
        self.kv.free(victim)
        victim.num_computed_tokens = 0
        victim.status = Status.PREEMPTED
        victim.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.prepend(victim)
        batch.preempted.append(victim)
        if self.reservation is not None:
            self.reservation.on_retract(self.running)

    def schedule(self, now_s: float) -> Batch:
        if not self.config.mixed_batches:
            batch = self._schedule_prefills(now_s)
            if not batch.is_empty:
                return batch
            batch = self._schedule_running(now_s, admit=False)
            self.on_decode_steps(1)
            return batch
        return self._schedule_running(now_s, admit=True)

    def on_decode_steps(self, num_steps: int) -> None:
        """Decode-only steps ran (one here, or a jump of many in the core)."""
        if self.reservation is not None:
            self.reservation.on_decode_steps(num_steps)

    @property
    def admission_may_change(self) -> bool:
        """Whether a waiting request could be admitted after a decode step without any
        request finishing: SGLang's reservation shrinks every step."""
        return self.reservation is not None and bool(self.waiting)

    def decode_steps_without_admission(self, limit: int) -> int:
        """Decode steps (at most `limit`) before whose admission checks the waiting head
        certainly cannot be admitted under SGLang's reservation, bounded optimistically:
        free KV cannot grow without a finish, and the held-back share shrinks at most by the
        ratio's decay and by one future token per running request a step."""
        reservation = self.reservation
        assert reservation is not None and self.waiting, "only while a reservation blocks"
        head = self._admission_head()
        if head is None:
            return limit  # every adapter waited for is one too many until a request finishes
        hit = self.kv.find_prefix(head)
        num_hit = (len(hit.gpu_blocks) + hit.num_host_blocks) * self.config.block_size
        cost = reservation.cost(head, max(head.num_tokens - num_hit, 1))
        free = self.kv.num_free_blocks * self.config.block_size

        def admissible_after(t: int) -> bool:
            return free - reservation.held_after(self.running, t) >= cost

        if admissible_after(0):
            return 0
        if not admissible_after(limit):
            return limit
        low, high = 0, limit  # not admissible after `low` steps; admissible after `high`
        while high - low > 1:
            mid = (low + high) // 2
            if admissible_after(mid):
                high = mid
            else:
                low = mid
        return high  # the checks before steps 0 .. high - 1 all fail

    def _admission_head(self) -> Request | None:
        """The waiting request an admission pass tries first: the queue's head, past those
        whose LoRA adapter would be one too many (`_admit` defers them); None if all are."""
        slots = self.lora_slots
        if slots is None:
            return self.waiting.peek()
        for request in self.waiting:
            if request.lora is None or slots.can_run(request.lora):
                return request
        return None

    def _schedule_prefills(self, now_s: float) -> Batch:
        """SGLang's default: a step is either a prefill batch (unfinished prompt chunks, then
        new requests) or a decode batch, and prefill goes first. Nothing is preempted here;
        a prompt that finds no room waits for the next prefill batch."""
        batch = Batch()
        budget = self.config.max_num_batched_tokens
        for request in self.running:
            remaining = request.num_tokens - request.num_computed_tokens
            if budget <= 0 or (remaining <= 1 and request.num_output_tokens > 0):
                continue
            num_new = self._chunk(remaining, budget)
            if not self.kv.allocate(request, num_new):
                break
            batch.add(request, num_new)
            budget -= num_new
        if budget > 0:
            self._admit(batch, budget, now_s)
        return batch

    def _schedule_running(self, now_s: float, admit: bool) -> Batch:
        batch = Batch()
        budget = self.config.max_num_batched_tokens
        bs = self.config.block_size
        kv = self.kv
        caching = kv.enable_caching
        scheduled = batch.scheduled
        append = scheduled.append
        running = self.running  # NOTE: `_preempt` removes from this very list
        # The common decode case's sums, added to the batch when the loop ends.
        num_decodes = decode_ctx = lora_decodes = 0
        i = 0
        while i < len(running) and budget > 0:
            request = running[i]
            computed = request.num_computed_tokens
            num_new = request.num_prompt_tokens + request.num_output_tokens - computed
            if (
                num_new == 1
                and computed < len(request.block_ids) * bs
                and (
                    (computed + 1) // bs <= request.num_cached_blocks
                    or request.num_cached_blocks >= len(request.block_hashes)
                    or not caching
                )
            ):
                # NOTE: the common decode case, inlined: its slot is already allocated and the
                # token completes no block that could newly be cached, so `kv.allocate` would
                # do nothing.
                append((request, 1))
                num_decodes += 1
                decode_ctx += computed
                if request.lora is not None:
                    lora_decodes += 1
                budget -= 1
                i += 1
                continue
            num_new = self._chunk(num_new, budget)
            while not kv.allocate(request, num_new):
                victim = self._pick_victim()
                victim_index = self.running.index(victim)
                for j, (queued, n) in enumerate(scheduled):
                    if queued is victim:
                        del scheduled[j]
                        budget += n
                        _unadd(batch, victim, n)
                        break
                self._preempt(victim, batch)
                if victim is request:
                    break
                if victim_index < i:
                    i -= 1
            if request.status is not Status.RUNNING:
                continue  # preempted itself; the loop re-reads running[i]
            batch.add(request, num_new)
            budget -= num_new
            i += 1
        batch.num_tokens += num_decodes
        batch.num_lora_tokens += lora_decodes
        batch.ctx_tokens += decode_ctx
        batch.attn_pairs += decode_ctx + num_decodes
        batch.num_sampled += num_decodes
        batch.num_decodes += num_decodes
        batch.decode_ctx_tokens += decode_ctx
        if batch.preempted:
            # NOTE: as in vLLM, a step that preempted admits no one, but the next step tries:
            # the victim's freed blocks may let it (or another) back in, so nothing here says
            # that decode-only steps are all that can follow.
            self.admission_blocked_by_kv = False
        elif admit:
            self._admit(batch, budget, now_s)
        return batch

    def _admit(self, batch: Batch, budget: int, now_s: float) -> None:
        self.admission_blocked_by_kv = False
        kv = self.kv
        bs = self.config.block_size
        waiting = self.waiting
        reservation = self.reservation
        room = 0.0
        if reservation is not None:
            room = reservation.remaining(self.running, kv.num_free_blocks * bs)
        slots = self.lora_slots
        deferred: list[Request] = []  # their adapter would be one too many in this batch
        while waiting and len(self.running) < self.config.max_num_seqs and budget > 0:
            request = waiting.peek()
            if slots is not None and request.lora is not None and not slots.can_run(request.lora):
                deferred.append(waiting.pop())
                continue
            hit = kv.find_prefix(request)
            num_hit = (len(hit.gpu_blocks) + hit.num_host_blocks) * bs
            num_new = request.num_tokens - num_hit
            if not self.config.enable_chunked_prefill and num_new > budget:
                if batch.scheduled:
                    break
                # NOTE: the budget is checked before a request joins, so the first one of a
                # batch always does (SGLang's PrefillAdder); else a recomputed request longer
                # than the budget would never run again.
                budget = num_new
            if reservation is not None:
                cost = reservation.cost(request, num_new)
                if cost >= room and (self.running or batch.scheduled):
                    break  # NOTE: not blocked by KV for good: the reservation shrinks
                room -= cost
            chunk = self._chunk(num_new, budget)
            host_tokens = hit.num_host_blocks * bs
            if not kv.allocate(request, chunk + host_tokens, hit):
                self.admission_blocked_by_kv = True
                break
            waiting.pop()
            kv.record_query(request.num_tokens, num_hit)
            request.num_computed_tokens = num_hit
            if request.first_scheduled_s is None:
                request.first_scheduled_s = now_s
                request.num_cached_tokens = num_hit
                request.num_host_loaded_tokens = host_tokens
            request.status = Status.RUNNING
            self.running.append(request)
            if slots is not None and request.lora is not None and slots.acquire(request.lora):
                batch.num_lora_loads += 1
            batch.add(request, chunk)
            batch.host_load_tokens += host_tokens
            budget -= chunk
        for request in reversed(deferred):
            waiting.prepend(request)

    def update(
        self, batch: Batch, step_index: int, end_s: float
    ) -> tuple[list[Request], list[Request]]:
        """Apply a finished step: advance progress, sample tokens, retire finished requests.

        Returns the requests that produced a token and those that finished."""
        emitted: list[Request] = []
        finished: list[Request] = []
        emit = emitted.append
        next_index = step_index + 1
        for request, num_new in batch.scheduled:
            computed = request.num_computed_tokens + num_new
            request.num_computed_tokens = computed
            num_output = request.num_output_tokens
            if computed < request.num_prompt_tokens + num_output:
                continue  # a prefill chunk that did not reach the end of the prompt
            emit(request)
            num_output += 1
            request.num_output_tokens = num_output
            if request.first_token_s is None:
                request.first_token_s = end_s
            if num_output >= request.output_len:
                self.finish(request, end_s)
                finished.append(request)
        record_token_steps(emitted, step_index, next_index)
        if finished:
            self.running = [r for r in self.running if r.status is Status.RUNNING]
        return emitted, finished

    def finish(self, request: Request, end_s: float) -> None:
        if request.status is Status.RUNNING:
            self._release_lora(request)
        request.status = Status.FINISHED
        request.finish_s = end_s
        # Freed blocks may let a waiting request in: only a fresh admission pass can say.
        self.admission_blocked_by_kv = False
        request.finish_reason = request.finish_reason or FinishReason.LENGTH
        self.kv.free(request)

    def _release_lora(self, request: Request) -> None:
        if self.lora_slots is not None and request.lora is not None:
            self.lora_slots.release(request.lora)

    def abort(self, request: Request, now_s: float) -> bool:
        """Drop a request wherever it is (a client went away). True if it was still live."""
        if request.status is Status.FINISHED:
            return False
        if request in self.running:
            self.running.remove(request)
        else:
            self.waiting.remove(request)
        request.finish_reason = FinishReason.ABORT
        self.finish(request, now_s)
        return True


def _unadd(batch: Batch, request: Request, num_new: int) -> None:
    history = request.num_computed_tokens
    batch.num_tokens -= num_new
    if request.lora is not None:
        batch.num_lora_tokens -= num_new
    batch.ctx_tokens -= history
    batch.attn_pairs -= num_new * history + num_new * (num_new + 1) // 2
    if history + num_new == request.num_tokens:
        batch.num_sampled -= 1
    if num_new == 1 and request.num_output_tokens > 0:
        batch.num_decodes -= 1
        batch.decode_ctx_tokens -= history
