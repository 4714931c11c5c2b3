"""vLLM's histogram bucket lists (vllm/v1/metrics, as exposed by 0.32): the one copy that the
simulated engine exposes, the gateway reuses (so its quantiles compare with vLLM's bucket for
bucket) and the alert rules interpolate over."""

from __future__ import annotations

from collections.abc import Sequence

TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS_S = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
    50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def build_1_2_5_buckets(max_value: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to `max_value`: vLLM's token-count buckets (prompt and
    generation tokens per request, up to `max_model_len`)."""
    out: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return out
            out.append(value)
        exponent += 1


def histogram_quantile(q: float, bounds: Sequence[float], cumulative: Sequence[float]) -> float:
    """What Prometheus's `histogram_quantile(q, ...)` returns for a histogram whose buckets `le`
    = `bounds` (ascending, finite; +Inf implied) hold the `cumulative` share of observations
    (ascending, the last finite one at most 1): linear interpolation inside the bucket where
    the rank falls, from 0 for the first bucket; the highest finite bound when the rank falls
    in +Inf. Plans set trigger levels with it, so that a level is what the rule will read."""
    assert len(bounds) == len(cumulative) and bounds, "one cumulative share per bucket"
    lower, below = 0.0, 0.0
    for bound, share in zip(bounds, cumulative, strict=True):
        if share >= q:
            inside = share - below
            return bound if inside <= 0 else lower + (bound - lower) * (q - below) / inside
        lower, below = bound, share
    return float(bounds[-1])
