"""How far a simulated p95 could move by chance: a block bootstrap over the run's requests.

The fleet simulator is deterministic for a seed, but a p95 over 60-90 s of arrivals moves by
about 5-8% from one seed to the next: the requests sent together share the queue they met, so a
few busy seconds carry the tail. Two runs' p95s (1x peak, and a replica lost) can therefore
differ by that much, either way, with nothing behind it (the CRM plan's chat pool read 529 ms at
1x and 488 ms with a replica lost).

`p95_intervals` resamples blocks of `BLOCK_S` seconds of requests (by arrival), with
replacement, `DRAWS` times, and gives the `CONFIDENCE` interval of each metric's p95 (as the
soak drill bounds its p95 ratio: blocks, not single requests, since neighbours are not
independent). `difference` calls two p95s apart only when their intervals do not overlap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

BLOCK_S = 5.0
DRAWS = 400
CONFIDENCE = 0.95
BINS = 2000
MIN_BLOCKS = 4  # fewer blocks than this: no interval (a bootstrap of 2 blocks says little)

Interval = tuple[float, float]


def p95_intervals(
    blocks: Sequence[Mapping[str, np.ndarray]], seed: int = 0
) -> dict[str, Interval | None]:
    """Each metric's p95 interval over `blocks` (each: metric -> that block's values); None
    for a metric with too few blocks holding a value."""
    rng = np.random.default_rng(seed)
    names = sorted({name for block in blocks for name in block})
    out: dict[str, Interval | None] = {}
    for name in names:
        arrays = [b[name] for b in blocks if name in b and len(b[name])]
        out[name] = _interval(arrays, rng) if len(arrays) >= MIN_BLOCKS else None
    return out


def _interval(arrays: list[np.ndarray], rng: np.random.Generator) -> Interval:
    """The bootstrap on histograms: each block's values counted once on a grid of `BINS` bins,
    a draw's counts are the blocks' counts times how often it drew each, and its p95 the bin
    where its cumulative count passes 95% (to a bin's width). A run's ITLs number millions;
    concatenating them for each draw cost seconds a plan."""
    low = min(float(a.min()) for a in arrays)
    high = max(float(a.max()) for a in arrays)
    positive = [float(a[a > 0].min()) for a in arrays if (a > 0).any()]
    if high <= low or not positive:
        return (low, high)
    # NOTE: log-spaced, so a bin is a fixed share of its value (0.7% for a range of 1 ms to
    # 10 min); one slow outlier would make linear bins as wide as the interval.
    edges = np.concatenate([[min(low, 0.0)], np.geomspace(min(positive), high, BINS)])
    counts = np.stack([np.histogram(a, edges)[0] for a in arrays]).astype(np.float64)
    picks = rng.integers(0, len(arrays), (DRAWS, len(arrays)))
    flat = (picks + len(arrays) * np.arange(DRAWS)[:, None]).ravel()
    times = np.bincount(flat, minlength=DRAWS * len(arrays)).reshape(DRAWS, len(arrays))
    cumulative = np.cumsum(times @ counts, axis=1)
    at = np.argmax(cumulative >= 0.95 * cumulative[:, -1:], axis=1)
    p95s = edges[at + 1]
    tail = (1 - CONFIDENCE) / 2 * 100
    lo, hi = np.percentile(p95s, [tail, 100 - tail])
    return (float(lo), float(hi))


def difference(first: Interval | None, second: Interval | None) -> str | None:
    """ "higher" or "lower" (the second against the first) when the intervals do not overlap;
    None when they do, or when either is unknown: no difference the runs support."""
    if first is None or second is None:
        return None
    if second[0] > first[1]:
        return "higher"
    if second[1] < first[0]:
        return "lower"
    return None
