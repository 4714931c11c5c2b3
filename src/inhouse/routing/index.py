"""A bounded, approximate prefix index of one replica: which blocks the router sent there.

The index learns only from the router's own decisions (what it dispatched), as SGLang's
`cache_aware` and llm-d's approximate prefix scorer do; it never asks the engine. Keys are the
chained block hashes of `inhouse.hashing`: block *i* of two prompts is equal only if every block
before it is, so the index is a radix tree whose edges are runs of block hashes (a shared
system prompt is one edge, each session's history hangs below it) and a lookup or an insertion
touches one node per edge, not one per block.

Memory is bounded by construction: the tree never holds more than `max_blocks` block hashes.
When an insertion would exceed it, blocks are evicted from the tail of the least recently used
leaf (a node is used when a prompt is inserted through it), so a chain always loses its last
blocks before its first ones, as the engine's own LRU does.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence


class _Node:
    __slots__ = ("children", "hashes", "last_used", "parent")

    def __init__(self, hashes: list[int], parent: _Node | None, last_used: int) -> None:
        self.hashes = hashes
        self.parent = parent
        self.children: dict[int, _Node] = {}
        self.last_used = last_used


def _common_prefix(run: list[int], hashes: Sequence[int], start: int) -> int:
    """How many leading blocks of `run` equal `hashes[start:]`. Chained hashes make equality
    monotone (equal at *k* implies equal before *k*), so binary search finds it."""
    limit = min(len(run), len(hashes) - start)
    if run[limit - 1] == hashes[start + limit - 1]:
        return limit
    low, high = 1, limit - 1  # run[:low] equal (the first block matched the child's key)
    while low <= high:
        mid = (low + high) // 2
        if run[mid - 1] == hashes[start + mid - 1]:
            low = mid + 1
        else:
            high = mid - 1
    return high


class PrefixIndex:
    """Radix tree over block-hash runs with a hard cap on blocks and LRU-leaf eviction."""

    __slots__ = ("_clock", "_leaves", "_max_blocks", "_num_blocks", "_num_nodes", "_root", "_seq")

    def __init__(self, max_blocks: int) -> None:
        assert max_blocks > 0, "the index needs room for at least one block"
        self._max_blocks = max_blocks
        self._root = _Node([], None, 0)
        self._num_blocks = 0
        self._num_nodes = 0
        self._clock = 0
        # Candidate leaves by last use; entries go stale when a leaf is used again or grows a
        # child, and are skipped (and compacted away) rather than removed.
        self._leaves: list[tuple[int, int, _Node]] = []
        self._seq = itertools.count()

    @property
    def max_blocks(self) -> int:
        return self._max_blocks

    @property
    def num_blocks(self) -> int:
        return self._num_blocks

    @property
    def num_nodes(self) -> int:
        return self._num_nodes

    def match(self, hashes: Sequence[int]) -> int:
        """How many leading blocks of `hashes` are in the index."""
        node = self._root
        matched = 0
        while matched < len(hashes):
            child = node.children.get(hashes[matched])
            if child is None:
                break
            common = _common_prefix(child.hashes, hashes, matched)
            matched += common
            if common < len(child.hashes):
                break
            node = child
        return matched

    def insert(self, hashes: Sequence[int]) -> None:
        """Record that a prompt with these leading block hashes was sent here (most recent)."""
        if not hashes:
            return
        if len(hashes) > self._max_blocks:
            hashes = hashes[: self._max_blocks]
        self._clock += 1
        clock = self._clock
        node = self._root
        matched = 0
        while matched < len(hashes):
            child = node.children.get(hashes[matched])
            if child is None:
                leaf = _Node(list(hashes[matched:]), node, clock)
                node.children[hashes[matched]] = leaf
                self._num_nodes += 1
                self._num_blocks += len(leaf.hashes)
                node = leaf
                break
            common = _common_prefix(child.hashes, hashes, matched)
            if common < len(child.hashes):
                self._split(child, common)
            child.last_used = clock
            matched += common
            node = child
        node.last_used = clock
        if not node.children:
            self._push_leaf(node)
        self._evict(protect=node)

    def _split(self, node: _Node, at: int) -> None:
        """Cut `node`'s run after `at` blocks; the rest becomes its only child."""
        tail = _Node(node.hashes[at:], node, node.last_used)
        tail.children = node.children
        for child in tail.children.values():
            child.parent = tail
        node.hashes = node.hashes[:at]
        node.children = {tail.hashes[0]: tail}
        self._num_nodes += 1
        if not tail.children:
            self._push_leaf(tail)

    def _push_leaf(self, node: _Node) -> None:
        heapq.heappush(self._leaves, (node.last_used, next(self._seq), node))
        if len(self._leaves) > 2 * self._num_nodes + 64:
            self._leaves = [
                (n.last_used, next(self._seq), n)
                for _, _, n in self._leaves
                if self._is_live_leaf(n)
            ]
            self._leaves = list({id(e[2]): e for e in self._leaves}.values())
            heapq.heapify(self._leaves)

    def _is_live_leaf(self, node: _Node) -> bool:
        return not node.children and node.parent is not None and bool(node.hashes)

    def _evict(self, protect: _Node) -> None:
        leaves = self._leaves
        while self._num_blocks > self._max_blocks:
            last_used, _, node = heapq.heappop(leaves)
            if not self._is_live_leaf(node) or node.last_used != last_used:
                continue
            excess = self._num_blocks - self._max_blocks
            if node is protect and len(node.hashes) <= excess:
                excess = len(node.hashes) - 1  # never empty the path just inserted
            if excess < len(node.hashes):
                del node.hashes[len(node.hashes) - excess :]
                self._num_blocks -= excess
                heapq.heappush(leaves, (node.last_used, next(self._seq), node))
                continue
            self._num_blocks -= len(node.hashes)
            self._remove(node)

    def _remove(self, node: _Node) -> None:
        parent = node.parent
        assert parent is not None, "the root is never evicted"
        del parent.children[node.hashes[0]]
        node.parent = None
        self._num_nodes -= 1
        if parent.parent is not None and not parent.children:
            self._push_leaf(parent)

    def eviction_order(self) -> list[int]:
        """Every block, first to be evicted first (for tests; walks the whole tree)."""
        out: list[tuple[int, int, int]] = []  # (last_used, -depth, block)
        stack = [(self._root, 0)]
        while stack:
            node, depth = stack.pop()
            for i, block in enumerate(node.hashes):
                out.append((node.last_used, -(depth + i), block))
            for child in node.children.values():
                stack.append((child, depth + len(node.hashes)))
        return [block for _, _, block in sorted(out)]
