"""Per-tenant limits by reserve-then-settle: requests and tokens per minute, concurrency and a
daily token budget, checked and charged together at admission, settled at the end.

At admission a request reserves 1 request, `prompt_tokens + max_tokens` tokens and one
concurrency slot, atomically and only if every limit has room for all of it; at the end the
token charge is settled to the engine's real usage (the unused part of `max_tokens` refunded)
and the slot released. So a burst of concurrent requests can never be admitted past a limit on
reservations; the only overshoot comes from a prompt the engine counts longer than the gateway
did, at most one request's difference.

Per-minute limits are token buckets holding at most one minute's allowance and refilling
continuously (`limit / 60` per second), so the allowance is smooth, without window-edge
doubling. The daily budget is a counter per UTC day. Concurrency slots are leases that expire
after `lease_s` (in memory a request always settles, so its lease never outlives it; in Redis
leases are short and renewed while their request runs, `redis_limits`).

`MemoryLimits` keeps the state in this process (one gateway); `inhouse.gateway.redis_limits`
keeps the same state in Redis with Lua scripts so several gateways share exact limits; its
scripts mirror `MemoryLimits.reserve` and `settle` step by step (tests run both alike), and
`inhouse.gateway.limit_failover` states what happens when Redis fails.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from inhouse.spec.gateway import LimitsSpec

SECONDS_PER_DAY = 86400
DEFAULT_LEASE_S = 3600.0


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request was refused: `reason` is the metric label (`rate_limit`, `token_budget`,
    `limits_unavailable`), `retry_after_s` when to try again, `status` the HTTP status (429;
    503 when the limit store cannot be asked)."""

    reason: str
    retry_after_s: float
    message: str
    status: int = 429


@dataclass(frozen=True, slots=True)
class Reservation:
    """What a request holds until it is settled. `is_local`: reserved in this gateway's
    memory while the shared store was down (`on_store_failure: open`)."""

    tenant: str
    request_id: str
    tokens: int
    day: int
    is_local: bool = False


class LimitStore(Protocol):
    async def reserve(
        self, tenant: str, limits: LimitsSpec, request_id: str, tokens: int
    ) -> Reservation | Refusal: ...

    async def settle(self, reservation: Reservation, limits: LimitsSpec, used: int) -> None: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


def refusal(kind: str, wait_s: float, tokens: int, limits: LimitsSpec) -> Refusal:
    """The refusal for limit `kind` (rpm, tpm, concurrency, daily, too_big)."""
    wait_s = max(wait_s, 0.0)
    if kind == "rpm":
        msg = f"Rate limit reached: {limits.rpm} requests per minute for this API key."
        return Refusal("rate_limit", wait_s, f"{msg} Retry after {wait_s:.1f} s.")
    if kind == "tpm":
        msg = f"Rate limit reached: {limits.tpm} tokens per minute for this API key"
        return Refusal(
            "rate_limit", wait_s, f"{msg} (this request reserves {tokens}). Retry later."
        )
    if kind == "too_big":
        return Refusal(
            "rate_limit",
            60.0,
            f"This request reserves {tokens} tokens (prompt + max_tokens), more than the "
            f"{limits.tpm} tokens per minute allowed for this API key; lower max_tokens.",
        )
    if kind == "concurrency":
        return Refusal(
            "rate_limit",
            1.0,
            f"Too many concurrent requests: at most {limits.max_concurrency} for this API key.",
        )
    assert kind == "daily", f"unknown limit kind {kind}"
    return Refusal(
        "token_budget",
        wait_s,
        f"Daily token budget of {limits.daily_tokens} exhausted for this API key (this request "
        f"reserves {tokens}); it renews at 00:00 UTC.",
    )


@dataclass
class _Bucket:
    level: float
    ts: float

    def refill(self, capacity: float, now: float) -> float:
        self.level = min(capacity, self.level + max(now - self.ts, 0.0) * capacity / 60.0)
        self.ts = now
        return self.level


@dataclass
class _TenantState:
    rpm: _Bucket | None = None
    tpm: _Bucket | None = None
    leases: dict[str, float] = field(default_factory=dict)  # request id -> expiry
    daily: dict[int, int] = field(default_factory=dict)  # UTC day -> tokens charged


