"""Arrival processes and length distributions, seeded.

Arrival kinds:

* `poisson`: exponential gaps at `rate_per_s`;
* `gamma`: gamma gaps with shape `burstiness` and mean `1/rate_per_s` (vLLM's
  `--burstiness`: 1 is Poisson, below 1 burstier, above 1 more regular);
* `constant`: exactly `1/rate_per_s` apart;
* `closed`: `concurrency` clients, each sending its next request a think time after its last one
  finished (think time `min_think_s + Exp(think_time_s - min_think_s)`).

Rate scaling multiplies `rate_per_s` (open loop) or `concurrency` (closed loop).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Literal

ArrivalKind = Literal["poisson", "gamma", "constant", "closed"]
ARRIVAL_KINDS: tuple[str, ...] = ("poisson", "gamma", "constant", "closed")

# z-score of the 95th percentile of a standard normal.
Z95 = 1.6448536269514722


@dataclass(frozen=True, slots=True)
class Arrivals:
    kind: ArrivalKind = "poisson"
    rate_per_s: float = 1.0
    burstiness: float = 1.0
    concurrency: int = 1
    think_time_s: float = 0.0
    min_think_s: float = 0.0

    def __post_init__(self) -> None:
        assert self.kind in ARRIVAL_KINDS, f"arrival kind is one of {ARRIVAL_KINDS}"
        assert self.rate_per_s > 0, "rate_per_s must be positive"
        assert self.burstiness > 0, "burstiness must be positive"
        assert self.concurrency > 0, "concurrency must be positive"
        assert 0 <= self.min_think_s <= max(self.think_time_s, self.min_think_s)

    @property
    def is_closed(self) -> bool:
        return self.kind == "closed"

    def scaled(self, factor: float) -> Arrivals:
        assert factor > 0, "rate scale must be positive"
        if self.is_closed:
            return replace(self, concurrency=max(1, round(self.concurrency * factor)))
        return replace(self, rate_per_s=self.rate_per_s * factor)


class GapSampler:
    """Inter-arrival gaps of an open-loop process."""

    def __init__(self, arrivals: Arrivals, rng: random.Random) -> None:
        assert not arrivals.is_closed, "a closed loop has no inter-arrival gaps"
        self.arrivals = arrivals
        self.rng = rng
        self._count = 0

    def next_arrival_s(self, previous_s: float) -> float:
        """The arrival after one at `previous_s`. Constant arrivals are `n / rate` exactly
        (no drift from adding up rounded gaps)."""
        self._count += 1
        if self.arrivals.kind == "constant":
            return self._count / self.arrivals.rate_per_s
        return previous_s + self.next_gap_s()

    def next_gap_s(self) -> float:
        a = self.arrivals
        if a.kind == "constant":
            return 1.0 / a.rate_per_s
        if a.kind == "poisson":
            return self.rng.expovariate(a.rate_per_s)
        return self.rng.gammavariate(a.burstiness, 1.0 / (a.rate_per_s * a.burstiness))


def sample_think_s(rng: random.Random, mean_s: float, min_s: float) -> float:
    """`min_s` plus an exponential with the rest of the mean; exactly `min_s` if mean ≤ min."""
    if mean_s <= min_s:
        return min_s
    return min_s + rng.expovariate(1.0 / (mean_s - min_s))


@dataclass(frozen=True, slots=True)
class Lengths:
    """Token lengths from a lognormal with the given median and 95th percentile, rounded and
    clipped to `[min_tokens, max_tokens]`. `p95 == p50` gives exactly `p50`."""

    p50: int
    p95: int
    min_tokens: int = 1
    max_tokens: int = 1 << 30

    def __post_init__(self) -> None:
        assert 0 < self.p50 <= self.p95, "lengths need 0 < p50 <= p95"
        assert 0 < self.min_tokens <= self.max_tokens, "lengths need 0 < min <= max"

    @property
    def sigma(self) -> float:
        return math.log(self.p95 / self.p50) / Z95

    def sample(self, rng: random.Random) -> int:
        sigma = self.sigma
        value = self.p50 if sigma == 0 else round(self.p50 * math.exp(sigma * rng.gauss()))
        return min(max(value, self.min_tokens), self.max_tokens)

    @classmethod
    def parse(cls, text: str) -> Lengths:
        """`"P50"`, `"P50:P95"` or `"P50:P95:MIN:MAX"` (the CLI's form)."""
        parts = [int(p) for p in text.split(":")]
        if len(parts) == 1:
            return cls(parts[0], parts[0])
        return cls(*parts)

    def __str__(self) -> str:
        return f"{self.p50}:{self.p95}"
