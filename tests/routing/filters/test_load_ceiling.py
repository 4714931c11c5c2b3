from __future__ import annotations

from inhouse.routing import ReplicaView, RequestView
from inhouse.routing.filters.load_ceiling import keep_under_load_ceiling

REQUEST = RequestView("r", 100)


def views(*inflight: int) -> list[ReplicaView]:
    return [ReplicaView(i, n) for i, n in enumerate(inflight)]


def test_keeps_replicas_under_the_ceiling_relative_to_the_mean() -> None:
    keep = keep_under_load_ceiling(load_factor=1.3, slack=0.0)
    # mean after the dispatch: (10 + 10 + 0 + 0 + 1) / 4 = 5.25; ceiling 6.825
    assert [v.index for v in keep(REQUEST, views(10, 10, 0, 0))] == [2, 3]


def test_slack_keeps_everyone_at_low_load() -> None:
    keep = keep_under_load_ceiling(load_factor=1.3, slack=3.0)
    assert [v.index for v in keep(REQUEST, views(3, 0, 0, 0))] == [0, 1, 2, 3]
    assert [v.index for v in keep(REQUEST, views(4, 0, 0, 0))] == [1, 2, 3]


def test_the_least_loaded_replica_always_stays() -> None:
    keep = keep_under_load_ceiling(load_factor=1.0, slack=0.0)
    assert [v.index for v in keep(REQUEST, views(50, 40))] == [1]
    assert [v.index for v in keep(REQUEST, views(7))] == [0]
