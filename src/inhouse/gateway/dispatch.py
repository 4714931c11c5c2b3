"""Where a request goes: the pool (model, length rule, fallback) and the replica (the stack's
routing policy), with a bounded queue by priority tier when the pool is saturated.

Pool choice is `inhouse.routing.pools.choose_pool` and replica choice the pool's policy from
`inhouse.routing.registry`, the very code the fleet simulator runs, fed with live views
(`Replica.view`). The gateway calls the policy's `observe` when it dispatches, `on_first_token`
at the first token and `on_finish` at the end, as the simulator does.

Saturation: a replica takes at most `max_inflight` requests from the gateway (default: the
pool's `max_num_seqs` + `saturation_waiting`; a tier may use only `max_share` of it). When no
replica has room for a request's tier, the request waits in its pool's queue, one FIFO per tier,
served in tier order (lower vLLM priority first) as slots free, for at most the tier's
`queue_timeout_s`, then 503 + Retry-After; a full queue answers 503 at once.

Prefill holdback: while a request of a better tier waits for its first token on a replica, no
request of a worse tier is dispatched there (it waits in the queue), so a batch surge cannot
put its prefills in the way of an interactive prefill (llm-d's flow control holds back lower
bands the same way). Requests already running are not touched. NOTE: only streams hold back:
the first token of a non-streamed answer never reaches the gateway (the answer comes whole), so
such a request would count as in prefill until its end, and worse tiers waited behind every
decode of it; with such requests always running, they starved however idle the replica.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass, field

from inhouse.errors import SpecError
from inhouse.gateway.prompt import TokenCounter, model_root
from inhouse.gateway.replicas import Replica
from inhouse.openai_errors import ApiError
from inhouse.routing.framework import Policy, PolicyContext
from inhouse.routing.pools import PoolChoice, choose_pool
from inhouse.routing.registry import make_policy
from inhouse.routing.view import Decision, RequestView
from inhouse.spec.gateway import TierSpec
from inhouse.spec.stack import PoolSpec, StackSpec

DEFAULT_RUNNING_CAPACITY = 256
HASHING_POLICIES = ("cache_aware",)
# Policy reasons → the `reason` label of inhouse_gateway_routing_decisions_total.
DECISION_REASONS = {
    "cache_hit": "prefix_match",
    "load": "least_loaded",
    "least_loaded": "least_loaded",
    "session": "session_affinity",
    "round_robin": "round_robin",
}


@dataclass(eq=False)
class _Waiter:
    request: RequestView
    tier: TierSpec
    exclude: frozenset[int]
    holds_back: bool
    future: asyncio.Future[Placement]


@dataclass(eq=False)
class PoolState:
    spec: PoolSpec
    replicas: list[Replica]
    policy: Policy
    max_inflight: int
    counter: TokenCounter
    block_tokens: int
    needs_hashes: bool
    queues: dict[int, collections.deque[_Waiter]] = field(default_factory=dict)
    roots: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def num_queued(self) -> int:
        return sum(len(q) for q in self.queues.values())

    def max_model_len(self) -> int | None:
        """The context the gateway holds prompts and `max_tokens` to: the stack's, else the
        shortest its engines report."""
        if self.spec.knobs.max_model_len is not None:
            return self.spec.knobs.max_model_len
        known = self._reported_lengths()
        return min(known) if known else None

    def longest_context(self) -> int | None:
        """The most any replica may generate up to: the stack's context or the longest an
        engine reports, whichever is longer. NOTE: what a request naming no `max_tokens`
        reserves against its tenant's budget; an engine started with a longer context than
        the stack file says generated past the stack's and spent past the budget."""
        known = self._reported_lengths()
        if self.spec.knobs.max_model_len is not None:
            known.append(self.spec.knobs.max_model_len)
        return max(known) if known else None

    def _reported_lengths(self) -> list[int]:
        """The context lengths the replicas' `/v1/models` reported (not all have)."""
        return [r.max_model_len for r in self.replicas if r.max_model_len is not None]

    def root(self, model: str) -> int:
        found = self.roots.get(model)
        if found is None:
            found = self.roots[model] = model_root(f"{self.name}:{model}")
        return found


