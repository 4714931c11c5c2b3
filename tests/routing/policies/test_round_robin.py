from __future__ import annotations

from tests.routing.policies.pool import Pool, request

from inhouse.routing import Decision


def test_round_robin_cycles_over_healthy_replicas_and_advances_only_on_observe() -> None:
    pool = Pool("round_robin")
    pool.healthy[1] = False
    first = pool.policy.choose(request("a", [(1, 100)]), pool.views())
    again = pool.policy.choose(request("a", [(1, 100)]), pool.views())
    assert first == again == Decision(0, "round_robin")
    assert [pool.send(request(f"r{i}", [(i, 100)])) for i in range(6)] == [0, 2, 3, 0, 2, 3]
