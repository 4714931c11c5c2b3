"""`Fleet.run_until` in slices (what a soak does) gives the very records of one `run()`."""

from __future__ import annotations

from inhouse.fleet import Fleet
from inhouse.spec.stack import parse_stack
from inhouse.workload import AgentWorkload


def _fleet() -> Fleet:
    pool = {"name": "p", "model": "Llama-3.1-8B", "replicas": 2}
    stack = parse_stack({"version": 1, "name": "t", "pools": [pool]})
    return Fleet(stack, AgentWorkload(sessions=6), policy="cache_aware", duration_s=60, seed=1,
                 rate_scale=1.0, down_replicas={})  # fmt: skip


def test_slices_give_the_records_of_one_run() -> None:
    whole = _fleet().run().records
    fleet = _fleet()
    taken = []
    t = 0.0
    more = True
    while more:
        t += 7.0
        more = fleet.run_until(t)
        assert all(r.finish_s is None or r.finish_s <= t for r in fleet.records)
        taken += fleet.take_records()
        assert all(0.0 <= u <= 1.0 for u in fleet.kv_usage().values())
    key = lambda r: (r.arrival_s, r.request_id)  # noqa: E731
    assert len(whole) > 20
    assert sorted(taken, key=key) == whole
    assert fleet.take_records() == []
