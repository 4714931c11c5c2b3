from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest

from inhouse.errors import SpecError
from inhouse.hashing import hash_spans
from inhouse.routing import (
    Decision,
    Policy,
    PolicyContext,
    ReplicaView,
    RequestView,
    make_policy,
    policy_names,
    policy_params,
)

BS = 16


class Pool:
    """Four replicas whose in-flight counts follow the policy's decisions, like a router's."""

    def __init__(self, policy: str, n: int = 4, **params: object) -> None:
        self.policy: Policy = make_policy(policy, PolicyContext(n, BS, 100_000), params)
        self.inflight = [0] * n
        self.healthy = [True] * n
        self.kv = [0.0] * n
        self.cached: list[int] | None = None

    def views(self) -> list[ReplicaView]:
        def counter(i: int):
            return lambda hashes: min(self.cached[i], len(hashes))  # type: ignore[index]

        return [
            ReplicaView(
                i,
                self.inflight[i],
                0,
                self.kv[i],
                self.healthy[i],
                counter(i) if self.cached is not None else None,
            )
            for i in range(len(self.inflight))
        ]

    def send(self, request: RequestView) -> int:
        decision = self.policy.choose(request, self.views())
        assert decision is not None
        self.policy.observe(request, decision)
        self.inflight[decision.replica] += 1
        return decision.replica

    def finish(self, request_id: str, replica: int) -> None:
        self.policy.on_finish(request_id)
        self.inflight[replica] -= 1


def request(rid: str, spans: Sequence[tuple[int, int]], session: str | None = None) -> RequestView:
    hashes = hash_spans(spans, BS)
    return RequestView(rid, sum(n for _, n in spans), hashes, session)


SYSTEM = (1000, 6000)


def test_round_robin_cycles_over_healthy_replicas_and_advances_only_on_observe() -> None:
    pool = Pool("round_robin")
    pool.healthy[1] = False
    first = pool.policy.choose(request("a", [(1, 100)]), pool.views())
    again = pool.policy.choose(request("a", [(1, 100)]), pool.views())
    assert first == again == Decision(0, "round_robin")
    assert [pool.send(request(f"r{i}", [(i, 100)])) for i in range(6)] == [0, 2, 3, 0, 2, 3]


def test_least_loaded_takes_the_fewest_in_flight_and_rotates_ties() -> None:
    pool = Pool("least_loaded")
    pool.inflight = [3, 1, 1, 2]
    assert pool.send(request("a", [(1, 10)])) == 1
    assert pool.send(request("b", [(2, 10)])) == 2
    assert pool.inflight == [3, 2, 2, 2]
    # ties among 1, 2 and 3: the first at or after the rotation offset (2 decisions so far)
    assert pool.send(request("c", [(3, 10)])) == 2
    assert pool.send(request("d", [(4, 10)])) == 3  # 1 and 3 tie; the offset is 3 % 4 = 3


def test_no_healthy_replica_means_no_decision() -> None:
    for name in policy_names():
        pool = Pool(name)
        pool.healthy = [False] * 4
        pool.cached = [0] * 4
        assert pool.policy.choose(request("a", [(1, 100)]), pool.views()) is None


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


def test_oracle_reads_the_engines_true_caches() -> None:
    pool = Pool("oracle")
    pool.cached = [0, 0, 40, 0]
    assert pool.send(request("a", [(1, 16 * 50)])) == 2
    pool.cached = [0, 0, 0, 0]
    # in flight on replica 2 (dispatched, not yet computed): the oracle counts it too
    assert pool.send(request("b", [(1, 16 * 50), (2, 100)])) == 2
    with pytest.raises(AssertionError, match="count_cached_prefix"):
        Pool("oracle").send(request("c", [(1, 100)]))


def test_registry_names_policies_and_checks_parameters() -> None:
    assert policy_names() == ["round_robin", "least_loaded", "session", "cache_aware", "oracle"]
    assert policy_params("cache_aware")["load_factor"] == 1.3
    with pytest.raises(SpecError, match="unknown; use one of: round_robin"):
        make_policy("random", PolicyContext(2))
    with pytest.raises(
        SpecError, match=r"routing\.params\.weight: unknown parameter .* load_factor"
    ):
        make_policy("cache_aware", PolicyContext(2), {"weight": 1})
    with pytest.raises(SpecError, match="needs a int"):
        make_policy("cache_aware", PolicyContext(2), {"max_blocks_per_replica": 1.5})
    policy = make_policy("cache_aware", PolicyContext(2), {"load_factor": 2})
    assert policy.filters  # built with the given parameter


@pytest.mark.parametrize("name", ["cache_aware", "oracle"])
def test_the_written_out_choose_decides_as_the_generic_pipeline(name: str) -> None:
    """`CacheAware.choose` is `Policy.choose` over the same filters and scorers, written out:
    on random loads, KV usage, health, cached prefixes and ties, the two decide alike."""
    import random

    rng = random.Random(11)
    for trial in range(60):
        n = rng.randint(1, 5)
        pool = Pool(name, n, load_slack=rng.choice([0.0, 1.0, 3.0]))
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
