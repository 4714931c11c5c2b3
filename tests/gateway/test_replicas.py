"""`Replica`'s view of an engine's queue: a fresh scrape, else the gateway's own estimate."""

from __future__ import annotations

from inhouse.gateway.replicas import Replica


def test_waiting_is_the_fresh_scrape_or_the_live_estimate_never_a_stale_scrape() -> None:
    replica = Replica("chat", 0, "http://127.0.0.1:9000", 4, 1.0)
    replica.is_healthy = True
    replica.scraped_waiting = 5
    replica.scraped_at = 100.0
    assert replica.num_waiting(101.0, 2.0) == 5  # fresh
    assert replica.num_waiting(103.0, 2.0) == 0  # stale: counts as nothing
    replica.num_inflight = 7  # 3 beyond its running batch of 4: queued in the engine
    assert replica.num_waiting(103.0, 2.0) == 3
    assert replica.num_waiting(101.0, 2.0) == 5  # the larger of scrape and estimate
    replica.scraped_waiting = 1
    assert replica.num_waiting(101.0, 2.0) == 3
    view = replica.view(101.0, 2.0)
    assert (view.num_inflight, view.num_waiting, view.is_healthy) == (7, 3, True)
