"""Filter `load_ceiling`: bounded load, as SGLang's `prefix_hash` (consistent hashing with
bounded loads) and llm-d's load-aware filtering.

Signal: the router's own in-flight count per replica (`ReplicaView.num_inflight`, counted at
dispatch, never a scrape). Keeps replicas that would stay at or under
`max(load_factor * mean, mean + slack)` in-flight requests after taking this one, the mean
taken over the candidates after the dispatch; the least loaded replica always stays.
Cost: two passes over the candidates, no allocation beyond the kept list.
"""

from __future__ import annotations

from inhouse.routing.framework import Filter
from inhouse.routing.view import ReplicaView, RequestView


def keep_under_load_ceiling(load_factor: float, slack: float) -> Filter:
    """The filter for `load_factor` (relative to the mean) and `slack` (requests)."""

    def keep(request: RequestView, candidates: list[ReplicaView]) -> list[ReplicaView]:
        loads = [view.num_inflight for view in candidates]
        mean = (sum(loads) + 1) / len(loads)
        ceiling = max(load_factor * mean, mean + slack, min(loads) + 1)
        return [view for view in candidates if view.num_inflight + 1 <= ceiling + 1e-9]

    return keep
