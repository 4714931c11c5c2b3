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
        num_hit = len(hit.gpu_blocks)
        if not num_hit:
            return self._extend(request, request.num_computed_tokens + num_new_tokens)
        bs = self.block_size
        num_needed = -(-(num_hit * bs + num_new_tokens) // bs) - num_hit
        if not self.pool.take_back(hit.gpu_blocks, num_needed):
            return False
        request.block_ids = hit.gpu_blocks[:]
        request.num_cached_blocks = num_hit
        return self._extend(request, num_hit * bs + num_new_tokens)

    def grow_decodes(self, requests: list[Request], num_new_tokens: int) -> None:
        """`allocate(request, num_new_tokens)` for each request in turn (a decode jump), which
        the caller has checked fit the free blocks."""
        bs = self.block_size
        caching = self.enable_caching
        extend = self._extend
        for request in requests:
            num_tokens = request.num_computed_tokens + num_new_tokens
            # NOTE: a pre-check only, skipping the call where `_extend` would do nothing (no
            # new block, none to cache: most short decodes); `_extend` decides the rest.
            if num_tokens <= len(request.block_ids) * bs and (
                not caching or num_tokens // bs <= request.num_cached_blocks
            ):
                continue
            grown = extend(request, num_tokens)
            assert grown, "a decode jump grew past the free blocks"

    def _extend(self, request: Request, num_tokens: int) -> bool:
        """Give `request` blocks for `num_tokens` tokens in all and cache its full blocks;
        `False`, changing nothing, if blocks run short."""
        pool, bs = self.pool, self.block_size
        block_ids = request.block_ids
        num_needed = -(-num_tokens // bs) - len(block_ids)
        if num_needed > 0:
            new = pool.allocate(num_needed)
            if new is None:
                return False
            block_ids.extend(new)
            if pool.has_evicted:
                self._offload_evicted()
        if self.enable_caching:
            hashes = request.block_hashes
            full = min(num_tokens // bs, len(hashes))
            start = request.num_cached_blocks
            if full > start:
                pool.cache_blocks(block_ids[start:full], hashes[start:full])
                request.num_cached_blocks = full
        return True

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
