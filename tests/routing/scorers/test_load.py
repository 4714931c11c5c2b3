from __future__ import annotations

from inhouse.routing import ReplicaView, RequestView
from inhouse.routing.scorers.load import pending_load_score
from inhouse.routing.scorers.prefill import PrefillEstimate


def test_one_minus_the_pending_load_over_the_shared_scale() -> None:
    estimate = PrefillEstimate([0, 0], [0, 0], [0.0, 192.0], 384.0)
    views = [ReplicaView(0), ReplicaView(1)]
    assert pending_load_score(RequestView("r", 160), views, estimate) == [1.0, 0.5]
