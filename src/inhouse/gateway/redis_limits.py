"""The limits of `inhouse.gateway.limits` in Redis, shared exactly by several gateways.

Each admission is one `EVALSHA` of a Lua script that checks every limit and charges them all
or none (Redis runs a script atomically), using Redis's own clock (`TIME`), so gateways with
skewed clocks still agree. Settling is a second script. Keys, per tenant (the `{tenant}` hash
tag keeps them on one slot): `ih:gw:{T}:rpm` and `:tpm` (buckets: level, ts), `:conc` (sorted
set of request ids by lease expiry), `:day:<n>` (tokens charged on UTC day n, expiring after
two days). A single Redis (or a primary); not Redis Cluster's cross-slot mode.
"""

from __future__ import annotations

from typing import Any

from inhouse.gateway.limits import Refusal, Reservation, refusal
from inhouse.spec.gateway import LimitsSpec

# ARGV: request_id, tokens, rpm, tpm, max_concurrency, daily_tokens, lease_s (0 = unlimited)
# Returns {0, day} when reserved, or {1, kind, wait_ms} when refused.
RESERVE = """
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
if daily > 0 then
  local used = tonumber(redis.call('GET', day_key) or '0')
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
  redis.call('INCRBY', day_key, tokens)
  redis.call('EXPIRE', day_key, 172800)
end
return {0, day}
"""

# ARGV: request_id, reserved tokens, used tokens, tpm, day
SETTLE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local delta = tonumber(ARGV[2]) - tonumber(ARGV[3])
local tpm = tonumber(ARGV[4])
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
local day_key = KEYS[4] .. ':' .. ARGV[5]
if redis.call('EXISTS', day_key) == 1 then redis.call('DECRBY', day_key, delta) end
redis.call('ZREM', KEYS[3], ARGV[1])
return 0
"""


def _keys(tenant: str) -> list[str]:
    base = f"ih:gw:{{{tenant}}}"
    return [f"{base}:rpm", f"{base}:tpm", f"{base}:conc", f"{base}:day"]


class RedisLimits:
    """`LimitStore` over Redis (redis-py's asyncio client, one connection pool)."""

    def __init__(self, url: str, lease_s: float = 3600.0) -> None:
        import redis.asyncio as aioredis  # imported here: only gateways with redis_url need it

        self._redis: Any = aioredis.from_url(url, decode_responses=True)
        self._lease_s = lease_s
        self._reserve = self._redis.register_script(RESERVE)
        self._settle = self._redis.register_script(SETTLE)

    async def ping(self) -> None:
        await self._redis.ping()

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
            self._lease_s,
        ]
        result = await self._reserve(keys=_keys(tenant), args=args)
        if int(result[0]) == 0:
            return Reservation(tenant, request_id, tokens, int(result[1]))
        return refusal(str(result[1]), int(result[2]) / 1000.0, tokens, limits)

    async def settle(self, reservation: Reservation, limits: LimitsSpec, used: int) -> None:
        args: list[str | int | float] = [
            reservation.request_id,
            reservation.tokens,
            used,
            limits.tpm or 0,
            reservation.day,
        ]
        await self._settle(keys=_keys(reservation.tenant), args=args)

    async def daily_used(self, tenant: str, day: int) -> int:
        value = await self._redis.get(f"{_keys(tenant)[3]}:{day}")
        return int(value or 0)

    async def reset(self, tenant: str) -> None:
        """Forget a tenant's state (tests)."""
        keys = _keys(tenant)
        extra = [k async for k in self._redis.scan_iter(match=f"{keys[3]}:*")]
        await self._redis.delete(*keys[:3], *extra)

    async def close(self) -> None:
        await self._redis.aclose()
