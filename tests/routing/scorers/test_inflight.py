from __future__ import annotations

from inhouse.routing import ReplicaView, RequestView
from inhouse.routing.scorers.inflight import least_inflight_score


def test_idle_scores_one_and_the_busiest_the_least() -> None:
    views = [ReplicaView(0, 0), ReplicaView(1, 1), ReplicaView(2, 3)]
    assert least_inflight_score(RequestView("r", 10), views, None) == [1.0, 0.75, 0.25]


def test_all_idle_score_alike() -> None:
    views = [ReplicaView(0), ReplicaView(1)]
    assert least_inflight_score(RequestView("r", 10), views, None) == [1.0, 1.0]
