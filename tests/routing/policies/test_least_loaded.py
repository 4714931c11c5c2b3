from __future__ import annotations

from tests.routing.policies.pool import Pool, request


def test_least_loaded_takes_the_fewest_in_flight_and_rotates_ties() -> None:
    pool = Pool("least_loaded")
    pool.inflight = [3, 1, 1, 2]
    assert pool.send(request("a", [(1, 10)])) == 1
    assert pool.send(request("b", [(2, 10)])) == 2
    assert pool.inflight == [3, 2, 2, 2]
    # ties among 1, 2 and 3: the first at or after the rotation offset (2 decisions so far)
    assert pool.send(request("c", [(3, 10)])) == 2
    assert pool.send(request("d", [(4, 10)])) == 3  # 1 and 3 tie; the offset is 3 % 4 = 3
