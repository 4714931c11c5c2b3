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


def test_touch_revives_a_free_cached_block() -> None:
    pool = BlockPool(2)
    [block] = pool.allocate(1)
    pool.cache(block, 7)
    pool.free([block])
    assert pool.num_free == 2
    pool.touch([pool.lookup(7)])  # type: ignore[list-item]
    assert pool.num_free == 1
    assert pool.ref_cnt[block] == 1
    assert pool.allocate(1) == [1]  # the revived block is not handed out


def test_shared_block_is_freed_only_when_the_last_user_lets_go() -> None:
    pool = BlockPool(2)
    [block] = pool.allocate(1)
    pool.cache(block, 9)
    pool.touch([block])
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
