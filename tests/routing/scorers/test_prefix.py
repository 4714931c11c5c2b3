from __future__ import annotations

from inhouse.routing import ReplicaView, RequestView
from inhouse.routing.scorers.prefill import PrefillEstimate
from inhouse.routing.scorers.prefix import prefix_score


def test_saved_tokens_over_the_shared_scale() -> None:
    estimate = PrefillEstimate([10, 4], [96, 0], [0.0, 192.0], 192.0)
    views = [ReplicaView(0), ReplicaView(1)]
    assert prefix_score(RequestView("r", 160), views, estimate) == [0.5, 0.0]
