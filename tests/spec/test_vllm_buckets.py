from __future__ import annotations

import pytest

from inhouse.spec.vllm_buckets import build_1_2_5_buckets, histogram_quantile


@pytest.mark.parametrize(
    ("q", "cumulative", "expected"),
    [
        (0.5, [0.3, 0.7], 15.0),  # inside (10, 20]: 10 + 10 x (0.5 - 0.3) / 0.4
        (0.2, [0.4, 1.0], 5.0),  # the first bucket interpolates from 0
        (0.95, [0.3, 0.7], 20.0),  # in +Inf: the highest finite bound
        (0.3, [0.3, 0.7], 10.0),  # exactly on a bound
        (0.5, [0.5, 0.5], 10.0),  # an empty bucket after the rank: its lower bound
    ],
)
def test_histogram_quantile_interpolates_as_prometheus_does(
    q: float, cumulative: list[float], expected: float
) -> None:
    assert histogram_quantile(q, [10.0, 20.0], cumulative) == pytest.approx(expected)


def test_token_buckets_are_vllms_1_2_5_up_to_max_model_len() -> None:
    assert build_1_2_5_buckets(71680)[-4:] == [5000, 10000, 20000, 50000]
    assert build_1_2_5_buckets(1) == [1]
