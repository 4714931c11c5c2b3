import random
from array import array
from collections import OrderedDict
from itertools import takewhile

import pytest

from inhouse.engine.block_pool import BlockPool


def test_allocate_takes_from_the_head_and_refuses_when_short() -> None:
    pool = BlockPool(4)
    assert pool.allocate(3) == [0, 1, 2]
    assert pool.num_free == 1
    assert pool.allocate(2) is None
    assert pool.num_free == 1


def test_freed_cached_blocks_are_evicted_in_lru_order() -> None:
    pool = BlockPool(4)
    blocks = pool.allocate(4)
    assert blocks == [0, 1, 2, 3]
    for block_id, block_hash in zip(blocks, [100, 101, 102, 103], strict=True):
        pool.cache(block_id, block_hash)
    pool.free([2])
    pool.free([0])
    pool.free([3, 1])  # tail first, as a request frees its blocks
    assert pool.num_free == 4
    # Every block is still cached until it is handed out again.
    assert [pool.lookup(h) for h in (100, 101, 102, 103)] == [0, 1, 2, 3]
    assert pool.allocate(1) == [2]
    assert pool.lookup(102) is None
    assert pool.allocate(2) == [0, 3]
    assert pool.allocate(1) == [1]
    assert pool.drain_evicted() == [102, 100, 103, 101]


def test_take_back_revives_a_free_cached_block() -> None:
    pool = BlockPool(2)
    [block] = pool.allocate(1)
    pool.cache(block, 7)
    pool.free([block])
    assert pool.num_free == 2
    assert pool.take_back([pool.lookup(7)], 0)  # type: ignore[list-item]
    assert pool.num_free == 1
    assert pool.ref_cnt[block] == 1
    assert pool.allocate(1) == [1]  # the revived block is not handed out


def test_shared_block_is_freed_only_when_the_last_user_lets_go() -> None:
    pool = BlockPool(2)
    [block] = pool.allocate(1)
    pool.cache(block, 9)
    assert pool.take_back([block], 0)
    pool.free([block])
    assert pool.num_free == 1
    pool.free([block])
    assert pool.num_free == 2


def test_duplicate_content_keeps_the_first_cached_copy() -> None:
    pool = BlockPool(2)
    a, b = pool.allocate(2)
    pool.cache(a, 5)
    pool.cache(b, 5)
    assert pool.lookup(5) == a
    assert pool.block_hash[b] is None


def test_caching_off_never_caches() -> None:
    pool = BlockPool(2, enable_caching=False)
    [block] = pool.allocate(1)
    pool.cache(block, 5)
    assert pool.lookup(5) is None


def test_usage_counts_blocks_held() -> None:
    pool = BlockPool(4)
    pool.allocate(1)
    assert pool.usage == 0.25


class _ReferencePool:
    """The free queue as an ordered dict, as vLLM's doubly linked list behaves."""

    def __init__(self, num_blocks: int) -> None:
        self.ref = [0] * num_blocks
        self.hash: list[int | None] = [None] * num_blocks
        self.free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.cached: dict[int, int] = {}
        self.evicted: list[int] = []

    def allocate(self, num: int) -> list[int] | None:
        if num > len(self.free):
            return None
        out = []
        for _ in range(num):
            block_id, _ = self.free.popitem(last=False)
            old = self.hash[block_id]
            if old is not None:
                del self.cached[old]
                self.hash[block_id] = None
                self.evicted.append(old)
            self.ref[block_id] = 1
            out.append(block_id)
        return out

    def touch(self, block_ids: list[int]) -> None:
        for block_id in block_ids:
            if self.ref[block_id] == 0:
                del self.free[block_id]
            self.ref[block_id] += 1

    def release(self, block_ids: list[int]) -> None:
        for block_id in block_ids:
            self.ref[block_id] -= 1
            if self.ref[block_id] == 0:
                self.free[block_id] = None

    def cache(self, block_id: int, block_hash: int) -> None:
        if block_hash not in self.cached:
            self.cached[block_hash] = block_id
            self.hash[block_id] = block_hash


@pytest.mark.parametrize("num_blocks", [16, 48])
def test_pool_matches_a_plain_reference_over_random_traffic(num_blocks: int) -> None:
    """The lazy free queue evicts as an ordered dict would, and prefix lookups helped by
    remembered runs (stale ones included) find what a scan of the hash map finds."""
    rng = random.Random(num_blocks)
    pool, ref = BlockPool(num_blocks), _ReferencePool(num_blocks)
    held: list[tuple[list[int], list[int]]] = []  # (blocks, the hashes they were asked for)
    seen: list[list[int]] = []
    next_hash = 1000
    for _ in range(4000):
        op = rng.random()
        if op < 0.35:
            num = rng.choice([1, 2, 3, 5, 9, 20, 60])
            hashes = list(range(next_hash, next_hash + num))
            if num <= pool.num_free and rng.random() < 0.5:
                # A decode's allocate-then-cache in one call.
                grown = array("q")
                pool.grow(grown, num, hashes, 0, num)
                got = list(grown)
                assert got == ref.allocate(num)
            else:
                got = pool.allocate(num)
                assert got == ref.allocate(num)
                if got is not None:
                    pool.cache_blocks(got, hashes)
            if got is not None:
                next_hash += len(got) // 2  # half the content repeats: duplicates stay uncached
                for block_id, block_hash in zip(got, hashes, strict=True):
                    ref.cache(block_id, block_hash)
                held.append((got, hashes))
                seen.append(hashes)
        elif op < 0.65 and held:
            blocks, hashes = held.pop(rng.randrange(len(held)))
            pool.remember_prefix(hashes, array("q", blocks))
            pool.free(blocks[::-1])
            ref.release(blocks[::-1])
        elif seen:
            known = rng.choice(seen)
            query = known[: rng.randrange(1, len(known) + 1)] + [rng.randrange(10**9)] * (
                rng.random() < 0.5
            )
            blocks = pool.prefix_blocks(query, len(query)).tolist()
            expected = list(takewhile(lambda b: b is not None, map(ref.cached.get, query)))
            assert blocks == expected
            if blocks:
                num_free = [ref.ref[b] for b in blocks].count(0)
                assert [pool.ref_cnt[b] for b in blocks].count(0) == num_free
                too_many = pool.num_free - num_free + 1
                assert not pool.take_back(blocks, too_many)  # changes nothing
                assert pool.take_back(blocks, rng.choice([0, too_many - 1]))
                ref.touch(blocks)
                held.append((blocks, query[: len(blocks)]))
        assert pool.num_free == len(ref.free)
        assert pool.drain_evicted() == ref.evicted
        ref.evicted = []
    assert pool.block_hash.tolist() == ref.hash
