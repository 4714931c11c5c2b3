"""KV cache manager: prefix lookup, slot allocation and freeing, over the block pool, with an
optional host-RAM tier.

The host tier is the offload cache long-context deployments use (vLLM's CPU offloading,
LMCache): a cached block evicted from the GPU is kept in host memory, LRU, up to
`num_host_blocks`; a later prefix hit there is loaded back over PCIe instead of recomputed, and
the step pays for the transfer.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from dataclasses import dataclass

from inhouse.engine.block_pool import BlockPool
from inhouse.engine.request import Request


@dataclass(frozen=True, slots=True)
class PrefixHit:
    """Blocks of a prompt already computed: on the GPU (`gpu_blocks`) and, after those, in the
    host tier (`num_host_blocks`, to be loaded)."""

    gpu_blocks: array[int]
    num_host_blocks: int


NO_HIT = PrefixHit(array("q"), 0)


class KVCacheManager:
    def __init__(
        self,
        num_blocks: int,
        block_size: int = 16,
        enable_caching: bool = True,
        num_host_blocks: int = 0,
    ) -> None:
        assert block_size > 0, "block_size must be positive"
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.pool = BlockPool(num_blocks, enable_caching)
        self.num_host_blocks = num_host_blocks if enable_caching else 0
        self._host: OrderedDict[int, None] = OrderedDict()
        # Prefix-cache accounting in tokens, as vLLM's prefix_cache_{queries,hits}_total.
        self.num_query_tokens = 0
        self.num_hit_tokens = 0

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free

    def find_prefix(self, request: Request) -> PrefixHit:
        """Longest run of the prompt's leading full blocks that is cached, GPU first, then host.

        At least one prompt token is always left to compute, so the last token's logits exist.
        """
        if not self.enable_caching:
            return NO_HIT
        max_blocks = min((request.num_tokens - 1) // self.block_size, len(request.block_hashes))
        hashes = request.block_hashes
        gpu = self.pool.prefix_blocks(hashes, max_blocks)
        i = len(gpu)
        num_host = 0
        if self._host:
            host = self._host
            while i < max_blocks and hashes[i] in host:
                host.move_to_end(hashes[i])
                num_host += 1
                i += 1
        return PrefixHit(gpu, num_host)

    def record_query(self, num_tokens: int, num_hit_tokens: int) -> None:
        self.num_query_tokens += num_tokens
        self.num_hit_tokens += num_hit_tokens

    def allocate(self, request: Request, num_new_tokens: int, hit: PrefixHit = NO_HIT) -> bool:
        """Give `request` room for `num_new_tokens` more tokens; `False` if blocks run short.

        `hit` (first scheduling only) supplies the cached GPU blocks to reuse; the tokens of
        host-tier blocks are part of `num_new_tokens` and get fresh GPU blocks.
        """
        pool = self.pool
        bs = self.block_size
        num_hit = len(hit.gpu_blocks)
        if num_hit:
            num_needed = -(-(num_hit * bs + num_new_tokens) // bs) - num_hit
            if not pool.take_back(hit.gpu_blocks, num_needed):
                return False
            request.block_ids = hit.gpu_blocks[:]
            request.num_cached_blocks = num_hit
            computed = num_hit * bs
        else:
            computed = request.num_computed_tokens
            num_needed = -(-(computed + num_new_tokens) // bs) - len(request.block_ids)
        if num_needed > 0:
            new = pool.allocate(num_needed)
            if new is None:
                return False
            request.block_ids.extend(new)
            if pool.has_evicted:
                self._offload_evicted()
        if self.enable_caching and request.block_hashes:
            self._cache_full_blocks(request, computed + num_new_tokens)
        return True

    def grow_decodes(self, requests: list[Request], num_new_tokens: int) -> None:
        """`allocate(request, num_new_tokens)` for each request in turn (a decode jump), which
        the caller has checked fit the free blocks: the same blocks, cached hashes and
        evictions, in the same order, without the per-request calls."""
        pool = self.pool
        grow = pool.grow
        bs = self.block_size
        caching = self.enable_caching
        for request in requests:
            total = request.num_computed_tokens + num_new_tokens
            num_blocks = -(-total // bs)
            block_ids = request.block_ids
            hashes = request.block_hashes
            start = request.num_cached_blocks
            full = total // bs
            if not caching:
                full = start
            elif full > len(hashes):
                full = len(hashes)
            if num_blocks <= len(block_ids) and full <= start:
                continue  # NOTE: no new block and none to cache (most short decodes)
            if full < start:
                full = start
            grow(block_ids, num_blocks, hashes, start, full)
            request.num_cached_blocks = full
            if pool.has_evicted:
                self._offload_evicted()

    def _cache_full_blocks(self, request: Request, num_tokens: int) -> None:
        full = min(num_tokens // self.block_size, len(request.block_hashes))
        start = request.num_cached_blocks
        if full <= start:
            return
        if full - start == 1:
            self.pool.cache(request.block_ids[start], request.block_hashes[start])
        else:
            self.pool.cache_blocks(request.block_ids[start:full], request.block_hashes[start:full])
        request.num_cached_blocks = full

    def _offload_evicted(self) -> None:
        evicted = self.pool.drain_evicted()
        if not self.num_host_blocks:
            return
        host = self._host
        for block_hash in evicted:
            host[block_hash] = None
            host.move_to_end(block_hash)
        while len(host) > self.num_host_blocks:
            host.popitem(last=False)

    def free(self, request: Request) -> None:
        """Release a request's blocks, tail first."""
        block_ids = request.block_ids
        if block_ids:
            if request.num_cached_blocks:
                self.pool.remember_prefix(
                    request.block_hashes, block_ids[: request.num_cached_blocks]
                )
            self.pool.free(block_ids[::-1])
        request.block_ids = array("q")
        request.num_cached_blocks = 0
