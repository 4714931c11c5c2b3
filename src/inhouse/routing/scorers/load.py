"""Scorer `load`: one minus the prefill load pending on a candidate, in tokens.

Signal: `PrefillEstimate.load_tokens`, the router's own accounting (uncached prompt tokens it
dispatched whose first token has not come back, plus `request_cost_tokens` per in-flight
request), never a scrape; over the estimate's shared scale, so with `prefix` the weighted sum
is minus the prefill cost. Cost: one pass over the candidates.
"""

from __future__ import annotations

from inhouse.routing.scorers.prefill import PrefillEstimate
from inhouse.routing.view import ReplicaView, RequestView


def pending_load_score(
    request: RequestView, candidates: list[ReplicaView], prepared: object
) -> list[float]:
    assert isinstance(prepared, PrefillEstimate)
    return [1.0 - load / prepared.scale for load in prepared.load_tokens]
