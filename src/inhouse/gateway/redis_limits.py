"""The limits of `inhouse.gateway.limits` in Redis, shared exactly by several gateways.

Each admission is one `EVALSHA` of a Lua script that checks every limit and charges them all
or none (Redis runs a script atomically), using Redis's own clock (`TIME`), so gateways with
skewed clocks still agree. Keys, per tenant (the `{tenant}` hash tag keeps them on one slot):
`ih:gw:{T}:rpm` and `:tpm` (buckets: level, ts), `:conc` (sorted set of request ids, and
`held:<id>` for requests a gateway admitted in its memory while Redis was down, by lease
expiry), `:day:<n>` (tokens charged on UTC day n, expiring after two days), and per request
`:r:<id>` (what it reserved, until settled) and `:x:<id>` (a tombstone, below). A single Redis
(or a primary); not Redis Cluster's cross-slot mode.

Made to be retried (`inhouse.gateway.limit_failover` does):

* settling reads what was reserved from the request's record and deletes it in the same
  script, so a settle sent twice (the first answer lost) settles once;
* `cancel` settles a reservation whose answer never came (Redis stalled; the client left) as
  unused, and when the reserve has not run (yet) leaves a tombstone that makes it a no-op when
  it does run: a reserve that ran late never holds a lease or tokens for nobody;
* concurrency leases last `lease_s` and `renew` extends those this gateway still holds
  (`ZADD XX`: a settled lease is never brought back), so a gateway that dies, or a lease
  nobody settles, frees its slot within `lease_s`.

This class is the mechanics: every call raises what redis-py raises; it starts no task.
"""

from __future__ import annotations

import time
from typing import Any

from inhouse.gateway.limits import Refusal, Reservation, refusal
from inhouse.spec.gateway import LimitsSpec

# KEYS: rpm, tpm, conc, day base, record, tombstone
# ARGV: request_id, tokens, rpm, tpm, max_concurrency, daily_tokens, lease_s, record_ttl_s
# Returns {0, day, tokens used today} reserved; {1, kind, wait_ms} refused; {2} cancelled.
RESERVE = """
if redis.call('EXISTS', KEYS[6]) == 1 then return {2} end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local day = math.floor(now / 86400)
local rid, tokens = ARGV[1], tonumber(ARGV[2])
local rpm, tpm = tonumber(ARGV[3]), tonumber(ARGV[4])
local conc, daily, lease = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local function refill(key, cap)
  local v = redis.call('HMGET', key, 'level', 'ts')
  local level = tonumber(v[1]) or cap
  local ts = tonumber(v[2]) or now
  local dt = now - ts
  if dt < 0 then dt = 0 end
  return math.min(cap, level + dt * cap / 60)
end
local rpm_level, tpm_level
if rpm > 0 then
  rpm_level = refill(KEYS[1], rpm)
  if rpm_level < 1 then return {1, 'rpm', math.ceil((1 - rpm_level) * 60000 / rpm)} end
end
if tpm > 0 then
  if tokens > tpm then return {1, 'too_big', 60000} end
  tpm_level = refill(KEYS[2], tpm)
  if tpm_level < tokens then
    return {1, 'tpm', math.ceil((tokens - tpm_level) * 60000 / tpm)}
  end
end
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZCARD', KEYS[3]) >= conc then return {1, 'concurrency', 1000} end
end
local day_key = KEYS[4] .. ':' .. day
local used = 0
if daily > 0 then
  used = tonumber(redis.call('GET', day_key) or '0')
  if used + tokens > daily then
    return {1, 'daily', math.ceil(((day + 1) * 86400 - now) * 1000)}
  end
end
if rpm > 0 then
  redis.call('HSET', KEYS[1], 'level', tostring(rpm_level - 1), 'ts', tostring(now))
  redis.call('EXPIRE', KEYS[1], 120)
end
if tpm > 0 then
  redis.call('HSET', KEYS[2], 'level', tostring(tpm_level - tokens), 'ts', tostring(now))
  redis.call('EXPIRE', KEYS[2], 120)
end
if conc > 0 then
  redis.call('ZADD', KEYS[3], now + lease, rid)
  redis.call('EXPIRE', KEYS[3], math.ceil(lease) + 60)
end
if daily > 0 then
  used = redis.call('INCRBY', day_key, tokens)
  redis.call('EXPIRE', day_key, 172800)
end
redis.call('HSET', KEYS[5], 't', tokens, 'd', day)
redis.call('EXPIRE', KEYS[5], tonumber(ARGV[8]))
return {0, day, used}
"""

