import random

from inhouse.hashing import SpanHasher, chain_hash, chain_hashes, hash_spans, hash_token_blocks


def test_only_full_blocks_are_hashed() -> None:
    assert len(hash_token_blocks(list(range(47)), 16)) == 2
    assert len(hash_spans([(1, 47)], 16)) == 2


def test_blocks_share_a_hash_only_when_every_earlier_token_matches() -> None:
    a = hash_token_blocks([1] * 16 + [2] * 16 + [3] * 16, 16)
    b = hash_token_blocks([1] * 16 + [9] * 16 + [3] * 16, 16)
    assert a[0] == b[0]
    assert a[1] != b[1]
    assert a[2] != b[2]  # same content, different parent


def test_salt_separates_tenants() -> None:
    tokens = list(range(32))
    assert hash_token_blocks(tokens, 16, salt="t1") != hash_token_blocks(tokens, 16, salt="t2")
    assert hash_token_blocks(tokens, 16, salt="t1") == hash_token_blocks(tokens, 16, salt="t1")


def test_incremental_span_hashing_equals_one_shot() -> None:
    hasher = SpanHasher(16)
    hasher.extend(1, 100)
    copy = hasher.copy()
    hasher.extend(2, 37)
    hasher.extend(3, 500)
    assert hasher.hashes == hash_spans([(1, 100), (2, 37), (3, 500)], 16)
    assert copy.num_tokens == 100
    assert copy.hashes == hash_spans([(1, 100)], 16)


def test_span_boundaries_inside_a_block_change_its_hash() -> None:
    assert hash_spans([(1, 8), (2, 8)], 16) != hash_spans([(1, 16)], 16)
    assert hash_spans([(1, 8), (2, 8)], 16) == hash_spans([(1, 8), (2, 8)], 16)


def test_chain_hash_is_stable_across_processes() -> None:
    # Integers and tuples of integers hash the same in every Python process (no hash seed).
    assert chain_hash(0, (1, 2, 3)) == hash((0, (1, 2, 3)))


def test_chain_hashes_is_chain_hash_down_the_sequence() -> None:
    contents: list[object] = [(1, 2, 3), "a block of text", ((7, 0, 16),), (4,)]
    for salt in ("", "tenant-a"):
        expected, parent = [], 99
        for content in contents:
            parent = chain_hash(parent, content, salt)
            expected.append(parent)
        assert chain_hashes(99, contents, salt) == expected
    assert chain_hashes(5, []) == []
    ids = list(range(50))
    by_hand, parent = [], 0
    for start in (0, 16, 32):  # the 2 ids left over make no block
        parent = chain_hash(parent, tuple(ids[start : start + 16]))
        by_hand.append(parent)
    assert hash_token_blocks(ids, 16) == by_hand
    assert hash_token_blocks(ids[:15], 16) == []


def _block_keys(spans: list[tuple[int, int]], block_size: int) -> list[tuple[object, ...]]:
    """Each full block's content key by the definition: its `(span_id, start, end)` pieces."""
    keys: list[tuple[object, ...]] = []
    block: list[tuple[int, int, int]] = []
    filled = 0
    for span_id, length in spans:
        offset = 0
        while offset < length:
            take = min(block_size - filled, length - offset)
            block.append((span_id, offset, offset + take))
            filled += take
            offset += take
            if filled == block_size:
                keys.append(tuple(block))
                block, filled = [], 0
    return keys


def test_span_hashing_is_chain_hash_block_by_block() -> None:
    """`SpanHasher`'s whole-block fast path hashes as the block-at-a-time definition does, on
    random spans, block sizes and salts."""
    rng = random.Random(21)
    for _ in range(300):
        spans = [(rng.randint(0, 4), rng.randint(0, 90)) for _ in range(rng.randint(0, 8))]
        block_size = rng.choice([1, 3, 16])
        salt = rng.choice(["", "tenant-a"])
        expected, parent = [], 0
        for key in _block_keys(spans, block_size):
            parent = chain_hash(parent, key, salt)
            expected.append(parent)
        assert hash_spans(spans, block_size, salt) == expected, (spans, block_size, salt)
