from __future__ import annotations

from tests.routing.policies.pool import Pool, request

from inhouse.routing import policy_names


def test_no_healthy_replica_means_no_decision() -> None:
    for name in policy_names():
        pool = Pool(name)
        pool.healthy = [False] * 4
        pool.cached = [0] * 4
        assert pool.policy.choose(request("a", [(1, 100)]), pool.views()) is None
