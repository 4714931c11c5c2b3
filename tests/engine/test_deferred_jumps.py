"""The engine additions the fleet simulator relies on: `fast_forward_end_s` and
`BlockPool.prefix_blocks`."""

from __future__ import annotations

from inhouse.engine import EngineCore, Request
from inhouse.engine.block_pool import BlockPool
from inhouse.hashing import hash_spans


def decoding_engine(make_engine) -> tuple[EngineCore, float]:
    engine = make_engine()
    for i in range(4):
        engine.add_request(Request(f"r{i}", 200, 50 + 10 * i, 0.0, hash_spans([(i, 200)], 16)))
    now = 0.0
    while True:  # until every request decodes
        result = engine.step(now, max_steps=1)
        assert result is not None
        now = result.end_s
        if all(r.num_output_tokens for r in engine.scheduler.running):
            return engine, now


def test_fast_forward_end_is_where_the_jump_ends_and_changes_nothing(make_engine) -> None:
    engine, now = decoding_engine(make_engine)
    steps_before = engine.stats.num_steps
    end = engine.fast_forward_end_s(now)
    assert end is not None
    assert engine.fast_forward_end_s(now) == end
    assert engine.stats.num_steps == steps_before  # nothing ran
    result = engine.step(now)
    assert result is not None and result.batch is None
    assert result.end_s == end
    assert [r.request_id for r in result.finished] == ["r0"]  # the jump stops at a completion


def test_a_request_arriving_mid_jump_cuts_it_at_its_ready_time(make_engine) -> None:
    engine, now = decoding_engine(make_engine)
    end = engine.fast_forward_end_s(now)
    assert end is not None
    arrival = (now + end) / 2
    engine.add_request(Request("late", 100, 5, arrival, hash_spans([(9, 100)], 16)))
    result = engine.step(now)
    assert result is not None
    assert arrival <= result.end_s < end
    assert (
        engine.timeline[result.first_step + result.num_steps - 2] < arrival
    )  # last start before it
    assert engine.fast_forward_end_s(result.end_s) is None  # the new request is ready: no jump


def test_prefix_blocks_stops_at_the_first_missing_block() -> None:
    pool = BlockPool(8)
    hashes = hash_spans([(1, 16 * 6)], 16)
    for block_id, block_hash in enumerate(hashes[:3]):
        pool.cache(block_id, block_hash)
    pool.cache(4, hashes[4])  # present, but after a gap
    assert pool.prefix_blocks(hashes, 6).tolist() == [0, 1, 2]
    assert pool.prefix_blocks(hashes, 2).tolist() == [0, 1]
    assert pool.prefix_blocks(hashes[3:], 3).tolist() == []
