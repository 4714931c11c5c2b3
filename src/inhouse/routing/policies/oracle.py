"""Policy `oracle`: `cache_aware` reading the engines' true caches (simulator only)."""

from __future__ import annotations

from collections.abc import Sequence

from inhouse.routing.framework import PolicyContext
from inhouse.routing.policies.cache_aware import CacheAware
from inhouse.routing.view import ReplicaView, RequestView


class Oracle(CacheAware):
    """`oracle`: `cache_aware` with perfect knowledge of what each engine holds. Not for
    production; it measures how much the approximate index loses against a precise one.

    The prefix a replica holds is the longer of (a) the blocks its engine really has cached,
    read through `ReplicaView.count_cached_prefix`, and (b) the prompt blocks of requests
    already dispatched there and not finished (the engine will have computed them before it
    gets to this request). Same parameters as `cache_aware` (`max_blocks_per_replica` unused).
    """

    name = "oracle"

    def __init__(
        self,
        context: PolicyContext,
        prefix_weight: float = 2.0,
        load_weight: float = 1.0,
        request_cost_tokens: float = 1024.0,
        load_factor: float = 1.3,
        load_slack: float = 3.0,
        kv_ceiling: float = 0.95,
    ) -> None:
        super().__init__(
            context,
            prefix_weight,
            load_weight,
            request_cost_tokens,
            load_factor,
            load_slack,
            kv_ceiling,
            max_blocks_per_replica=1,
        )
        self.indexes = []
        self._inflight_blocks: list[dict[int, int]] = [{} for _ in range(context.num_replicas)]
        self._hashes_of: dict[str, Sequence[int]] = {}

    def matched_blocks(self, request: RequestView, view: ReplicaView) -> int:
        assert view.count_cached_prefix is not None, (
            "the oracle policy reads engine caches: the simulator must give "
            "ReplicaView.count_cached_prefix"
        )
        hashes = request.block_hashes
        cached = view.count_cached_prefix(hashes)
        inflight = self._inflight_blocks[view.index]
        pending = 0
        while pending < len(hashes) and hashes[pending] in inflight:
            pending += 1
        return max(cached, pending)

    def remember(self, request: RequestView, replica: int) -> None:
        counts = self._inflight_blocks[replica]
        for block_hash in request.block_hashes:
            counts[block_hash] = counts.get(block_hash, 0) + 1
        self._hashes_of[request.request_id] = request.block_hashes

    def on_finish(self, request_id: str) -> None:
        entry = self._inflight.get(request_id)
        hashes = self._hashes_of.pop(request_id, ())
        if entry is not None:
            counts = self._inflight_blocks[entry[0]]
            for block_hash in hashes:
                left = counts[block_hash] - 1
                if left:
                    counts[block_hash] = left
                else:
                    del counts[block_hash]
        super().on_finish(request_id)
