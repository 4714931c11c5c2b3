"""Parallel layouts: derived defaults, the GPU count, and layouts a model cannot take."""

from __future__ import annotations

import pytest

from inhouse.errors import SpecError
from inhouse.spec import get_model
from inhouse.spec.parallel import ParallelLayout, as_layout, check_layout


def test_plain_tp_puts_experts_on_the_tp_ranks() -> None:
    layout = ParallelLayout(tp=8)
    assert (layout.moe_tp, layout.moe_ep, layout.num_gpus) == (8, 1, 8)
    assert layout.is_plain_tp
    assert as_layout(8) == layout


def test_expert_parallel_on_tp_ranks_derives_moe_tp() -> None:
    layout = ParallelLayout(tp=4, moe_ep=4)
    assert (layout.moe_tp, layout.moe_ep, layout.num_gpus) == (1, 4, 4)
    assert not layout.is_plain_tp


def test_attention_dp_multiplies_the_gpus_and_spreads_the_experts() -> None:
    layout = ParallelLayout(tp=2, attention_dp=4, moe_ep=8)
    assert (layout.num_gpus, layout.moe_group, layout.moe_tp) == (8, 8, 1)
    assert layout.describe() == "TP2 DP-attention 4 EP8"


def test_experts_must_cover_the_same_gpus_as_attention() -> None:
    with pytest.raises(SpecError, match=r"moe_tp=4 x moe_ep=4 must equal tp=4"):
        ParallelLayout(tp=4, moe_tp=4, moe_ep=4)


@pytest.mark.parametrize("field", ["tp", "attention_dp", "pp"])
def test_non_positive_degrees_name_the_field(field: str) -> None:
    with pytest.raises(SpecError, match=f"{field}=0"):
        ParallelLayout(**{field: 0})


def test_heads_that_do_not_split_name_the_fix() -> None:
    with pytest.raises(SpecError, match="128 attention heads, which do not split 72 ways"):
        check_layout(ParallelLayout(tp=72), get_model("DeepSeek-R1"))


def test_experts_that_do_not_split_are_refused() -> None:
    with pytest.raises(SpecError, match="moe_ep=3"):
        check_layout(ParallelLayout(tp=1, attention_dp=3, moe_ep=3), get_model("gpt-oss-120b"))


def test_pipeline_parallelism_is_refused_as_not_modelled() -> None:
    with pytest.raises(SpecError, match="pipeline parallelism is not modelled"):
        check_layout(ParallelLayout(tp=4, pp=2), get_model("Llama-3.1-70B"))


def test_a_dense_model_has_no_experts_to_spread() -> None:
    with pytest.raises(SpecError, match="is dense and has no experts"):
        check_layout(ParallelLayout(tp=4, moe_ep=4), get_model("Llama-3.1-70B"))
    check_layout(ParallelLayout(tp=8), get_model("DeepSeek-V3"))
