"""Scorer `prefix`: the prompt tokens a candidate's cached prefix saves (llm-d's prefix scorer).

Signal: `PrefillEstimate.saved_tokens` (the policy's approximate prefix index of what it sent
each replica, or the engines' caches for `oracle`), over the estimate's shared scale. Blocks
every candidate holds score nothing, so a shared system prompt cannot pin traffic.
Cost: one pass over the candidates; the index lookups are done once in `estimate_prefill`.
"""

from __future__ import annotations

from inhouse.routing.scorers.prefill import PrefillEstimate
from inhouse.routing.view import ReplicaView, RequestView


def prefix_score(
    request: RequestView, candidates: list[ReplicaView], prepared: object
) -> list[float]:
    assert isinstance(prepared, PrefillEstimate)
    return [saved / prepared.scale for saved in prepared.saved_tokens]