# KEYS as RESERVE's. ARGV: request_id, used tokens, tpm, tombstone_ttl_s (0: a plain settle)
# Returns 1 when it settled the reservation, 0 when there was none (settled already; or, with
# a tombstone TTL, not reserved yet: the tombstone now stops that reserve).
SETTLE = """
local rec = redis.call('HMGET', KEYS[5], 't', 'd')
if not rec[1] then
  local ttl = tonumber(ARGV[4])
  if ttl > 0 then redis.call('SET', KEYS[6], '1', 'EX', ttl) end
  return 0
end
redis.call('DEL', KEYS[5])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local delta = tonumber(rec[1]) - tonumber(ARGV[2])
local tpm = tonumber(ARGV[3])
if tpm > 0 and redis.call('EXISTS', KEYS[2]) == 1 then
  local v = redis.call('HMGET', KEYS[2], 'level', 'ts')
  local level = tonumber(v[1]) or tpm
  local dt = now - (tonumber(v[2]) or now)
  if dt < 0 then dt = 0 end
  level = math.min(tpm, level + dt * tpm / 60)
  level = math.min(tpm, level + delta)
  redis.call('HSET', KEYS[2], 'level', tostring(level), 'ts', tostring(now))
  redis.call('EXPIRE', KEYS[2], 120)
end
local day_key = KEYS[4] .. ':' .. rec[2]
if redis.call('EXISTS', day_key) == 1 then redis.call('DECRBY', day_key, delta) end
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
"""

# KEYS: conc. ARGV: lease_s, a ZADD flag, members. 'XX' renews: extends only the leases that
# still exist (a settled one never comes back). 'CH' (a flag that changes only ZADD's reply)
# holds: leases again, whatever the limit, requests that hold their slots already.
LEASE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local lease, mode = tonumber(ARGV[1]), ARGV[2]
for i = 3, #ARGV do redis.call('ZADD', KEYS[1], mode, now + lease, ARGV[i]) end
redis.call('EXPIRE', KEYS[1], math.ceil(lease) + 60)
return 0
"""

# KEYS: tpm, day base, conc. ARGV: tpm, day, tokens, member. Charges what a request used while
# counted in a gateway's memory (the store was down), as if Redis had counted it, and frees the
# lease `hold` gave it (if it had one).
RECONCILE = """
local tokens = tonumber(ARGV[3])
redis.call('ZREM', KEYS[3], ARGV[4])
local day_key = KEYS[2] .. ':' .. ARGV[2]
redis.call('INCRBY', day_key, tokens)
redis.call('EXPIRE', day_key, 172800)
local tpm = tonumber(ARGV[1])
if tpm > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
  local v = redis.call('HMGET', KEYS[1], 'level', 'ts')
  local level = tonumber(v[1]) or tpm
  local dt = now - (tonumber(v[2]) or now)
  if dt < 0 then dt = 0 end
  level = math.min(tpm, level + dt * tpm / 60) - tokens
  redis.call('HSET', KEYS[1], 'level', tostring(level), 'ts', tostring(now))
  redis.call('EXPIRE', KEYS[1], 120)
