"""What a routing policy sees and what it answers: small immutable snapshots.

The fleet simulator builds these from its engines in virtual time; the live gateway builds them
from its own in-flight counts and scraped engine metrics. The policy code is the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """One replica of a pool at the moment of a decision.

    * `index`: the replica's position in its pool, `0 .. num_replicas-1`, stable over time.
    * `num_inflight`: requests this router dispatched there that have not finished (its own
      count, updated at dispatch: never a scraped, stale figure).
    * `num_waiting`: requests queued in the engine (vLLM's `num_requests_waiting`).
    * `kv_usage`: fraction of KV blocks held by running requests (`kv_cache_usage_perc`).
    * `is_healthy`: false for a replica that is down, loading or circuit-broken.
    * `count_cached_prefix`: for the `oracle` policy only — how many leading blocks of a hash
      list the engine really holds. None in production.
    """

    index: int
    num_inflight: int = 0
    num_waiting: int = 0
    kv_usage: float = 0.0
    is_healthy: bool = True
    count_cached_prefix: Callable[[Sequence[int]], int] | None = None


@dataclass(frozen=True, slots=True)
class RequestView:
    """The request as the router knows it before dispatch.

    `block_hashes` are the chained hashes (`inhouse.hashing`) of the prompt's full blocks, at
    the pool's block size; `session_key` is the client's session or conversation id, if any.
    """

    request_id: str
    num_prompt_tokens: int
    block_hashes: Sequence[int] = ()
    session_key: str | None = None
    model: str | None = None


@dataclass(frozen=True, slots=True)
class Decision:
    """The replica chosen, why, and the policy's estimate of its cached prefix in blocks."""

    replica: int
    reason: str
    num_matched_blocks: int = 0
