"""Scorer `inflight`: fewest in-flight requests (`least_loaded`, and `session` when unbound).

Signal: the router's own in-flight count (`ReplicaView.num_inflight`). Score: 1 for an idle
replica, falling linearly with in-flight requests to 0 at one more than the most loaded
candidate's. Cost: two passes over the candidates; needs nothing prepared.
"""

from __future__ import annotations

from inhouse.routing.view import ReplicaView, RequestView


def least_inflight_score(
    request: RequestView, candidates: list[ReplicaView], prepared: object
) -> list[float]:
    most = max(view.num_inflight for view in candidates) + 1
    return [1.0 - view.num_inflight / most for view in candidates]