end
return 0
"""

MAX_CONNECTIONS = 64
POOL_WAIT_FACTOR = 5  # a call may wait this many `timeout_s` for a free connection
TOMBSTONE_S = 3600  # longer than any stall after which a queued reserve could still run


def held_member(request_id: str) -> str:
    """The concurrency lease of a request admitted in a gateway's memory (`hold`): a member of
    its own, so a late reserve of the same id, and its cancel, never touch it."""
    return f"held:{request_id}"


def _keys(tenant: str, request_id: str = "") -> list[str]:
    base = f"ih:gw:{{{tenant}}}"
    return [
        f"{base}:rpm",
        f"{base}:tpm",
        f"{base}:conc",
        f"{base}:day",
        f"{base}:r:{request_id}",
        f"{base}:x:{request_id}",
    ]


class RedisLimits:
    """`LimitStore` mechanics over Redis (redis-py's asyncio client, one connection pool)."""

    def __init__(
        self,
        url: str,
        lease_s: float = 30.0,
        timeout_s: float = 1.0,
        record_ttl_s: float = 3660.0,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        import redis.asyncio as aioredis  # imported here: only gateways with redis_url need it
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        # NOTE: each read and connect is bounded by `timeout_s` (a Redis that stops answering
        # fails fast), while a call waiting for one of the pool's connections (a burst) waits
        # longer: a busy gateway is not a failed store.
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            decode_responses=True,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),  # the failover decides about retries, not redis-py
            max_connections=max_connections,
            timeout=POOL_WAIT_FACTOR * timeout_s,
        )
        self._redis: Any = aioredis.Redis(connection_pool=pool)
        self.lease_s = lease_s
        self._record_ttl_s = int(record_ttl_s)
        self._reserve = self._redis.register_script(RESERVE)
        self._settle = self._redis.register_script(SETTLE)
        self._lease = self._redis.register_script(LEASE)
        self._reconcile = self._redis.register_script(RECONCILE)
        # Leases this gateway holds (renewed until settled): tenant -> request ids.
        self.leases: dict[str, dict[str, None]] = {}
        # The last count of today's tokens Redis reported, per tenant: (day, tokens).
        self.daily_seen: dict[str, tuple[int, int]] = {}
        # Redis's clock less this host's, as last measured (`ping`): the day a gateway counts
        # on while Redis is down is Redis's day, so a fallback never moves a day's boundary.
        self.clock_offset_s = 0.0

    async def ping(self) -> None:
        """Ask Redis the time (an answer is a PING's), and keep how far its clock is from
        this host's."""
        before = time.time()
        seconds, micros = await self._redis.time()
        after = time.time()
        self.clock_offset_s = seconds + micros / 1e6 - (before + after) / 2

    def now(self) -> float:
        """Redis's clock, read on this host's: what a UTC day is, here as in the scripts."""
        return time.time() + self.clock_offset_s

    async def reserve(
        self, tenant: str, limits: LimitsSpec, request_id: str, tokens: int
    ) -> Reservation | Refusal:
        args: list[str | int | float] = [
            request_id,
            tokens,
            limits.rpm or 0,
            limits.tpm or 0,
            limits.max_concurrency or 0,
            limits.daily_tokens or 0,
            self.lease_s,
            self._record_ttl_s,
        ]
        result = await self._reserve(keys=_keys(tenant, request_id), args=args)
        code = int(result[0])
        if code == 0:
            day = int(result[1])
            if limits.daily_tokens is not None:
                self.daily_seen[tenant] = (day, int(result[2]))
            if limits.max_concurrency is not None:
                self.leases.setdefault(tenant, {})[request_id] = None
            return Reservation(tenant, request_id, tokens, day)
        if code == 2:  # cancelled before it ran: no answer anyone waits for
            return refusal("concurrency", 1.0, tokens, limits)
        return refusal(str(result[1]), int(result[2]) / 1000.0, tokens, limits)

    def forget_lease(self, tenant: str, request_id: str) -> None:
        """Stop renewing a request's lease (it is being settled or cancelled)."""
        held = self.leases.get(tenant)
        if held is not None:
            held.pop(request_id, None)
            if not held:
                del self.leases[tenant]

    async def settle(self, reservation: Reservation, limits: LimitsSpec, used: int) -> None:
        self.forget_lease(reservation.tenant, reservation.request_id)
        args: list[str | int] = [reservation.request_id, used, limits.tpm or 0, 0]
        await self._settle(keys=_keys(reservation.tenant, reservation.request_id), args=args)

    async def cancel(self, tenant: str, request_id: str, limits: LimitsSpec) -> None:
        """Undo a reserve whose answer never came, whether it ran already or runs later."""
        self.forget_lease(tenant, request_id)
        args: list[str | int] = [request_id, 0, limits.tpm or 0, TOMBSTONE_S]
        await self._settle(keys=_keys(tenant, request_id), args=args)

    async def renew(self) -> int:
        """Extend every lease this gateway holds (one script per tenant, one round trip)."""
        if not self.leases:
            return 0
        num = 0
        async with self._redis.pipeline(transaction=False) as pipe:
            for tenant, held in self.leases.items():
                ids = list(held)
                num += len(ids)
                args: list[str | float] = [self.lease_s, "XX", *ids]
                await self._lease(keys=[_keys(tenant)[2]], args=args, client=pipe)
            await pipe.execute()
        return num

    async def hold(self, tenant: str, members: list[str]) -> None:
        """Lease (again) the slots of requests this gateway holds that still run, after the
        store was down: `held_member`s (admitted in its memory, freed by their `reconcile`)
        and request ids (admitted here, freed by their settle). The caller keeps `leases`."""
        await self._lease(keys=[_keys(tenant)[2]], args=[self.lease_s, "CH", *members])

    async def reconcile(
        self, tenant: str, limits: LimitsSpec, day: int, tokens: int, request_id: str
    ) -> None:
        """Charge what a request admitted in this gateway's memory used, and free the slot
        `hold` leased it (if any)."""
        keys = _keys(tenant)
        args: list[str | int] = [limits.tpm or 0, day, tokens, held_member(request_id)]
        await self._reconcile(keys=[keys[1], keys[3], keys[2]], args=args)

    async def daily_used(self, tenant: str, day: int) -> int:
        value = await self._redis.get(f"{_keys(tenant)[3]}:{day}")
        return int(value or 0)

    async def num_leases(self, tenant: str) -> int:
        """Concurrency leases held in Redis for a tenant, expired ones not counted."""
        now = float((await self._redis.time())[0])
        count: int = await self._redis.zcount(_keys(tenant)[2], now, "+inf")
        return count

    async def reset(self, tenant: str) -> None:
        """Forget a tenant's state (tests)."""
        keys = _keys(tenant)
        base = keys[3].rsplit(":", 1)[0]
        extra = [k async for k in self._redis.scan_iter(match=f"{base}:*")]
        await self._redis.delete(*keys[:4], *extra)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        await self._redis.aclose()
        await self._redis.connection_pool.disconnect()
