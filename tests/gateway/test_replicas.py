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


def test_idle_engine_connections_are_kept_as_long_as_the_spec_says() -> None:
    from tests.gateway.conftest import stack_data

    from inhouse.gateway.service import Gateway
    from inhouse.spec.gateway import parse_gateway
    from inhouse.spec.stack import parse_stack

    for given, expected in (({}, 60.0), ({"proxy": {"upstream_idle_s": 12}}, 12.0)):
        stack = parse_stack(stack_data(replicas=2, gateway=given))
        gateway = Gateway(
            stack, parse_gateway(stack.gateway), {"chat": ["http://a:1", "http://b:2"]}
        )
        assert [r.upstream.idle_s for r in gateway.pools["chat"].replicas] == [expected] * 2
