"""The sizing arithmetic the memo shows, with exact expectations."""

import pytest

from inhouse.perf.memory import kv_bytes_per_token, weight_bytes
from inhouse.plan.cost import (
    api_monthly,
    breakeven_months,
    hardware_usd_per_hour,
    node_cost,
    usd_per_million,
)
from inhouse.plan.requirements import ApiPrice, HardwareOffer, Planning
from inhouse.plan.sizing import Choice, Rejected, size_choice
from inhouse.spec import get_model, normalize_quant
from inhouse.spec.catalog import GIB

from .plan_helpers import need_for

LLAMA_70B = "Llama-3.3-70B"


def test_70b_bf16_weights_are_about_141_gb() -> None:
    weights = weight_bytes(get_model(LLAMA_70B), normalize_quant("bf16"))
    assert weights / 1e9 == pytest.approx(141.1, abs=0.5)


def test_70b_bf16_does_not_fit_one_h100_but_fp8_fits_two() -> None:
    need = need_for(LLAMA_70B, max_model_len=8192)
    planning = Planning()
    bf16 = size_choice(
        need, Choice(LLAMA_70B, "h100_sxm", "bf16", "auto", 1, 2048, 8192), planning, 1.0
    )
    assert isinstance(bf16, Rejected)
    assert bf16.metric == "memory"
    assert "exceed usable memory" in bf16.reason
    fp8 = size_choice(
        need, Choice(LLAMA_70B, "h100_sxm", "fp8", "auto", 2, 2048, 8192), planning, 1.0
    )
    assert not isinstance(fp8, Rejected), fp8
    assert fp8.replica.memory.weight_bytes_per_gpu / 1e9 == pytest.approx(36.35, abs=0.2)


def test_kv_per_token_is_320_kib_in_bf16_and_a_24k_context_is_7_5_gib() -> None:
    per_token = kv_bytes_per_token(get_model(LLAMA_70B), "auto")
    assert per_token == 320 * 1024
    assert per_token * 24 * 1024 / GIB == 7.5
    assert kv_bytes_per_token(get_model(LLAMA_70B), "fp8") == 160 * 1024


def test_cost_per_million_tokens_is_usd_per_hour_over_tokens_per_hour() -> None:
    # $/1M = $/h ÷ (tokens/s × 3600) × 10⁶
    assert usd_per_million(36.0, 1000.0) == pytest.approx(10.0)
    assert usd_per_million(15.38, 70_000.0) == pytest.approx(15.38 / (70_000 * 3600) * 1e6)
    assert usd_per_million(10.0, 0.0) is None


def test_owned_node_all_in_per_hour() -> None:
    offer = HardwareOffer(
        gpu="h100_sxm",
        pricing="capex",
        capex_usd_per_node=300_000,
        amortization_years=3,
        power_kw_per_node=10.2,
        avg_power_fraction=0.7,
        pue=1.3,
        usd_per_kwh=0.12,
        ops_usd_per_node_year=25_000,
    )
    cost = node_cost(offer)
    assert cost.capex_usd_per_hour == pytest.approx(300_000 / (3 * 8760))
    assert cost.power_usd_per_hour == pytest.approx(10.2 * 0.7 * 1.3 * 0.12)
    assert cost.ops_usd_per_hour == pytest.approx(25_000 / 8760)
    assert cost.usd_per_hour == pytest.approx(11.4155 + 1.11384 + 2.85388, abs=1e-3)
    assert "node all-in $15.38/h" in cost.arithmetic
    # Bought hardware is paid by the node: 9 GPUs are two nodes.
    assert hardware_usd_per_hour(offer, 9) == pytest.approx(2 * cost.usd_per_hour)


def test_rented_gpus_are_paid_by_the_gpu() -> None:
    offer = HardwareOffer(gpu="h200_sxm", pricing="hourly", usd_per_gpu_hour=4.5)
    assert hardware_usd_per_hour(offer, 9) == pytest.approx(40.5)


def test_api_spend_prices_cached_input_apart() -> None:
    api = ApiPrice(
        name="x",
        input_usd_per_million=2.0,
        cached_input_usd_per_million=0.5,
        output_usd_per_million=8.0,
    )
    month = {
        "input_tokens": 10e6,
        "cached_input_tokens": 4e6,
        "output_tokens": 1e6,
        "requests": 1.0,
    }
    assert api_monthly(api, month) == pytest.approx(6 * 2.0 + 4 * 0.5 + 1 * 8.0)


def test_breakeven_months() -> None:
    assert breakeven_months(300_000, 3_000, 63_000) == pytest.approx(5.0)
    assert breakeven_months(300_000, 3_000, 3_000) is None
