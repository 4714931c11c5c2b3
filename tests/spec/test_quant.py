"""Per-part quantization of checkpoints, as the published releases do it."""

from __future__ import annotations

import pytest

from inhouse.errors import SpecError
from inhouse.spec.quant import normalize_quant, resolve_weight_quants


def test_eight_bit_checkpoints_quantize_every_part() -> None:
    quants = resolve_weight_quants("fp8", True, "fp8", "fp8_block")
    assert {quants.attention.name, quants.dense.name, quants.experts.name} == {"fp8"}
    assert quants.name == "fp8"


def test_four_bit_moe_checkpoints_keep_attention_in_bf16() -> None:
    quants = resolve_weight_quants("fp4", True, "nvfp4", "nvfp4")
    assert (quants.attention.name, quants.dense.name, quants.experts.name) == (
        "bf16",
        "fp4",
        "fp4",
    )


def test_int4_weight_only_quantizes_only_the_routed_experts() -> None:
    quants = resolve_weight_quants("int4", True, "int4_wo", "int4_wo")
    assert (quants.attention.name, quants.dense.name, quants.experts.name) == (
        "bf16",
        "bf16",
        "w4a16",
    )
    assert quants.name == "w4a16 experts, bf16 MLP, bf16 attention"


def test_dense_four_bit_checkpoints_quantize_attention_too() -> None:
    quants = resolve_weight_quants("fp4", False, "nvfp4", "nvfp4")
    assert quants.attention.name == "fp4"


def test_unknown_mode_is_a_clear_error() -> None:
    with pytest.raises(SpecError, match="unknown quantization 'fp5'"):
        resolve_weight_quants("fp8", True, "fp5", "")


def test_fp4_computes_at_fp4_only_where_there_are_fp4_units() -> None:
    assert normalize_quant("nvfp4").compute == "fp4"
