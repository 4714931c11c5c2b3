from __future__ import annotations

import math
import random
import statistics

import pytest

from inhouse.workload.arrivals import Arrivals, GapSampler, Lengths, sample_think_s


def gaps(arrivals: Arrivals, n: int = 20_000) -> list[float]:
    sampler = GapSampler(arrivals, random.Random(7))
    return [sampler.next_gap_s() for _ in range(n)]


def test_constant_arrivals_are_exactly_spaced() -> None:
    assert set(gaps(Arrivals("constant", rate_per_s=4.0), 10)) == {0.25}


def test_poisson_gaps_have_the_rate_and_unit_variation() -> None:
    sample = gaps(Arrivals("poisson", rate_per_s=5.0))
    assert statistics.fmean(sample) == pytest.approx(0.2, rel=0.03)
    assert statistics.pstdev(sample) / statistics.fmean(sample) == pytest.approx(1.0, rel=0.05)


def test_gamma_burstiness_sets_the_variation_at_the_same_rate() -> None:
    bursty = gaps(Arrivals("gamma", rate_per_s=5.0, burstiness=0.25))
    regular = gaps(Arrivals("gamma", rate_per_s=5.0, burstiness=4.0))
    for sample, shape in ((bursty, 0.25), (regular, 4.0)):
        assert statistics.fmean(sample) == pytest.approx(0.2, rel=0.05)
        cv = statistics.pstdev(sample) / statistics.fmean(sample)
        assert cv == pytest.approx(1 / math.sqrt(shape), rel=0.08)


def test_rate_scaling_multiplies_rate_or_concurrency() -> None:
    assert Arrivals("poisson", rate_per_s=3.0).scaled(2.0).rate_per_s == 6.0
    assert Arrivals("closed", concurrency=10).scaled(1.5).concurrency == 15
    assert Arrivals("closed", concurrency=1).scaled(0.1).concurrency == 1


def test_lengths_hit_their_median_and_95th_percentile() -> None:
    lengths = Lengths(1000, 4000)
    rng = random.Random(3)
    sample = sorted(lengths.sample(rng) for _ in range(20_000))
    assert sample[10_000] == pytest.approx(1000, rel=0.04)
    assert sample[19_000] == pytest.approx(4000, rel=0.06)
    assert Lengths(256, 256).sample(rng) == 256
    assert {Lengths(100, 10_000, 50, 200).sample(rng) for _ in range(200)} <= set(range(50, 201))
    assert Lengths.parse("300:900") == Lengths(300, 900)
    assert Lengths.parse("128") == Lengths(128, 128)


def test_think_time_has_its_floor_and_mean() -> None:
    rng = random.Random(5)
    sample = [sample_think_s(rng, 3.0, 0.5) for _ in range(20_000)]
    assert min(sample) >= 0.5
    assert statistics.fmean(sample) == pytest.approx(3.0, rel=0.03)
    assert sample_think_s(rng, 0.0, 0.0) == 0.0