class MemoryLimits:
    """The limits of one gateway process, in its memory. `clock` gives (monotonic seconds,
    wall-clock seconds); tests pass their own."""

    def __init__(
        self,
        clock: Callable[[], tuple[float, float]] | None = None,
        lease_s: float = DEFAULT_LEASE_S,
    ) -> None:
        self._clock = clock or (lambda: (time.monotonic(), time.time()))
        self._lease_s = lease_s
        self._tenants: dict[str, _TenantState] = {}

    async def reserve(
        self, tenant: str, limits: LimitsSpec, request_id: str, tokens: int
    ) -> Reservation | Refusal:
        now, wall = self._clock()
        day = int(wall // SECONDS_PER_DAY)
        state = self._tenants.setdefault(tenant, _TenantState())
        if limits.rpm is not None:
            state.rpm = state.rpm or _Bucket(limits.rpm, now)
            level = state.rpm.refill(limits.rpm, now)
            if level < 1:
                return refusal("rpm", (1 - level) * 60.0 / limits.rpm, tokens, limits)
        if limits.tpm is not None:
            if tokens > limits.tpm:
                return refusal("too_big", 60.0, tokens, limits)
            state.tpm = state.tpm or _Bucket(limits.tpm, now)
            level = state.tpm.refill(limits.tpm, now)
            if level < tokens:
                return refusal("tpm", (tokens - level) * 60.0 / limits.tpm, tokens, limits)
        if limits.max_concurrency is not None:
            leases = state.leases
            for rid in [r for r, expiry in leases.items() if expiry <= now]:
                del leases[rid]
            if len(leases) >= limits.max_concurrency:
                return refusal("concurrency", 1.0, tokens, limits)
        if limits.daily_tokens is not None:
            used = state.daily.get(day, 0)
            if used + tokens > limits.daily_tokens:
                wait = (day + 1) * SECONDS_PER_DAY - wall
                return refusal("daily", wait, tokens, limits)
        # Every limit has room: charge them all.
        if state.rpm is not None and limits.rpm is not None:
            state.rpm.level -= 1
        if state.tpm is not None and limits.tpm is not None:
            state.tpm.level -= tokens
        if limits.max_concurrency is not None:
            state.leases[request_id] = now + self._lease_s
        if limits.daily_tokens is not None:
            for old in [d for d in state.daily if d < day - 1]:
                del state.daily[old]
            state.daily[day] = state.daily.get(day, 0) + tokens
        return Reservation(tenant, request_id, tokens, day)

    async def settle(self, reservation: Reservation, limits: LimitsSpec, used: int) -> None:
        state = self._tenants.get(reservation.tenant)
        if state is None:
            return
        now, _ = self._clock()
        delta = reservation.tokens - used  # > 0: refund what was not used
        if state.tpm is not None and limits.tpm is not None:
            state.tpm.refill(limits.tpm, now)
            state.tpm.level = min(float(limits.tpm), state.tpm.level + delta)
        if reservation.day in state.daily:
            state.daily[reservation.day] -= delta
        state.leases.pop(reservation.request_id, None)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def seed_daily(self, tenant: str, day: int, used: int) -> None:
        """Start a tenant's count for `day` at `used` unless it has one (what the shared store
        last said, when this memory stands in for it)."""
        state = self._tenants.setdefault(tenant, _TenantState())
        state.daily.setdefault(day, used)

    def seed_leases(self, tenant: str, request_ids: Iterable[str]) -> None:
        """Count requests admitted elsewhere (through the shared store) and still running
        against this tenant's concurrency here, until `release_lease`."""
        state = self._tenants.setdefault(tenant, _TenantState())
        expiry = self._clock()[0] + self._lease_s
        for request_id in request_ids:
            state.leases.setdefault(request_id, expiry)

    def release_lease(self, tenant: str, request_id: str) -> None:
        state = self._tenants.get(tenant)
        if state is not None:
            state.leases.pop(request_id, None)

    def daily_used(self, tenant: str, day: int) -> int:
        state = self._tenants.get(tenant)
        return 0 if state is None else state.daily.get(day, 0)
