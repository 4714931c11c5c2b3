"""The shared limit store with a stated behaviour when it fails (`gateway.limits`).

Every call to Redis has `store_timeout_s`. One that fails, or does not answer in time, marks
the store down; while it is down no request waits on it: a background task asks it `PING`
every `PROBE_S` and marks it up on the first answer. Meanwhile a tenant with limits gets:

* `on_store_failure: closed` (the default): 503 with `Retry-After` (`limits_unavailable`):
  no request passes a limit nobody can check;
* `open`: admitted against the same limits counted in this gateway's memory (today's tokens
  starting from what Redis last reported plus what was counted here since, so a Redis that
  flaps gives no tokens twice; requests admitted through Redis and still running hold their
  slots here); what those requests used is added to Redis's counts
  (`RedisLimits.reconcile`) once it answers. Each gateway counts alone, so N gateways
  may admit up to N times a limit while Redis is down. The UTC day counted here is Redis's
  (its `TIME`, as last measured from this host: `RedisLimits.ping`), never this host's, so
  a gateway whose clock is on the other side of midnight neither starts a day's budget early
  nor gives yesterday's unspent budget again.

When Redis answers again, and before it admits anyone for this gateway, every request this
gateway holds that still runs is leased its slot in Redis (`RedisLimits.hold`): those admitted
here, which Redis never knew (their reconcile frees it), and those admitted through Redis,
whose leases may have lapsed unrenewed. So a tenant never gets max_concurrency in Redis beside
the requests still running from the outage.

Nothing is lost in the meantime: settles that could not be sent, and cancels of reserves whose
answer never came (Redis stalled; the client left while it waited), wait in a backlog that is
sent, in order, as soon as the store answers; both are idempotent (`redis_limits`). Leases are
renewed every third of `lease_s` while their requests run. So within `lease_s` (30 s) of Redis
answering again, plus a probe period, a tenant's limits are whole again: every slot held by a
request that ended is back, every token it did not use refunded.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from inhouse.gateway.limits import MemoryLimits, Refusal, Reservation
from inhouse.gateway.redis_limits import RedisLimits, held_member
from inhouse.spec.gateway import LimitsSpec, LimitStoreSpec

log = logging.getLogger("inhouse.gateway")

PROBE_S = 1.0
MAX_BACKLOG = 100_000
STORE_ERRORS = (RedisError, OSError, TimeoutError)

Call = Callable[[], Awaitable[object]]


class FailoverLimits:
    """`LimitStore` over `RedisLimits`, with `spec.on_store_failure` when Redis fails."""

    def __init__(self, shared: RedisLimits, spec: LimitStoreSpec, lease_s: float) -> None:
        self.shared = shared
        self.spec = spec
        self._local_lease_s = lease_s
        self.local = self._new_local()
        # Requests admitted here (the store was down) with a concurrency limit, still running:
        # tenant -> request ids. Redis leases them their slots once it answers (`_hold_here`).
        self._held_here: dict[str, dict[str, None]] = {}
        self.is_up = True
        self.num_errors = 0
        self.num_dropped = 0
        self._backlog: collections.deque[Call] = collections.deque()
        self._task: asyncio.Task[None] | None = None
        self._next_renew = 0.0

    def _new_local(self) -> MemoryLimits:
        """A count in this gateway's memory whose UTC day is Redis's (its clock, as last
        measured), so falling back and back again never moves a day's boundary."""
        return MemoryLimits(
            clock=lambda: (time.monotonic(), self.shared.now()), lease_s=self._local_lease_s
        )

    async def start(self) -> None:
        try:
            await self._call(self.shared.ping())
        except STORE_ERRORS as exc:
            self._failed("ping", exc)
        self._next_renew = time.monotonic() + self.shared.lease_s / 3
        self._task = asyncio.get_running_loop().create_task(self._maintain())

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._backlog:
            log.warning("limit store: %d settle(s) not sent at shutdown", len(self._backlog))
        await self.shared.close()

    async def _call(self, call: Awaitable[object]) -> object:
        # NOTE: bounded by redis-py itself (each connect and read by store_timeout_s, a wait
        # for a pooled connection by 5 of them), not by cancelling it from outside: a call
        # cancelled mid-way leaves redis-py's pool to clean up after it, which is best left to
        # the one case nothing else can do (the client left).
        return await call

    def _failed(self, what: str, exc: BaseException) -> None:
        self.num_errors += 1
        if self.is_up:
            self.is_up = False
            detail = (
                f"no answer in {self.spec.store_timeout_s:g} s"
                if isinstance(exc, TimeoutError)
                else f"{type(exc).__name__}: {exc}"
            )
            log.error(
                "limit store down (%s: %s); limited tenants are %s until it answers",
                what,
                detail,
                "refused (503)" if self.spec.on_store_failure == "closed" else "counted here",
            )

    def _later(self, call: Call) -> None:
        if len(self._backlog) >= MAX_BACKLOG:
            self._backlog.popleft()
            self.num_dropped += 1
        self._backlog.append(call)

    # -- LimitStore -----------------------------------------------------------------------

    async def reserve(
        self, tenant: str, limits: LimitsSpec, request_id: str, tokens: int
    ) -> Reservation | Refusal:
        if self.is_up:
            try:
                result = await self._call(self.shared.reserve(tenant, limits, request_id, tokens))
            except STORE_ERRORS as exc:
                self._failed("reserve", exc)
                self._later(lambda: self.shared.cancel(tenant, request_id, limits))
            except asyncio.CancelledError:  # the client left: the reserve may still have run
                self._later(lambda: self.shared.cancel(tenant, request_id, limits))
                raise
            else:
                assert isinstance(result, Reservation | Refusal), result
                return result
        return await self._while_down(tenant, limits, request_id, tokens)

    async def _while_down(
        self, tenant: str, limits: LimitsSpec, request_id: str, tokens: int
    ) -> Reservation | Refusal:
        if self.spec.on_store_failure == "closed":
            return Refusal(
                "limits_unavailable",
                self.spec.retry_after_s,
                "The gateway cannot check this API key's limits right now (its limit store "
                "does not answer). Please retry shortly.",
                status=503,
            )
        seen = self.shared.daily_seen.get(tenant)
        if seen is not None:
            self.local.seed_daily(tenant, *seen)
        held = self.shared.leases.get(tenant)
        if held:  # admitted through Redis before it failed, still running: slots taken
            self.local.seed_leases(tenant, held)
        result = await self.local.reserve(tenant, limits, request_id, tokens)
        if isinstance(result, Reservation):
            if limits.daily_tokens is not None:
                self._count_seen(tenant, result.day, tokens)
            if limits.max_concurrency is not None:
                self._held_here.setdefault(tenant, {})[request_id] = None
            return dataclasses.replace(result, is_local=True)
        return result

    def _count_seen(self, tenant: str, day: int, tokens: int) -> None:
        """Add what this gateway counts here to the last count Redis reported, as Redis will
        have it once the backlog's reconciles are sent: an outage that starts before this
        tenant asks Redis again (Redis flaps) starts from it, not from the count before the
        last outage (which gave the tenant that outage's tokens a second time)."""
        seen = self.shared.daily_seen.get(tenant)
        if seen is None or seen[0] < day:
            self.shared.daily_seen[tenant] = (day, max(tokens, 0))
        elif seen[0] == day:
            self.shared.daily_seen[tenant] = (day, max(seen[1] + tokens, 0))

    async def settle(self, reservation: Reservation, limits: LimitsSpec, used: int) -> None:
        if reservation.is_local:
            await self.local.settle(reservation, limits, used)
            tenant, day, rid = reservation.tenant, reservation.day, reservation.request_id
            if limits.daily_tokens is not None:
                self._count_seen(tenant, day, used - reservation.tokens)
            self._release_held_here(tenant, rid)
            self._later(lambda: self.shared.reconcile(tenant, limits, day, used, rid))
            return
        if self.is_up:
            try:
                await self._call(self.shared.settle(reservation, limits, used))
                return
            except STORE_ERRORS as exc:
                self._failed("settle", exc)
        self.shared.forget_lease(reservation.tenant, reservation.request_id)
        self.local.release_lease(reservation.tenant, reservation.request_id)
        self._later(lambda: self.shared.settle(reservation, limits, used))

    def _release_held_here(self, tenant: str, request_id: str) -> None:
        """A request admitted here ended: its slot is free here, and its lease in Redis (if
        `_hold_here` gave it one) is no longer renewed; its reconcile frees it there."""
        held = self._held_here.get(tenant)
        if held is not None:
            held.pop(request_id, None)
            if not held:
                del self._held_here[tenant]
        member = held_member(request_id)
        self.shared.forget_lease(tenant, member)
        self.local.release_lease(tenant, member)  # seeded here in a later outage

    async def _hold_here(self) -> None:
        """Lease, in Redis, the slot of every request this gateway holds that still runs,
        before Redis admits anyone again: those admitted here (Redis never knew them) and
        those admitted through Redis (their leases may have expired while nobody could renew
        them). Else a tenant would get its max_concurrency there beside them. Requests
        admitted here while this waits are leased on the next round."""
        done: set[tuple[str, str]] = set()
        while True:
            pending: dict[str, list[str]] = {}
            for tenant, held in self._held_here.items():
                for rid in held:
                    if (tenant, held_member(rid)) not in done:
                        pending.setdefault(tenant, []).append(held_member(rid))
            for tenant, leases in self.shared.leases.items():
                for member in leases:
                    if (tenant, member) not in done and member not in pending.get(tenant, ()):
                        pending.setdefault(tenant, []).append(member)
            if not pending:
                return
            for tenant, members in pending.items():
                await self._call(self.shared.hold(tenant, members))
                done.update((tenant, member) for member in members)
                still = {held_member(rid) for rid in self._held_here.get(tenant, ())}
                for member in members:  # renewed from now on, unless it ended meanwhile
                    if member in still:
                        self.shared.leases.setdefault(tenant, {})[member] = None

    # -- in the background ------------------------------------------------------------------

    async def _maintain(self) -> None:
        while True:
            await asyncio.sleep(PROBE_S)
            with contextlib.suppress(*STORE_ERRORS):
                await self.maintain_once()

    async def maintain_once(self) -> None:
        """Probe a store that is down; send the backlog; renew leases when due."""
        if not self.is_up:
            try:
                await self._call(self.shared.ping())
                await self._hold_here()
            except STORE_ERRORS:
                return
            self.is_up = True
            self.local = self._new_local()  # a fresh count next time
            log.warning("limit store answers again; %d call(s) to catch up", len(self._backlog))
        while self._backlog:
            try:
                await self._call(self._backlog[0]())
            except STORE_ERRORS as exc:
                self._failed("catching up", exc)
                return
            self._backlog.popleft()
        if time.monotonic() >= self._next_renew:
            try:
                await self._call(self.shared.ping())  # Redis's clock, measured again
                await self._call(self.shared.renew())
            except STORE_ERRORS as exc:
                self._failed("renew", exc)
                return
            self._next_renew = time.monotonic() + self.shared.lease_s / 3

    @property
    def backlog(self) -> int:
        return len(self._backlog)
