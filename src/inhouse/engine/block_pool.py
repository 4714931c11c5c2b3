"""Paged KV blocks: reference counts, a hash → block map, and an LRU free queue.

Mechanics only, as vLLM V1's `BlockPool`: a block whose reference count drops to zero goes to
the tail of the free queue *keeping its hash*, so a later request with the same prefix can take
it back; allocation takes from the head, evicting the least recently freed cached block.
"""

from __future__ import annotations

from collections import OrderedDict


class BlockPool:
    """Fixed set of `num_blocks` KV blocks. Block ids are `0 .. num_blocks-1`."""

    def __init__(self, num_blocks: int, enable_caching: bool = True) -> None:
        assert num_blocks > 0, "the KV cache needs at least one block"
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.ref_cnt = [0] * num_blocks
        self.block_hash: list[int | None] = [None] * num_blocks
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._cached: dict[int, int] = {}  # block hash -> block id
        # Hashes evicted since the last `drain_evicted()`: the host tier and KV-event
        # subscribers (the oracle router) read them.
        self._evicted: list[int] = []

    @property
    def num_free(self) -> int:
        """Blocks that can be handed out now (free, cached or not)."""
        return len(self._free)

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    @property
    def usage(self) -> float:
        """Fraction of blocks held by running requests (vLLM's `kv_cache_usage_perc`)."""
        return 1.0 - len(self._free) / self.num_blocks

    def lookup(self, block_hash: int) -> int | None:
        return self._cached.get(block_hash)

    def lookup_prefix(self, hashes: list[int], max_blocks: int) -> list[int]:
        """Blocks holding the longest cached run of `hashes[:max_blocks]` from the start."""
        # NOTE: `map` walks the hashes in C; a prompt's hit is hundreds of blocks.
        block_ids = list(map(self._cached.get, hashes[:max_blocks]))
        if None in block_ids:
            del block_ids[block_ids.index(None) :]
        return block_ids  # type: ignore[return-value]

    def contains(self, block_hash: int) -> bool:
        return block_hash in self._cached

    def allocate(self, num: int) -> list[int] | None:
        """Take `num` blocks from the head of the free queue, or `None` if there are too few."""
        if num > len(self._free):
            return None
        out: list[int] = []
        free = self._free
        for _ in range(num):
            block_id, _ = free.popitem(last=False)
            old_hash = self.block_hash[block_id]
            if old_hash is not None:
                del self._cached[old_hash]
                self.block_hash[block_id] = None
                self._evicted.append(old_hash)
            self.ref_cnt[block_id] = 1
            out.append(block_id)
        return out

    def touch(self, block_ids: list[int]) -> None:
        """Take a reference on cached blocks (a prefix hit), pulling free ones off the queue."""
        ref = self.ref_cnt
        for block_id in block_ids:
            if ref[block_id] == 0:
                del self._free[block_id]
            ref[block_id] += 1

    def free(self, block_ids: list[int]) -> None:
        """Drop one reference on each block; unreferenced blocks join the free queue's tail
        in the given order (callers pass a request's blocks tail-first, as vLLM does, so a
        prefix's last blocks are evicted before its shared first ones)."""
        ref = self.ref_cnt
        free = self._free
        for block_id in block_ids:
            ref[block_id] -= 1
            assert ref[block_id] >= 0, f"block {block_id} freed more often than taken"
            if ref[block_id] == 0:
                free[block_id] = None

    def cache(self, block_id: int, block_hash: int) -> None:
        """Register a full block under its hash. If another block already holds the same
        content (two requests computed it at once), the first one stays the cached copy."""
        if not self.enable_caching or block_hash in self._cached:
            return
        self._cached[block_hash] = block_id
        self.block_hash[block_id] = block_hash

    @property
    def has_evicted(self) -> bool:
        return bool(self._evicted)

    def drain_evicted(self) -> list[int]:
        out, self._evicted = self._evicted, []
        return out
