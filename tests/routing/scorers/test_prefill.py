from __future__ import annotations

from inhouse.routing import ReplicaView, RequestView
from inhouse.routing.scorers.prefill import PrefillEstimate, estimate_prefill


def test_saved_tokens_count_only_beyond_what_every_candidate_holds() -> None:
    held = {0: 10, 1: 4, 2: 4}
    views = [ReplicaView(0, 0), ReplicaView(1, 2), ReplicaView(2, 1)]
    estimate = estimate_prefill(
        RequestView("r", 16 * 12, list(range(12))),
        views,
        lambda request, view: held[view.index],
        pending_tokens=[0, 500, 0],
        block_size=16,
        request_cost_tokens=100.0,
    )
    assert estimate == PrefillEstimate([10, 4, 4], [96, 0, 0], [0.0, 700.0, 100.0], 700.0)


def test_the_scale_is_at_least_one() -> None:
    estimate = estimate_prefill(
        RequestView("r", 16), [ReplicaView(0)], lambda r, v: 0, [0], 16, 0.0
    )
    assert estimate.scale == 1.0
