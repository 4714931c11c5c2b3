"""Latency distributions the analytic model predicts, and their percentiles.

A latency is a deterministic part per sampled request (prefill, decode, API overhead) plus a
queueing wait. The wait follows the usual exponential-tail approximation of a G/G/1 queue: with
utilization ρ and mean wait W̄ (Kingman), a request waits with probability ρ, and then
exponentially with mean W̄/ρ:

    P(W > x) = ρ · exp(-x ρ / W̄)        for x ≥ 0

So P(latency > t) = Σ_j w_j · P(W > t - d_j), and a percentile is found by bisection. An atom
may instead carry a normal spread (a request's TPOT varies with the prefill chunks that happen
to share its decode steps); then its term is the normal tail `Q((t - d_j)/σ_j)`. Mixing
distributions (one workload served by two pools) concatenates their atoms with their shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

BISECT_ITERATIONS = 26


@dataclass(frozen=True, slots=True)
class Dist:
    """Atoms `values` (seconds) with `weights` (summing to 1), each followed by a wait with
    probability `wait_prob` and conditional mean `wait_mean_s`, or, where `spread_s` > 0,
    normally spread with that standard deviation (arrays of the same length)."""

    values: np.ndarray
    weights: np.ndarray
    wait_prob: np.ndarray
    wait_mean_s: np.ndarray
    spread_s: np.ndarray

    @staticmethod
    def atoms(
        values: np.ndarray | Sequence[float],
        weights: np.ndarray | Sequence[float] | None = None,
        wait_prob: float = 0.0,
        wait_mean_s: float = 0.0,
        spread_s: np.ndarray | None = None,
    ) -> Dist:
        v = np.asarray(values, dtype=np.float64)
        w = np.ones_like(v) if weights is None else np.asarray(weights, dtype=np.float64)
        w = w / w.sum()
        spread = np.zeros_like(v) if spread_s is None else np.asarray(spread_s, dtype=np.float64)
        return Dist(
            v, w, np.full_like(v, wait_prob), np.full_like(v, max(wait_mean_s, 1e-12)), spread
        )

    def exceed(self, t: float) -> float:
        """P(latency > t)."""
        gap = t - self.values
        waiting = np.where(
            gap < 0, 1.0, self.wait_prob * np.exp(-np.maximum(gap, 0.0) / self.wait_mean_s)
        )
        spread = self.spread_s > 0
        if spread.any():
            z = gap / np.where(spread, self.spread_s, 1.0)
            waiting = np.where(spread, normal_tail(z), waiting)
        return float(np.dot(self.weights, waiting))

    def quantile(self, q: float) -> float:
        """The q-quantile (e.g. 0.95 for p95), in seconds."""
        if not self.wait_prob.any() and not self.spread_s.any():
            order = np.argsort(self.values)
            cumulative = np.cumsum(self.weights[order])
            index = int(np.searchsorted(cumulative, q - 1e-12))
            return float(self.values[order][min(index, len(order) - 1)])
        lo = float((self.values - 10.0 * self.spread_s).min())
        hi = float((self.values + 10.0 * self.spread_s).max() + 50.0 * self.wait_mean_s.max())
        hi += 1e-9
        for _ in range(BISECT_ITERATIONS):
            mid = 0.5 * (lo + hi)
            if self.exceed(mid) > 1.0 - q:
                lo = mid
            else:
                hi = mid
        return hi

    def mean(self) -> float:
        return float(np.dot(self.weights, self.values + self.wait_prob * self.wait_mean_s))


def mix(parts: Sequence[tuple[Dist, float]]) -> Dist:
    """The mixture of distributions with the given shares."""
    total = sum(share for _, share in parts)
    assert total > 0, "a mixture needs a positive share"
    return Dist(
        np.concatenate([d.values for d, _ in parts]),
        np.concatenate([d.weights * (share / total) for d, share in parts]),
        np.concatenate([d.wait_prob for d, _ in parts]),
        np.concatenate([d.wait_mean_s for d, _ in parts]),
        np.concatenate([d.spread_s for d, _ in parts]),
    )


def normal_tail(z: np.ndarray) -> np.ndarray:
    """Q(z) = P(N(0,1) > z), from Abramowitz and Stegun 7.1.26 (error < 1.5e-7)."""
    x = np.abs(z) / np.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    erfc = poly * np.exp(-x * x)
    tail: np.ndarray = np.where(z >= 0, 0.5 * erfc, 1.0 - 0.5 * erfc)
    return tail


def erlang_c(servers: int, utilization: float) -> float:
    """Probability that an arrival waits in an M/M/c queue at per-server `utilization`."""
    if utilization <= 0.0:
        return 0.0
    if utilization >= 1.0:
        return 1.0
    offered = servers * utilization
    term = 1.0
    total = 1.0
    for k in range(1, servers):
        term *= offered / k
        total += term
    last = term * offered / servers / (1.0 - utilization)
    return last / (total + last)
