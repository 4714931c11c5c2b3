from __future__ import annotations

from inhouse.routing import ReplicaView, RequestView
from inhouse.routing.filters.kv_ceiling import keep_kv_below

REQUEST = RequestView("r", 100)


def test_drops_replicas_at_or_above_the_ceiling() -> None:
    views = [ReplicaView(0, kv_usage=0.95), ReplicaView(1, kv_usage=0.5), ReplicaView(2)]
    assert [v.index for v in keep_kv_below(0.95)(REQUEST, views)] == [1, 2]


def test_keeps_all_when_none_is_below() -> None:
    views = [ReplicaView(0, kv_usage=0.99), ReplicaView(1, kv_usage=0.97)]
    assert keep_kv_below(0.95)(REQUEST, views) == views