@dataclass(slots=True)
class Placement:
    pool: PoolState
    replica: Replica
    decision: Decision
    request: RequestView
    pool_reason: str
    priority: int = 0
    is_prefilling: bool = True

    @property
    def reason_label(self) -> str:
        if self.pool_reason.startswith("fallback"):
            return "fallback"
        if self.pool_reason == "long_prompt":
            return "long_prompt"
        return DECISION_REASONS.get(self.decision.reason, self.decision.reason)


def running_capacity(pool: PoolSpec) -> int:
    return pool.knobs.max_num_seqs or DEFAULT_RUNNING_CAPACITY


def build_policy(pool: PoolSpec, block_tokens: int, num_replicas: int | None = None) -> Policy:
    """The pool's routing policy, for `num_replicas` replica slots (default: its replicas)."""
    name = pool.routing.policy
    if name == "oracle":
        raise SpecError(
            f"pool {pool.name!r}: routing policy 'oracle' reads the engines' caches and exists "
            "only in the simulator; use cache_aware in a live stack"
        )
    params = {k: v for k, v in pool.routing.params.items()}
    num = pool.replicas if num_replicas is None else num_replicas
    context = PolicyContext(num_replicas=num, block_size=block_tokens)
    return make_policy(name, context, params)


class Dispatcher:
    def __init__(
        self, stack: StackSpec, pools: dict[str, PoolState], scrape_max_age_s: float
    ) -> None:
        self.stack = stack
        self.pools = pools
        self.scrape_max_age_s = scrape_max_age_s
        self._now = time.monotonic()
        # Every name a client may put in `model` -> its pool; the first pool wins, as in
        # `StackSpec.pool_for_model` (a dict lookup per request instead of a scan).
        self.models: dict[str, PoolSpec] = {}
        for spec in stack.pools:
            for name in spec.model_names:
                self.models.setdefault(name, spec)
        self._as_is = {spec.name: PoolChoice(spec.name, "model") for spec in stack.pools}

    def views(self, pool_name: str) -> list[object]:
        pool = self.pools[pool_name]
        now = self._now
        age = self.scrape_max_age_s
        return [r.view(now, age) for r in pool.replicas]

    def choose_pool(self, model: str | None, num_prompt_tokens: int) -> PoolChoice:
        """`routing.pools.choose_pool` over live views. The common case, the model's pool
        with no length rule to apply, up and not saturated, is answered from the replicas'
        own counts without building views (the same tests as `is_down` and `is_saturated`).

        NOTE: a twin of `choose_pool`'s common case, kept for measured speed: 0.42 µs against
        6.95 µs per request over views on a 4 + 2 replica stack (2026-12-01, 2 shared cores,
        `python benchmarks/bench_pool_choice.py`), where placement takes ~16 µs of the ~32 µs
        before the engine write (`bench_gateway_admission.py`). tests/gateway/test_routing.py
        checks the two choose alike on random health, load, scrapes, lengths and fallbacks."""
        now = self._now = time.monotonic()
        pool = self.stack.pools[0] if model is None else self.models.get(model)
        if pool is not None and (
            pool.long_pool is None
            or pool.long_prompt_tokens is None
            or num_prompt_tokens <= pool.long_prompt_tokens
            or model in pool.lora_adapters  # a LoRA guest takes no length rule
        ):
            age = self.scrape_max_age_s
            limit = pool.saturation_waiting
            is_up = False
            for replica in self.pools[pool.name].replicas:
                if replica.is_healthy:
                    is_up = True
                    if replica.num_waiting(now, age) < limit:
                        return self._as_is[pool.name]  # up, and not every replica saturated
            if not is_up and pool.fallback is None:
                return PoolChoice(None, "pool_down")
        return choose_pool(self.stack, model, num_prompt_tokens, self.views)  # type: ignore[arg-type]

    def try_place(
        self,
        pool: PoolState,
        request: RequestView,
        tier: TierSpec,
        exclude: frozenset[int],
        holds_back: bool = True,
    ) -> Placement | None:
        """A replica with room for `request` now, or None. `holds_back`: the request holds
        worse tiers off its replica until its first token (a stream's; a non-streamed answer's
        first token is never seen, see the module's docstring)."""
        cap = max(1, int(pool.max_inflight * tier.max_share))
        now = time.monotonic()
        age = self.scrape_max_age_s
        priority = tier.priority
        views = []
        for replica in pool.replicas:
            is_eligible = replica.num_inflight < cap and replica.index not in exclude
            if is_eligible:
                for p, n in replica.prefilling.items():
                    if n and p < priority:
                        is_eligible = False  # held back: a better tier is in prefill there
                        break
            views.append(replica.view(now, age, is_eligible))
        decision = pool.policy.choose(request, views)
        if decision is None:
            return None
        pool.policy.observe(request, decision)
        replica = pool.replicas[decision.replica]
        replica.num_inflight += 1
        if holds_back:
            replica.prefilling[priority] = replica.prefilling.get(priority, 0) + 1
        return Placement(pool, replica, decision, request, "model", priority, holds_back)

    async def place(
        self,
        pool: PoolState,
        request: RequestView,
        tier: TierSpec,
        exclude: frozenset[int] = frozenset(),
        holds_back: bool = True,
    ) -> Placement:
        """A replica for `request`, waiting in the pool's queue if it is saturated."""
        placed = None
        if not self._has_waiters_above(pool, tier.priority):
            placed = self.try_place(pool, request, tier, exclude, holds_back)
        if placed is not None:
            return placed
        if not any(r.is_healthy and r.index not in exclude for r in pool.replicas):
            raise ApiError(
                503,
                f"No replica of pool {pool.name!r} is available. Please try again later.",
                reason="no_replica",
                retry_after_s=5.0,
            )
        queue = pool.queues.setdefault(tier.priority, collections.deque())
        if len(queue) >= tier.max_queue:
            raise ApiError(
                503,
                f"Every replica of pool {pool.name!r} is saturated and its queue for this tier "
                "is full. Please retry later.",
                reason="queue_full",
                retry_after_s=max(1.0, tier.queue_timeout_s / 4),
            )
        future = asyncio.get_running_loop().create_future()
        waiter = _Waiter(request, tier, exclude, holds_back, future)
        queue.append(waiter)
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.future), tier.queue_timeout_s)
        except TimeoutError:
            if waiter.future.done() and not waiter.future.cancelled():
                return waiter.future.result()  # placed as the timer fired
            waiter.future.cancel()
            raise ApiError(
                503,
                f"Every replica of pool {pool.name!r} stayed saturated for "
                f"{tier.queue_timeout_s:g} s. Please retry later.",
                reason="queue_full",
                retry_after_s=max(1.0, tier.queue_timeout_s / 4),
            ) from None
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self.release(waiter.future.result())
            waiter.future.cancel()
            raise
        finally:
            if waiter in queue:
                queue.remove(waiter)

    def _has_waiters_above(self, pool: PoolState, priority: int) -> bool:
        """Requests of this or a better tier already wait: do not jump the queue."""
        queues = pool.queues
        return bool(queues) and any(q for p, q in queues.items() if p <= priority)

    def first_token(self, placement: Placement) -> None:
        placement.pool.policy.on_first_token(placement.request.request_id)
        self._end_prefill(placement)
        if placement.pool.queues:
            self.drain(placement.pool)

    def _end_prefill(self, placement: Placement) -> None:
        if placement.is_prefilling:
            placement.is_prefilling = False
            placement.replica.prefilling[placement.priority] -= 1

    def release(self, placement: Placement) -> None:
        """The request finished (or failed) on its replica: free the slot, serve the queue."""
        placement.replica.num_inflight -= 1
        self._end_prefill(placement)
        placement.pool.policy.on_finish(placement.request.request_id)
        self.drain(placement.pool)

    def drain(self, pool: PoolState) -> None:
        """Place waiting requests, best tier first, while replicas have room."""
        while True:
            placed_any = False
            for priority in sorted(pool.queues):
                queue = pool.queues[priority]
                while queue and queue[0].future.done():
                    queue.popleft()  # timed out or cancelled
                if not queue:
                    continue
                waiter = queue[0]
                placed = self.try_place(
                    pool, waiter.request, waiter.tier, waiter.exclude, waiter.holds_back
                )
                if placed is None:
                    continue
                queue.popleft()
                waiter.future.set_result(placed)
                placed_any = True
                break
            if not placed_any:
                return
