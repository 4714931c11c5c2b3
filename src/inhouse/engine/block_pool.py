"""Paged KV blocks: reference counts, a hash → block map, and an LRU free queue.

Mechanics only, as vLLM V1's `BlockPool`: a block whose reference count drops to zero goes to
the tail of the free queue *keeping its hash*, so a later request with the same prefix can take
it back; allocation takes from the head, evicting the least recently freed cached block.

Data structure. A turn of agent traffic takes back and releases hundreds of blocks at once, so
reference counts and the free queue live in flat numpy arrays and `touch`, `free` and large
`allocate`s work on whole runs of blocks; there is no per-block Python object.

* `ref_cnt[b]`: references to block `b` (int32).
* `block_hash[b]`: the hash block `b` is cached under, or None (an object array: it keeps the
  very int objects the requests hold, which makes comparing runs of them cheap), and
  `_has_hash[b]`, whether it is set.
* `_cached`: hash → block id (a dict: prefix lookup is a run of dict lookups in C).
* The free queue is a *lazy* FIFO. `_queue[_head:_tail]` holds block ids in the order they were
  freed; `_slot[b]` is the queue position of block `b`'s one live entry, or -1 while `b` is
  held. Taking a free block back (a prefix hit) only sets its slot to -1, and freeing it again
  appends a new entry, so older entries whose position differs from their block's slot are
  stale and allocation skips them. The live entries, in queue order, are exactly vLLM's doubly
  linked free list: least recently freed first, and blocks freed together in the order given
  (a request passes its blocks tail first). When the queue array fills up, the live entries
  are moved to its front in the same order (amortized O(1) per free).
* `_runs`: runs of blocks that requests let go of, keyed by the hash at the run's last
  power-of-two position (at most `_MAX_RUNS`, oldest dropped). A prompt that re-sends such a
  prefix (every later turn of a session) gets its blocks from the run after one comparison of
  the run's `block_hash` entries with its hashes, instead of a hash-map lookup per block; where
  they differ (blocks since evicted or reused) only the matching lead is used, so lookups find
  exactly what a scan of `_cached` would.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict, deque
from collections.abc import Sequence
from itertools import repeat
from operator import ne

import numpy as np
import numpy.typing as npt

# Runs of block ids: lists, compact arrays (a request's blocks) or numpy arrays.
BlockIds = Sequence[int] | npt.NDArray[np.int64]

# Prefix lookups go through the hash map this many blocks at a time.
_LOOKUP_CHUNK = 32
# Remembered runs of blocks (see `remember_prefix`), least recently stored dropped first.
_MAX_RUNS = 512

# Allocations of at most this many blocks (a decode crossing a block boundary) probe the queue
# head one entry at a time instead of through a vectorized window.
_SCALAR_ALLOCATE = 16
# Caching at most this many blocks at once goes block by block instead of through numpy.
_SCALAR_CACHE = 16


class BlockPool:
    """Fixed set of `num_blocks` KV blocks. Block ids are `0 .. num_blocks-1`."""

    def __init__(self, num_blocks: int, enable_caching: bool = True) -> None:
        assert num_blocks > 0, "the KV cache needs at least one block"
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.ref_cnt = np.zeros(num_blocks, dtype=np.int32)
        self.block_hash: npt.NDArray[np.object_] = np.full(num_blocks, None, dtype=object)
        self._has_hash = np.zeros(num_blocks, dtype=np.bool_)
        self._cached: dict[int, int] = {}  # block hash -> block id
        # Lazy free queue (see the module docstring): every block starts free, in id order.
        self._queue = np.zeros(2 * num_blocks + 64, dtype=np.int64)
        self._queue[:num_blocks] = np.arange(num_blocks)
        self._slot = np.arange(num_blocks, dtype=np.int64)
        self._head = 0
        self._tail = num_blocks
        self._num_free = num_blocks
        # NOTE: memoryviews on the same arrays, for one-block reads and writes: they take and
        # give Python ints, several times faster than numpy's scalar indexing.
        self._ref_mv = self.ref_cnt.data
        self._slot_mv = self._slot.data
        self._queue_mv = self._queue.data
        self._has_mv = self._has_hash.data
        # Runs of blocks that held a prefix, keyed by the hash at its last checkpoint.
        self._runs: OrderedDict[int, array[int]] = OrderedDict()
        # Hashes evicted since the last `drain_evicted()`: the host tier and KV-event
        # subscribers (the oracle router) read them.
        self._evicted: list[int] = []

    @property
    def num_free(self) -> int:
        """Blocks that can be handed out now (free, cached or not)."""
        return self._num_free

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    @property
    def usage(self) -> float:
        """Fraction of blocks held by running requests (vLLM's `kv_cache_usage_perc`)."""
        return 1.0 - self._num_free / self.num_blocks

    def lookup(self, block_hash: int) -> int | None:
        return self._cached.get(block_hash)

    def prefix_blocks(self, hashes: list[int], max_blocks: int) -> array[int]:
        """Blocks holding the longest cached run of `hashes[:max_blocks]` from the start, as a
        compact array (what a request's `block_ids` are)."""
        hashes = hashes[:max_blocks]
        num = len(hashes)
        out = self._recall(hashes) if self._runs and num else array("q")
        start = len(out)
        get = self._cached.get
        # NOTE: `map` walks the hashes in C, a chunk at a time so as to stop near the first
        # miss. Block ids are never negative, so -1 marks a miss.
        while start < num:
            chunk = list(map(get, hashes[start : start + _LOOKUP_CHUNK], repeat(-1)))
            if -1 in chunk:
                out.extend(chunk[: chunk.index(-1)])
                break
            out.extend(chunk)
            start += len(chunk)
        return out

    def remember_prefix(self, hashes: list[int], block_ids: array[int]) -> None:
        """Note that `block_ids` hold `hashes[:len(block_ids)]` (a request letting go of its
        cached blocks), so that a later prompt re-sending this prefix finds its blocks without
        a lookup per block. A hint only: `prefix_blocks` checks it block by block."""
        num = len(block_ids)
        if not num or not self.enable_caching:
            return
        key = hashes[_checkpoint(num)]
        runs = self._runs
        runs[key] = block_ids
        runs.move_to_end(key)
        if len(runs) > _MAX_RUNS:
            runs.popitem(last=False)

    def _recall(self, hashes: list[int]) -> array[int]:
        """The longest leading run of `hashes` that a remembered run shows still cached."""
        runs = self._runs
        position = _checkpoint(len(hashes))
        while (run := runs.get(hashes[position])) is None:
            if not position:
                return array("q")
            position >>= 1  # the checkpoint below: 2**j - 1 -> 2**(j-1) - 1
        num = min(len(run), len(hashes))
        # Block b still holds hash h exactly when `block_hash[b] == h` (a block's hash is set
        # and cleared together with its entry in `_cached`).
        held = self.block_hash[np.frombuffer(run, dtype=np.int64, count=num)].tolist()
        if held == hashes[:num]:
            return run[:num]
        # The first block that differs, found in one pass in C (`map` stops after `num`).
        return run[: list(map(ne, held, hashes)).index(True)]

    def allocate(self, num: int) -> list[int] | None:
        """Take `num` blocks from the head of the free queue, or `None` if there are too few."""
        if num > self._num_free:
            return None
        self._num_free -= num
        if num <= _SCALAR_ALLOCATE:
            return self._allocate_few(num)
        taken = self._pop_window(num)
        self.ref_cnt[taken] = 1
        self._slot[taken] = -1
        if self._cached:
            evicted = taken[self._has_hash[taken]]
            if len(evicted):
                hashes = self.block_hash[evicted].tolist()
                self.block_hash[evicted] = None
                self._has_hash[evicted] = False
                deque(map(self._cached.__delitem__, hashes), maxlen=0)  # a `del` each, in C
                self._evicted.extend(hashes)
        return taken.tolist()  # type: ignore[no-any-return]

    def _allocate_few(self, num: int) -> list[int]:
        """`allocate` a block at a time: cheaper than array operations for a handful.
        `allocate` (vectorised) and `grow` (one block, inlined) hold twins of its eviction."""
        queue, slot, ref, has_hash = self._queue_mv, self._slot_mv, self._ref_mv, self._has_mv
        block_hash = self.block_hash
        head = self._head
        out: list[int] = []
        while num:
            block_id = queue[head]
            head += 1
            if slot[block_id] != head - 1:
                continue  # stale entry
            out.append(block_id)
            num -= 1
            ref[block_id] = 1
            slot[block_id] = -1
            if has_hash[block_id]:
                has_hash[block_id] = False
                old_hash = block_hash[block_id]
                block_hash[block_id] = None
                del self._cached[old_hash]
                self._evicted.append(old_hash)
        self._head = head
        return out

    def grow(
        self,
        block_ids: array[int],
        num_blocks: int,
        hashes: list[int],
        num_cached: int,
        num_full: int,
    ) -> None:
        """A decode's `allocate` then `cache` in one call: append free blocks to `block_ids`
        (a request's blocks) until it holds `num_blocks`, then cache its blocks
        `num_cached .. num_full-1` under `hashes`. The blocks must fit (`num_free`).

        NOTE: the one-block allocation and the block-at-a-time caching below are inlined
        copies of `_allocate_few` and `cache_blocks` (the decode jumps' hot path: one call
        instead of four measured ~10% of a simulated hour, `python
        benchmarks/bench_fleet_speed.py`). tests/engine/test_block_pool.py checks `grow`
        against a plain reference pool over random traffic."""
        num = num_blocks - len(block_ids)
        if num > 1:
            taken = self.allocate(num)
            assert taken is not None, "grow past the free blocks"
            block_ids.extend(taken)
        elif num == 1:
            assert self._num_free, "grow past the free blocks"
            self._num_free -= 1
            # `_allocate_few(1)`, inlined (the common case: one block per decode jump).
            queue, slot = self._queue_mv, self._slot_mv
            head = self._head
            while slot[queue[head]] != head:
                head += 1  # stale entry
            block_id = queue[head]
            self._head = head + 1
            block_ids.append(block_id)
            self._ref_mv[block_id] = 1
            slot[block_id] = -1
            if self._has_mv[block_id]:
                self._has_mv[block_id] = False
                old_hash = self.block_hash[block_id]
                self.block_hash[block_id] = None
                del self._cached[old_hash]
                self._evicted.append(old_hash)
        if num_full - num_cached > _SCALAR_CACHE:
            self.cache_blocks(block_ids[num_cached:num_full], hashes[num_cached:num_full])
        elif num_full > num_cached and self.enable_caching:
            # `cache` per block, inlined.
            cached, block_hash, has_hash = self._cached, self.block_hash, self._has_mv
            for k in range(num_cached, num_full):
                if hashes[k] not in cached:
                    block_id = block_ids[k]
                    cached[hashes[k]] = block_id
                    block_hash[block_id] = hashes[k]
                    has_hash[block_id] = True

    def _pop_window(self, num: int) -> npt.NDArray[np.int64]:
        """The first `num` live entries from the head, found a window of entries at a time."""
        queue, slot = self._queue, self._slot
        head, tail = self._head, self._tail
        size = num
        while True:
            end = min(head + size, tail)
            window = queue[head:end]
            live = np.flatnonzero(slot[window] == np.arange(head, end))
            if len(live) >= num or end == tail:
                break
            size *= 2
        assert len(live) >= num, "the free queue holds fewer live blocks than counted"
        self._head = head + int(live[num - 1]) + 1
        return window[live[:num]]

    def take_back(self, block_ids: BlockIds, num_more: int) -> bool:
        """Take a reference on these cached, distinct blocks (a prefix hit), pulling the free
        ones off the queue, if `num_more` blocks can still be allocated afterwards; else
        `False`, changing nothing."""
        ids = np.asarray(block_ids, dtype=np.int64)
        ref = self.ref_cnt
        held = ref[ids]
        num_taken = len(ids) - int(np.count_nonzero(held))
        if num_more + num_taken > self._num_free:
            return False
        self._num_free -= num_taken
        ref[ids] = held + 1
        self._slot[ids] = -1  # their queue entries, if any, go stale
        return True

    def free(self, block_ids: BlockIds) -> None:
        """Drop one reference on each block; unreferenced blocks join the free queue's tail
        in the given order (callers pass a request's blocks tail-first, as vLLM does, so a
        prefix's last blocks are evicted before its shared first ones). The blocks must be
        distinct."""
        ids = np.asarray(block_ids, dtype=np.int64)
        if not len(ids):
            return
        ref = self.ref_cnt
        held = ref[ids]
        # NOTE: `count_nonzero` rather than `min`: no ufunc reduction (counts are never < 0).
        assert np.count_nonzero(held) == len(ids), (
            f"a block of {ids.tolist()} freed more often than taken"
        )
        left = held - 1
        ref[ids] = left
        released = ids[left == 0]
        num = len(released)
        if not num:
            return
        if self._tail + num > len(self._queue):
            self._compact(num)
        tail = self._tail
        self._queue[tail : tail + num] = released
        self._slot[released] = np.arange(tail, tail + num)
        self._tail = tail + num
        self._num_free += num

    def _compact(self, room: int) -> None:
        """Move the live queue entries to the front, in order, leaving room for `room` more."""
        head, tail = self._head, self._tail
        window = self._queue[head:tail]
        live = window[self._slot[window] == np.arange(head, tail)]
        num_live = len(live)
        # Live entries are distinct free blocks, so at most `num_blocks`, and the queue holds
        # `2 * num_blocks + 64`: compacting always leaves room.
        assert num_live + room <= len(self._queue), "the free queue outgrew its array"
        self._queue[:num_live] = live
        self._slot[live] = np.arange(num_live)
        self._head, self._tail = 0, num_live

    def cache(self, block_id: int, block_hash: int) -> None:
        """Register a full block under its hash. If another block already holds the same
        content (two requests computed it at once), the first one stays the cached copy."""
        if not self.enable_caching or block_hash in self._cached:
            return
        self._cached[block_hash] = block_id
        self.block_hash[block_id] = block_hash
        self._has_mv[block_id] = True

    def cache_blocks(self, block_ids: BlockIds, hashes: list[int]) -> None:
        """`cache` each `(block_ids[i], hashes[i])` in order (`grow` inlines the scalar path)."""
        if not self.enable_caching:
            return
        if len(hashes) <= _SCALAR_CACHE:
            cached, block_hash, has_hash = self._cached, self.block_hash, self._has_mv
            for block_id, new_hash in zip(block_ids, hashes, strict=True):
                if new_hash not in cached:
                    block_id = int(block_id)
                    cached[new_hash] = block_id
                    block_hash[block_id] = new_hash
                    has_hash[block_id] = True
            return
        ids = np.asarray(block_ids, dtype=np.int64)
        # NOTE: `setdefault` inserts a hash not yet cached and returns the block holding it,
        # so one pass in C both caches new content and keeps the first copy of duplicates.
        id_list = ids.tolist()
        holders = list(map(self._cached.setdefault, hashes, id_list))
        if holders != id_list:
            is_new = [holder == block_id for holder, block_id in zip(holders, id_list, strict=True)]
            hashes = [h for h, new in zip(hashes, is_new, strict=True) if new]
            ids = ids[np.array(is_new, dtype=np.bool_)]
        self.block_hash[ids] = hashes
        self._has_hash[ids] = True

    @property
    def has_evicted(self) -> bool:
        return bool(self._evicted)

    def drain_evicted(self) -> list[int]:
        out, self._evicted = self._evicted, []
        return out


def _checkpoint(num_blocks: int) -> int:
    """The position a run of `num_blocks` is remembered under: the last `2**j - 1` in it, so
    a prompt extending the run finds it in `log2` probes."""
    return (1 << (num_blocks.bit_length() - 1)) - 1
