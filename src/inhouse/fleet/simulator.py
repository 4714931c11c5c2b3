"""The fleet simulator: workload → pool → routing policy → engine replicas, in virtual time.

One event loop (`events.EventQueue`) drives everything. Jumps over decode steps stay exact:

* A replica whose engine could jump over decode-only steps is not stepped at once. The simulator
  asks where the jump would end undisturbed (`EngineCore.fast_forward_end_s`: the next
  completion, or when KV runs short) and schedules that; the replica is *deferred* from its
  start time. If a request is routed to it before then, the jump is committed at that moment
  from the same start: the engine stops it at the first step boundary after the request is ready,
  exactly where a step-by-step run would have let the request in. Otherwise the whole jump is
  committed in one call when it ends. So a replica is stepped when something reaches it, not
  at every arrival anywhere in the fleet.
* Any other step runs with `step(now, horizon_s=...)` bounded by the next known arrival and, for
  closed-loop workloads, by the earliest arrival a completion elsewhere could cause (another
  replica's next event plus the workload's reaction delay).

Routing sees each replica's in-flight count as the simulator keeps it (dispatched and not yet
finished as of now; exact, since a deferred replica finishes nothing before its jump's end) and
the engine's queue and KV usage (as of the deferred replica's start: a slightly stale scrape,
as a live gateway has). The policy learns through `observe`, `on_first_token` and `on_finish`,
exactly as the live gateway calls them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from inhouse.engine import EngineCore, Request, StepResult
from inhouse.engine.build import ReplicaSpec, build_replica
from inhouse.errors import SpecError
from inhouse.fleet.events import EventKind, EventQueue
from inhouse.fleet.limits import MAX_SIMULATED_REQUESTS, PROJECT_EVERY, TooManyRequestsError
from inhouse.fleet.records import FleetResult, RequestRecord
from inhouse.openai_errors import rejection_message
from inhouse.routing import (
    Policy,
    PolicyContext,
    ReplicaView,
    RequestView,
    choose_pool,
    make_policy,
)
from inhouse.spec.stack import PoolSpec, StackSpec
from inhouse.workload.base import Workload, WorkloadRun, WorkRequest

__all__ = [
    "MAX_SIMULATED_REQUESTS",
    "Fleet",
    "TooManyRequestsError",
    "replica_spec_for_pool",
    "simulate_stack",
]

INF = math.inf


def replica_spec_for_pool(pool: PoolSpec) -> ReplicaSpec:
    """The engine replica a stack pool describes: its knobs travel as they are."""
    return ReplicaSpec(
        model=pool.model,
        gpu=pool.gpu,
        tp=pool.tp,
        quant=pool.quant,
        backend=pool.backend,
        knobs=pool.knobs,
        lora_adapters=pool.lora_adapters,
    )


@dataclass(slots=True)
class _Replica:
    pool: str
    index: int
    engine: EngineCore
    is_healthy: bool
    num_inflight: int = 0
    next_event_s: float = INF  # its one valid queued event; inf while idle
    event_token: int = 0  # the token of that event: older ones are stale
    result: StepResult | None = None  # the step in progress
    deferred_s: float | None = None  # start of a decode jump not yet committed

    def count_cached_prefix(self, hashes: Sequence[int]) -> int:
        """Leading blocks of `hashes` the engine holds on the GPU (the oracle's view)."""
        return len(self.engine.scheduler.kv.pool.prefix_blocks(list(hashes), len(hashes)))


@dataclass(slots=True)
class _Pool:
    spec: PoolSpec
    policy: Policy
    replicas: list[_Replica] = field(default_factory=list)


@dataclass(slots=True)
class _InFlight:
    work: WorkRequest
    pool: _Pool
    replica: _Replica
    route: str


class Fleet:
    """One simulated run. Build, then `run()` once."""

    def __init__(
        self,
        stack: StackSpec,
        workload: Workload,
        *,
        policy: str | None,
        duration_s: float,
        seed: int,
        rate_scale: float,
        down_replicas: Mapping[str, int],
        max_requests: int | None = None,
    ) -> None:
        self.stack = stack
        self.duration_s = duration_s
        self.max_requests = max_requests
        self._num_arrived = 0
        block_sizes = {pool.knobs.block_size for pool in stack.pools}
        if len(block_sizes) != 1:
            raise SpecError(
                f"pools use block sizes {sorted(block_sizes)}; the simulator needs one "
                "knobs.block_size across the stack"
            )
        self.block_size = block_sizes.pop()
        self.down = _check_down(stack, down_replicas)
        self.pools: dict[str, _Pool] = {}
        for spec in stack.pools:
            self.pools[spec.name] = self._build_pool(spec, policy)
        self.replicas = [r for pool in self.pools.values() for r in pool.replicas]
        self.workload: WorkloadRun = workload.start(
            block_size=self.block_size, seed=seed, duration_s=duration_s, rate_scale=rate_scale
        )
        self.queue: EventQueue[tuple[_Replica, int] | None] = EventQueue()
        self.records: list[RequestRecord] = []
        self._arrival_event_s = INF
        self._num_calls = 0
        self._started = False

    def _build_pool(self, spec: PoolSpec, policy: str | None) -> _Pool:
        replica = build_replica(replica_spec_for_pool(spec))
        name = policy or spec.routing.policy
        params = spec.routing.params if name == spec.routing.policy else {}
        context = PolicyContext(
            num_replicas=spec.replicas,
            block_size=spec.knobs.block_size,
            kv_blocks_per_replica=replica.config.num_gpu_blocks,
        )
        pool = _Pool(spec, make_policy(name, context, params))
        down = self.down.get(spec.name, 0)
        for index in range(spec.replicas):
            healthy = index < spec.replicas - down
            pool.replicas.append(_Replica(spec.name, index, replica.new_engine(), healthy))
        return pool

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> FleetResult:
        self.run_until(INF)
        return self._result()

    def run_until(self, end_s: float) -> bool:
        """Process the events up to `end_s` of virtual time; False once none are left. A long
        run (a soak) calls it day by day and takes the records as it goes (`take_records`)."""
        if not self._started:
            self._started = True
            self._schedule_arrival()
        queue = self.queue
        while queue:
            if queue.peek_time_s() > end_s:
                return True
            now, kind, payload = queue.pop()
            if kind is EventKind.ARRIVAL:
                if now == self._arrival_event_s:
                    self._arrive(now)
                continue
            assert payload is not None
            replica, token = payload
            if token != replica.event_token:
                continue  # superseded (a deferred jump committed early)
            if kind is EventKind.STEP_END:
                self._end_step(replica, now)
            else:
                self._step(replica, now)
        return False

    def take_records(self) -> list[RequestRecord]:
        """The records of requests finished (or failed) since the last call, in finish order."""
        records, self.records = self.records, []
        return records

    def kv_usage(self) -> dict[tuple[str, int], float]:
        """Each replica's KV cache use now (0..1), as vLLM's `kv_cache_usage_perc`."""
        return {(r.pool, r.index): r.engine.kv_usage for r in self.replicas}

    def _schedule_arrival(self) -> None:
        at_s = self.workload.next_arrival_s()
        if at_s < self._arrival_event_s:
            self._arrival_event_s = at_s
            self.queue.push(at_s, EventKind.ARRIVAL, None)

    def _schedule(self, replica: _Replica, at_s: float, kind: EventKind) -> None:
        replica.event_token += 1
        replica.next_event_s = at_s
        self.queue.push(at_s, kind, (replica, replica.event_token))

    def _arrive(self, now: float) -> None:
        self._arrival_event_s = INF
        workload = self.workload
        while workload.next_arrival_s() <= now:
            self._num_arrived += 1
            count = self._num_arrived
            if self.max_requests is not None and (
                count > self.max_requests or count % PROJECT_EVERY == 0
            ):
                self._project(now)
            self._dispatch(workload.pop_arrival(), now)
        self._schedule_arrival()

    def _project(self, now: float) -> None:
        """Stop a run headed past `max_requests` (see `PROJECT_EVERY`)."""
        assert self.max_requests is not None
        sent = self._num_arrived
        projected = sent * self.duration_s / now if now > 0 else INF
        if sent > self.max_requests or projected > 2 * self.max_requests:
            raise TooManyRequestsError(self.max_requests, sent, now, self.duration_s)

    def _horizon_s(self, replica: _Replica) -> float:
        horizon = self._arrival_event_s
        delay = self.workload.reaction_delay_s
        if delay < INF:
            for other in self.replicas:
                if other is not replica and other.next_event_s + delay < horizon:
                    horizon = other.next_event_s + delay
        return horizon

    def _step(self, replica: _Replica, now: float) -> None:
        engine = replica.engine
        end_s = engine.fast_forward_end_s(now)
        if end_s is not None:
            replica.deferred_s = now
            self._schedule(replica, end_s, EventKind.STEP_END)
            return
        self._num_calls += 1
        result = engine.step(now, horizon_s=self._horizon_s(replica))
        if result is None:
            ready = engine.next_ready_s()
            if ready is None:
                replica.next_event_s = INF
                replica.event_token += 1
            else:
                assert ready > now, "the engine left a ready request unscheduled"
                self._schedule(replica, ready, EventKind.STEP)
            return
        replica.result = result
        self._schedule(replica, result.end_s, EventKind.STEP_END)

    def _commit(self, replica: _Replica, horizon_s: float = INF) -> StepResult:
        """Run a deferred jump from its start; the engine stops it early if a request is now
        pending, and before `horizon_s`."""
        start_s = replica.deferred_s
        assert start_s is not None, "only a deferred jump can be committed"
        replica.deferred_s = None
        self._num_calls += 1
        result = replica.engine.step(start_s, horizon_s=horizon_s)
        assert result is not None, "a deferred jump had nothing to run"
        return result

    def _end_step(self, replica: _Replica, now: float) -> None:
        if replica.deferred_s is not None:
            result = self._commit(replica)
            assert result.end_s == now, "a deferred jump ended elsewhere than planned"
        else:
            assert replica.result is not None, "a step ended that never started"
            result = replica.result
            replica.result = None
        policy = self.pools[replica.pool].policy
        if result.batch is not None:
            for request in result.emitted:
                if request.num_output_tokens == 1:
                    policy.on_first_token(request.request_id)
        for request in result.finished:
            self._finish(replica, request)
        self._schedule_arrival()
        if self.queue.peek_time_s() > now:
            # NOTE: the next step would be the very next event popped (nothing else is due at
            # `now`), so it runs at once, without its trip through the queue.
            replica.event_token += 1  # whatever is queued for this replica is stale now
            replica.next_event_s = now
            self._step(replica, now)
        else:
            self._schedule(replica, now, EventKind.STEP)

    # -- requests --------------------------------------------------------------------------

    def _views(self, pool_name: str) -> list[ReplicaView]:
        return [
            ReplicaView(
                r.index,
                r.num_inflight,
                r.engine.num_waiting,
                r.engine.kv_usage,
                r.is_healthy,
                r.count_cached_prefix,
            )
            for r in self.pools[pool_name].replicas
        ]

    def _dispatch(self, work: WorkRequest, now: float) -> None:
        views: dict[str, list[ReplicaView]] = {}

        def views_of(pool_name: str) -> list[ReplicaView]:
            if pool_name not in views:
                views[pool_name] = self._views(pool_name)
            return views[pool_name]

        choice = choose_pool(self.stack, work.model, work.num_prompt_tokens, views_of)
        if choice.pool is None:
            self._fail(work, None, None, choice.reason, f"no pool can serve it: {choice.reason}")
            return
        pool = self.pools[choice.pool]
        view = RequestView(
            work.request_id,
            work.num_prompt_tokens,
            work.prompt_hashes,
            work.session_key,
            work.model,
        )
        decision = pool.policy.choose(view, views_of(choice.pool))
        if decision is None:
            self._fail(work, choice.pool, None, choice.reason, "no healthy replica")
            return
        replica = pool.replicas[decision.replica]
        route = (
            decision.reason if choice.reason == "model" else f"{choice.reason}/{decision.reason}"
        )
        request = Request(
            work.request_id,
            work.num_prompt_tokens,
            work.output_len,
            now,
            block_hashes=work.block_hashes,
            priority=work.priority,
            tag=_InFlight(work, pool, replica, route),
            lora=work.model if work.model in pool.spec.lora_adapters else None,
        )
        reason = replica.engine.add_request(request)
        if reason is not None:
            self._fail(work, choice.pool, decision.replica, route, rejection_message(reason))
            return
        pool.policy.observe(view, decision)
        replica.num_inflight += 1
        if replica.deferred_s is not None:
            # NOTE: a later arrival may reach the scheduler before this one (the API-server
            # delay grows with the prompt), but never sooner than the fixed part after now.
            earliest_ready_s = now + replica.engine.config.request_overhead_s
            replica.result = self._commit(replica, earliest_ready_s)
            self._schedule(replica, replica.result.end_s, EventKind.STEP_END)
        elif replica.result is None:
            # Idle, or waiting for a pending request to become ready: a short prompt that
            # arrives now may be ready before the long one that replica waits for.
            ready = replica.engine.next_ready_s()
            assert ready is not None, "a request was added but nothing is pending"
            if ready < replica.next_event_s:
                self._schedule(replica, ready, EventKind.STEP)

    def _finish(self, replica: _Replica, request: Request) -> None:
        flight = request.tag
        assert isinstance(flight, _InFlight), "every engine request carries its flight"
        replica.num_inflight -= 1
        flight.pool.policy.on_finish(request.request_id)
        work = flight.work
        self.records.append(
            RequestRecord(
                work.request_id,
                replica.pool,
                replica.index,
                flight.route,
                work.arrival_s,
                request.first_token_s,
                request.finish_s,
                work.num_prompt_tokens,
                request.num_output_tokens,
                request.num_cached_tokens,
                work.num_ideal_cached_tokens,
                request.num_preemptions,
                work.session_key,
                None,
                tuple(request.token_runs),
            )
        )
        assert request.finish_s is not None
        self.workload.on_complete(work, request.finish_s)

    def _fail(
        self, work: WorkRequest, pool: str | None, replica: int | None, route: str, error: str
    ) -> None:
        self.records.append(
            RequestRecord(
                work.request_id,
                pool,
                replica,
                route,
                work.arrival_s,
                None,
                None,
                work.num_prompt_tokens,
                0,
                0,
                work.num_ideal_cached_tokens,
                session_key=work.session_key,
                error=error,
            )
        )
        self.workload.on_complete(work, work.arrival_s, ok=False)
        self._schedule_arrival()

    def _result(self) -> FleetResult:
        result = FleetResult(
            records=sorted(self.records, key=lambda r: (r.arrival_s, r.request_id)),
            policies={name: pool.policy.name for name, pool in self.pools.items()},
            replicas={name: pool.spec.replicas for name, pool in self.pools.items()},
            down=dict(self.down),
            num_engine_calls=self._num_calls,
        )
        for replica in self.replicas:
            key = (replica.pool, replica.index)
            engine = replica.engine
            result.timelines[key] = engine.timeline
            result.busy_s[key] = engine.stats.busy_s
            result.num_engine_steps += engine.stats.num_steps
            result.end_s = max(result.end_s, engine.timeline[-1] if engine.timeline else 0.0)
        return result


def _check_down(stack: StackSpec, down: Mapping[str, int]) -> dict[str, int]:
    names = [pool.name for pool in stack.pools]
    out: dict[str, int] = {}
    for name, count in down.items():
        if name not in names:
            raise SpecError(f"down_replicas: {name!r} is not a pool; pools: {names}")
        replicas = stack.pool(name).replicas
        if not 0 <= count <= replicas:
            raise SpecError(
                f"down_replicas: pool {name!r} has {replicas} replicas; {count} cannot be down"
            )
        out[name] = count
    return out


def simulate_stack(
    stack: StackSpec,
    workload: Workload,
    *,
    policy: str | None = None,
    duration_s: float,
    seed: int = 0,
    rate_scale: float = 1.0,
    down_replicas: dict[str, int] | None = None,
    max_requests: int | None = None,
) -> FleetResult:
    """Run `workload` against `stack` for `duration_s` of arrivals (then drain) in virtual time.

    `policy` overrides every pool's routing policy (its stack `params` apply only when the name
    matches); `down_replicas` marks the last N replicas of a pool unhealthy (degraded mode);
    `rate_scale` multiplies the workload's rate (or its sessions / concurrency); a run that
    sends more than `max_requests` requests stops with `TooManyRequestsError`. Deterministic
    for a given seed.
    """
    if not duration_s > 0:
        raise SpecError(f"duration must be positive, got {duration_s}")
    if not rate_scale > 0:
        raise SpecError(f"rate scale must be positive, got {rate_scale}")
    fleet = Fleet(
        stack,
        workload,
        policy=policy,
        duration_s=duration_s,
        seed=seed,
        rate_scale=rate_scale,
        down_replicas=down_replicas or {},
        max_requests=max_requests,
    )
    return fleet.run()
