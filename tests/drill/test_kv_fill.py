"""kv-fill's long-context burst fits the drilled pool's context: a 10K-token prompt on a pool
of 8K tokens was refused by the gateway (a 400 for every burst request), which the drill's
client check counts against a stack that did right."""

from __future__ import annotations

import pytest

from inhouse.drill.drills.kv_fill import BURST, CONTEXT_MARGIN, burst_for


@pytest.mark.parametrize("max_model_len", [2048, 8192, 10_299])
def test_the_burst_fits_a_pool_whose_context_is_shorter(max_model_len: int) -> None:
    shape = burst_for(max_model_len)
    assert shape["input_tokens"] + shape["output_tokens"] + CONTEXT_MARGIN <= max_model_len
    assert shape["concurrency"] == BURST["concurrency"]
    assert shape["output_tokens"] == BURST["output_tokens"]


@pytest.mark.parametrize("max_model_len", [None, 32_768])
def test_a_long_enough_context_gets_the_whole_burst(max_model_len: int | None) -> None:
    assert burst_for(max_model_len) == BURST
