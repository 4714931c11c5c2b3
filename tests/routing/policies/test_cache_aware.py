from __future__ import annotations

from collections import Counter

import pytest
from tests.routing.policies.pool import BS, SYSTEM, Pool, request

from inhouse.routing import Decision, Policy


def test_cache_aware_follows_a_session_to_the_replica_holding_its_history() -> None:
    pool = Pool("cache_aware")
    homes = {}
    for s in range(8):  # eight sessions spread over the four replicas
        homes[s] = pool.send(request(f"s{s}t0", [SYSTEM, (s, 2000)]))
    assert sorted(Counter(homes.values()).values()) == [2, 2, 2, 2]
    for s in range(8):  # the next turns re-send the history: each goes home
        replica = pool.send(request(f"s{s}t1", [SYSTEM, (s, 2000), (100 + s, 1500)]))
        assert replica == homes[s]


def test_a_shared_system_prompt_alone_does_not_pin_sessions_to_one_replica() -> None:
    pool = Pool("cache_aware")
    placed = [pool.send(request(f"s{s}", [SYSTEM, (s, 500)])) for s in range(40)]
    counts = Counter(placed)
    assert sorted(counts) == [0, 1, 2, 3]
    assert max(counts.values()) - min(counts.values()) <= 2


def test_once_every_replica_holds_the_system_prompt_it_scores_nothing() -> None:
    pool = Pool("cache_aware")
    for i in range(4):  # every replica has served the system prompt, and finished
        decision = Decision(i, "load")
        pool.policy.observe(request(f"warm{i}", [SYSTEM, (900 + i, 16)]), decision)
        pool.policy.on_finish(f"warm{i}")
    pool.inflight = [0, 3, 3, 3]
    assert pool.send(request("new", [SYSTEM, (5, 500)])) == 0


def test_an_identical_prefix_burst_spreads_over_the_replicas() -> None:
    pool = Pool("cache_aware")
    prefix = (7, 4096)
    placed = [pool.send(request(f"b{i}", [prefix, (100 + i, 100)])) for i in range(32)]
    assert Counter(placed) == {0: 8, 1: 8, 2: 8, 3: 8}
    assert max(pool.inflight) <= 1.25 * sum(pool.inflight) / 4


def test_without_the_load_ceiling_the_burst_would_pin() -> None:
    # the contrast that shows the test above can fail: prefix weight only, no ceiling
    pool = Pool("cache_aware", load_weight=0.0, load_factor=100.0, load_slack=100.0)
    placed = [pool.send(request(f"b{i}", [(7, 4096), (100 + i, 100)])) for i in range(32)]
    assert Counter(placed) == {0: 32}


def test_cache_aware_avoids_a_replica_out_of_kv() -> None:
    pool = Pool("cache_aware")
    home = pool.send(request("a", [(1, 4000)]))
    pool.inflight[home] -= 1
    pool.kv[home] = 0.99
    assert pool.send(request("b", [(1, 4000), (2, 100)])) != home


def test_choose_changes_nothing_only_observe_and_finish_do() -> None:
    pool = Pool("cache_aware")
    policy = pool.policy
    view = request("a", [(1, 1600)])
    first = policy.choose(view, pool.views())
    assert policy.choose(view, pool.views()) == first
    assert all(index.num_blocks == 0 for index in policy.indexes)  # type: ignore[attr-defined]
    assert first is not None
    policy.observe(view, first)
    assert policy.indexes[first.replica].num_blocks == 100  # type: ignore[attr-defined]
    assert policy.pending_tokens[first.replica] == 1600  # type: ignore[attr-defined]
    policy.on_first_token("a")
    assert policy.pending_tokens[first.replica] == 0  # type: ignore[attr-defined]
    policy.on_finish("a")
    assert policy.indexes[first.replica].match(view.block_hashes) == 100  # type: ignore[attr-defined]


def test_cache_aware_index_respects_its_cap() -> None:
    pool = Pool("cache_aware", max_blocks_per_replica=1000)
    for i in range(200):
        replica = pool.send(request(f"r{i}", [(i, 16 * 100)]))
        pool.finish(f"r{i}", replica)
    assert all(i.num_blocks <= 1000 for i in pool.policy.indexes)  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["cache_aware", "oracle"])
def test_the_written_out_choose_decides_as_the_generic_pipeline(name: str) -> None:
    """`CacheAware.choose` is `Policy.choose` over the `load_ceiling` and `kv_ceiling` filters,
    the `prefix` and `load` scorers and the `max_score` picker, written out: on random loads, KV
    usage, health, cached prefixes and ties the two decide the same."""
    import random

    rng = random.Random(11)
    for trial in range(60):
        n = rng.randint(1, 5)
        slack = rng.choice([0.0, 1.0, 3.0])
        pool = Pool(name, n, load_slack=slack)
        pool.cached = [rng.randint(0, 8) for _ in range(n)]
        finished = []
        for k in range(rng.randint(0, 40)):
            spans = [(rng.randint(0, 3), BS * rng.randint(1, 6)), (k, BS * rng.randint(0, 4))]
            rid = f"{trial}-{k}"
            replica = pool.send(request(rid, spans))
            if rng.random() < 0.5:
                pool.policy.on_first_token(rid)
            if rng.random() < 0.3:
                finished.append((rid, replica))
        for rid, replica in finished:
            pool.finish(rid, replica)
        for _ in range(20):
            pool.healthy = [rng.random() < 0.85 for _ in range(n)]
            pool.kv = [rng.choice([0.1, 0.5, 0.96, 0.99]) for _ in range(n)]
            probe = request("probe", [(rng.randint(0, 3), BS * rng.randint(0, 6))])
            views = pool.views()
            assert pool.policy.choose(probe, views) == Policy.choose(pool.policy, probe, views)


def test_forget_replica_drops_what_was_learnt_about_the_engine_at_that_index() -> None:
    """A scaled pool's slot got another pod: its index and pending prefill start empty, and
    the requests still running on the old pod end without taking prefill off the new one."""
    from inhouse.routing.policies.cache_aware import CacheAware

    pool = Pool("cache_aware")
    policy = pool.policy
    assert isinstance(policy, CacheAware)
    history = request("s0t0", [SYSTEM, (7, 2000)])
    home = pool.send(history)
    assert policy.indexes[home].num_blocks == len(history.block_hashes)
    assert policy.pending_tokens[home] == history.num_prompt_tokens
    policy.forget_replica(home)
    assert policy.indexes[home].num_blocks == 0
    assert policy.pending_tokens[home] == 0
    pool.finish("s0t0", home)  # the old pod's request ends: nothing to take off
    assert policy.pending_tokens == (0, 0, 0, 0)
    decision = policy.choose(request("s0t1", [SYSTEM, (7, 2000), (8, 100)]), pool.views())
    assert decision is not None and decision.num_matched_blocks == 0  # no stale cache hit
