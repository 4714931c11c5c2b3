from __future__ import annotations

from tests.routing.policies.pool import Pool, request


def test_session_affinity_holds_under_load_and_moves_only_when_its_replica_is_down() -> None:
    pool = Pool("session")
    home = pool.send(request("t0", [(1, 100)], session="s1"))
    pool.inflight[home] += 50  # much busier than the rest: affinity still holds
    for turn in range(1, 20):
        assert pool.send(request(f"t{turn}", [(1, 100 + turn)], session="s1")) == home
    pool.healthy[home] = False
    moved = pool.send(request("t20", [(1, 200)], session="s1"))
    assert moved != home
    pool.healthy[home] = True
    assert pool.send(request("t21", [(1, 210)], session="s1")) == moved
    assert pool.send(request("anon", [(2, 100)])) != home  # no key: least loaded


def test_session_table_is_bounded() -> None:
    pool = Pool("session", max_sessions=3)
    for s in range(10):
        pool.send(request(f"r{s}", [(s, 10)], session=f"s{s}"))
    assert pool.policy.num_sessions == 3  # type: ignore[attr-defined]


def test_a_session_bound_to_a_forgotten_replica_is_placed_again() -> None:
    """Another engine took the session's replica index (a scaled pool's slot changed pod):
    the binding no longer holds, and the session is placed as least_loaded would."""
    pool = Pool("session")
    home = pool.send(request("t0", [(1, 100)], session="s1"))
    pool.inflight[home] += 50
    assert pool.send(request("t1", [(1, 110)], session="s1")) == home
    pool.policy.forget_replica(home)
    moved = pool.send(request("t2", [(1, 120)], session="s1"))
    assert moved != home  # least loaded, not the stale binding
    assert pool.send(request("t3", [(1, 130)], session="s1")) == moved  # bound anew
