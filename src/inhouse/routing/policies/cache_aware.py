"""Policy `cache_aware`: an approximate prefix index per replica, plus load.

Both rank replicas by the prefill work a request would cost there, in tokens:

    cost(r) = prefix_weight * uncached_tokens(r) + load_weight * load_tokens(r)

`uncached_tokens(r)` is the prompt minus the prefix replica *r* is believed to hold;
`load_tokens(r)` is the prefill this router dispatched to *r* whose first token has not come back,
plus `request_cost_tokens` per in-flight request (decodes slow every step down). As scorers in
0..1 this is a *prefix* scorer, the tokens *r* would save over the replica holding the least, and
a *load* scorer, one minus the load, both over one shared scale so their weighted sum ranks
replicas exactly by `-cost`.

Why this resists the failure modes reported against other routers
(`shared/reference/routers.md`):

* A shared system prompt cannot pin traffic: only the prefix *beyond* what every candidate holds
  scores, so once the prompt is everywhere it counts for nothing; until then the
  bounded-load filter (below) spreads sessions anyway.
* Identical-prefix bursts spread: every dispatch adds its prefill to the chosen replica's load at
  once (in `observe`, before the next decision), and the bounded-load filter caps any replica at
  `max(load_factor * mean, mean + load_slack)` in-flight requests.
* Index memory is capped (`PrefixIndex`), LRU.
* Load is the router's own in-flight accounting, never a stale scrape.
"""

from __future__ import annotations

from collections.abc import Sequence

from inhouse.routing.filters.kv_ceiling import keep_kv_below
from inhouse.routing.filters.load_ceiling import keep_under_load_ceiling
from inhouse.routing.framework import Policy, PolicyContext
from inhouse.routing.index import PrefixIndex
from inhouse.routing.scorers.load import pending_load_score
from inhouse.routing.scorers.prefill import PrefillEstimate, estimate_prefill
from inhouse.routing.scorers.prefix import prefix_score
from inhouse.routing.view import Decision, ReplicaView, RequestView


class CacheAware(Policy):
    """`cache_aware`: the replica where the request costs the least prefill work, among those
    under a load ceiling and with KV room.

    Per request: (1) drop unhealthy replicas; (2) *bounded load*: keep replicas whose in-flight
    count after this dispatch stays within `max(load_factor * mean, mean + load_slack)`;
    (3) drop replicas at or above `kv_ceiling` KV usage unless all are; (4) look up the prompt's
    block hashes in each candidate's prefix index (binary search over the chained hashes);
    (5) score prefix and load as in the module docstring and take the best, ties rotating.
    `observe` inserts the prompt's blocks into the chosen replica's index and adds its uncached
    tokens to that replica's pending prefill; `on_first_token` removes them.

    Parameters:

    * `prefix_weight` (2.0): weight of a token of prefill saved by a cached prefix. Above the
      load weight because a recomputed prefix costs twice: this request's TTFT and the
      replica's capacity for everyone queued behind it.
    * `load_weight` (1.0): weight of a token of prefill already pending on the replica. Raise
      it to favour balance over cache reuse.
    * `request_cost_tokens` (1024): prefill-token equivalent of one in-flight request in the
      load (decodes slow every step; a burst of short requests is load too).
    * `load_factor` (1.3) and `load_slack` (3): the bounded-load ceiling, relative to the mean
      in-flight count and absolute (in requests); the least loaded replica always qualifies.
    * `kv_ceiling` (0.95): KV usage above which a replica is avoided (preemption ahead).
    * `max_blocks_per_replica` (0 = the replica's KV blocks): the index's cap per replica.
    """

    name = "cache_aware"

    def __init__(
        self,
        context: PolicyContext,
        prefix_weight: float = 2.0,
        load_weight: float = 1.0,
        request_cost_tokens: float = 1024.0,
        load_factor: float = 1.3,
        load_slack: float = 3.0,
        kv_ceiling: float = 0.95,
        max_blocks_per_replica: int = 0,
    ) -> None:
        super().__init__(context)
        assert prefix_weight >= 0 and load_weight >= 0, "weights must be non-negative"
        assert load_factor >= 1.0, "load_factor must be at least 1"
        self.request_cost_tokens = request_cost_tokens
        self.filters = (
            keep_under_load_ceiling(load_factor, load_slack),
            keep_kv_below(kv_ceiling),
        )
        self.scorers = ((prefix_score, prefix_weight), (pending_load_score, load_weight))
        cap = max_blocks_per_replica or context.kv_blocks_per_replica
        self.indexes = [PrefixIndex(cap) for _ in range(context.num_replicas)]
        self._pending_tokens = [0] * context.num_replicas
        self._inflight: dict[str, tuple[int, int]] = {}  # request id -> (replica, pending tokens)

    def matched_blocks(self, request: RequestView, view: ReplicaView) -> int:
        return self.indexes[view.index].match(request.block_hashes)

    def prepare(self, request: RequestView, candidates: list[ReplicaView]) -> PrefillEstimate:
        return estimate_prefill(
            request,
            candidates,
            self.matched_blocks,
            self._pending_tokens,
            self.context.block_size,
            self.request_cost_tokens,
        )

    def explain(
        self, request: RequestView, candidates: list[ReplicaView], prepared: object, best: int
    ) -> Decision:
        assert isinstance(prepared, PrefillEstimate)
        reason = "cache_hit" if prepared.saved_tokens[best] > 0 else "load"
        return Decision(candidates[best].index, reason, prepared.matched_blocks[best])

    def observe(self, request: RequestView, decision: Decision) -> None:
        super().observe(request, decision)
        replica = decision.replica
        self.remember(request, replica)
        uncached = max(
            request.num_prompt_tokens - decision.num_matched_blocks * self.context.block_size, 0
        )
        self._pending_tokens[replica] += uncached
        self._inflight[request.request_id] = (replica, uncached)

    def remember(self, request: RequestView, replica: int) -> None:
        """What `matched_blocks` will know of the prompt dispatched to `replica`."""
        self.indexes[replica].insert(request.block_hashes)

    def on_first_token(self, request_id: str) -> None:
        entry = self._inflight.get(request_id)
        if entry is not None and entry[1]:
            self._pending_tokens[entry[0]] -= entry[1]
            self._inflight[request_id] = (entry[0], 0)

    def on_finish(self, request_id: str) -> None:
        entry = self._inflight.pop(request_id, None)
        if entry is not None:
            self._pending_tokens[entry[0]] -= entry[1]

    @property
    def pending_tokens(self) -> Sequence[int]:
        return tuple(self._pending_tokens)
