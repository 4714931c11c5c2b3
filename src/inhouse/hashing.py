"""Chained prefix-block hashes: the one scheme the engine's cache and the router's index share.

A block's hash covers its parent's hash, its content and an optional salt (model or tenant), so
two sequences share block *i* only if they share every token up to the end of block *i* — the
property vLLM's `hash_block_tokens` and llm-d's prompt hashing rely on. Only full blocks are
hashed; a trailing partial block is never cached.

Content comes in two forms that hash alike for equal content:

* literal token ids (the HTTP engine, the gateway after tokenization);
* *spans* of synthetic tokens, `(span_id, length)`, where token *j* of span *s* stands for a
  distinct pseudo-token. Workloads describe prompts this way so that an hour of agent traffic
  hashes in milliseconds: a block is keyed by the spans it covers instead of by 16 token ids.
  Equal content must use equal span ids, which the workload generators guarantee.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import cache
from hashlib import blake2b
from itertools import repeat

ROOT_HASH = 0


@cache
def salt_key(salt: str) -> int:
    """The integer a salt mixes into every parent hash (0 for no salt)."""
    if not salt:
        return 0
    return int.from_bytes(blake2b(salt.encode(), digest_size=8).digest(), "little")


def chain_hash(parent: int, content: object, salt: str = "") -> int:
    """Hash of one full block from its parent's hash, its content key and a salt.

    Python's `hash` of a tuple of ints is deterministic across processes for ints (no
    PYTHONHASHSEED dependence), so it is used for speed; a salt goes through blake2b once.
    NOTE: `str` content (the gateway's character blocks, its model roots) hashes with the
    process's string seed: equal within a process, which is all a router's own index needs,
    different across processes (never compare such hashes between processes).
    """
    return hash((parent ^ salt_key(salt), content))


def chain_hashes(parent: int, contents: Iterable[object], salt: str = "") -> list[int]:
    """`chain_hash` down a sequence of block contents: every block's hash, each chained from
    the one before, the first from `parent`. The one loop that hashes blocks in bulk, with
    `chain_hash` written out (the gateway hashes every prompt's blocks on its request path:
    128 blocks for 32K characters; `SpanHasher` every whole block of an hour of traffic)."""
    key = salt_key(salt)
    hashes: list[int] = []
    append = hashes.append
    if key:
        for content in contents:
            parent = hash((parent ^ key, content))
            append(parent)
    else:  # no salt: `parent ^ 0` is `parent`
        for content in contents:
            parent = hash((parent, content))
            append(parent)
    return hashes


def hash_token_blocks(
    token_ids: Sequence[int], block_size: int, salt: str = "", parent: int = ROOT_HASH
) -> list[int]:
    """Chained hashes of every full block of literal token ids."""
    ends = range(block_size, len(token_ids) + 1, block_size)
    return chain_hashes(parent, [tuple(token_ids[end - block_size : end]) for end in ends], salt)


class SpanHasher:
    """Incremental chained block hashes over a sequence described as spans.

    `extend(span_id, length)` appends `length` pseudo-tokens of span `span_id` and returns the
    hashes of the blocks it completed. A session keeps one hasher and extends it turn by turn,
    so each token is hashed once however often the history is re-sent.
    """

    __slots__ = ("_block_size", "_hashes", "_parent", "_pending", "_pending_len", "_salt")

    def __init__(self, block_size: int, salt: str = "", parent: int = ROOT_HASH) -> None:
        """`parent`: resume a sequence right after a full block with this hash (trace replay
        memoizes the hashes under a block id and continues from there)."""
        assert block_size > 0, "block_size must be positive"
        self._block_size = block_size
        self._salt = salt
        self._parent = parent
        self._pending: list[tuple[int, int, int]] = []  # (span_id, start, end) in current block
        self._pending_len = 0
        self._hashes: list[int] = []

    @property
    def hashes(self) -> list[int]:
        """Hashes of all full blocks so far (the caller must not mutate the list)."""
        return self._hashes

    @property
    def num_tokens(self) -> int:
        return len(self._hashes) * self._block_size + self._pending_len

    def copy(self) -> SpanHasher:
        other = SpanHasher(self._block_size, self._salt)
        other._parent = self._parent
        other._pending = list(self._pending)
        other._pending_len = self._pending_len
        other._hashes = list(self._hashes)
        return other

    def extend(self, span_id: int, length: int) -> list[int]:
        assert length >= 0, "span length must be non-negative"
        new: list[int] = []
        offset = 0
        bs = self._block_size
        while offset < length:
            if not self._pending_len and length - offset >= bs:
                # NOTE: fast path for the whole blocks inside one span: the content key the
                # general loop below builds, `((span_id, start, end),)`, made in C by `zip`.
                last = offset + (length - offset) // bs * bs
                ends = range(offset + bs, last + bs, bs)
                keys = zip(zip(repeat(span_id), range(offset, last, bs), ends))
                whole = chain_hashes(self._parent, keys, self._salt)
                new.extend(whole)
                self._parent = whole[-1]
                offset = last
                continue
            take = min(bs - self._pending_len, length - offset)
            self._pending.append((span_id, offset, offset + take))
            self._pending_len += take
            offset += take
            if self._pending_len == bs:
                self._parent = chain_hash(self._parent, tuple(self._pending), self._salt)
                new.append(self._parent)
                self._pending = []
                self._pending_len = 0
        self._hashes.extend(new)
        return new

    def extend_all(self, spans: Iterable[tuple[int, int]]) -> list[int]:
        new: list[int] = []
        for span_id, length in spans:
            new.extend(self.extend(span_id, length))
        return new


def hash_spans(spans: Iterable[tuple[int, int]], block_size: int, salt: str = "") -> list[int]:
    """Chained hashes of every full block of a span-described sequence."""
    hasher = SpanHasher(block_size, salt)
    hasher.extend_all(spans)
    return hasher.hashes
