from __future__ import annotations

from inhouse.hashing import hash_spans
from inhouse.routing.index import PrefixIndex


def chain(span: int, blocks: int, prefix: list[tuple[int, int]] | None = None) -> list[int]:
    return hash_spans([*(prefix or []), (span, 16 * blocks)], 16)


def test_match_counts_the_leading_blocks_present() -> None:
    index = PrefixIndex(1000)
    history = chain(1, 40)
    index.insert(history)
    assert index.match(history) == 40
    assert index.match(history[:25]) == 25
    longer = hash_spans([(1, 16 * 40), (2, 16 * 10)], 16)
    assert index.match(longer) == 40
    # shares the first 37 blocks' content only: the chain diverges at block 37
    diverging = hash_spans([(1, 16 * 37), (3, 16 * 10)], 16)
    assert index.match(diverging) == 37
    assert index.match(chain(9, 5)) == 0
    assert index.match([]) == 0


def test_a_shared_prefix_is_stored_once_as_one_edge() -> None:
    index = PrefixIndex(1000)
    system = [(100, 16 * 20)]
    index.insert(chain(1, 5, system))
    index.insert(chain(2, 7, system))
    assert index.num_blocks == 20 + 5 + 7
    assert index.num_nodes == 3  # the system prompt, then one edge per session


def test_eviction_takes_the_least_recently_used_leaf_tail_first() -> None:
    index = PrefixIndex(10)
    a, b, c = chain(1, 4), chain(2, 4), chain(3, 4)
    index.insert(a)
    index.insert(b)
    assert index.eviction_order() == [*a[::-1], *b[::-1]]
    index.insert(a[:2])  # a's head is used again
    index.insert(c)  # 12 blocks > 10: the two oldest go, a's unused tail
    assert index.num_blocks == 10
    assert (index.match(a), index.match(b), index.match(c)) == (2, 4, 4)
    assert index.eviction_order() == [*b[::-1], *a[1::-1], *c[::-1]]
    index.insert(chain(4, 3))  # three more: b's last three blocks go
    assert (index.match(a), index.match(b), index.match(c)) == (2, 1, 4)


def test_what_survives_of_a_chain_is_always_a_prefix() -> None:
    index = PrefixIndex(300)
    system = [(100, 16 * 50)]
    sessions = [chain(s, 20 + s, system) for s in range(30)]
    for turn in range(3):
        for s, blocks in enumerate(sessions):
            index.insert(blocks[: 50 + (turn + 1) * (20 + s) // 3])
            assert index.num_blocks <= 300
    present = set(index.eviction_order())
    for blocks in sessions:
        kept = index.match(blocks)
        assert all(h in present for h in blocks[:kept])
        assert not any(h in present for h in blocks[kept:])


def test_index_stays_under_its_cap_with_a_million_distinct_blocks() -> None:
    cap = 50_000
    index = PrefixIndex(cap)
    size = 500
    for i in range(2000):  # 1,000,000 distinct blocks, 500 per prompt
        index.insert(list(range(i * size, (i + 1) * size)))
        assert index.num_blocks <= cap
    assert index.num_blocks == cap
    assert index.num_nodes == cap // size
    assert index.match(list(range(1999 * size, 2000 * size))) == size
    assert index.match(list(range(0, size))) == 0


def test_a_prompt_longer_than_the_cap_keeps_its_head() -> None:
    index = PrefixIndex(8)
    long = chain(1, 20)
    index.insert(long)
    assert index.num_blocks == 8
    assert index.match(long) == 8
