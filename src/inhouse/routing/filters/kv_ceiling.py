"""Filter `kv_ceiling`: avoid replicas about to preempt.

Signal: the engine's KV usage (`ReplicaView.kv_usage`, scraped `vllm:kv_cache_usage_perc`;
0 when the scrape is stale, so a stale figure only weakens the filter). Keeps replicas below
`ceiling`; all of them when none is. Cost: one pass over the candidates.
"""

from __future__ import annotations

from inhouse.routing.framework import Filter
from inhouse.routing.view import ReplicaView, RequestView


def keep_kv_below(ceiling: float) -> Filter:
    """The filter for a KV-usage `ceiling` in 0..1."""

    def keep(request: RequestView, candidates: list[ReplicaView]) -> list[ReplicaView]:
        kept = [view for view in candidates if view.kv_usage < ceiling]
        return kept or candidates

    return keep
