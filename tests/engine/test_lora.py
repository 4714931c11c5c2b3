"""LoRA adapters in the engine core: GPU slots (`max_loras`), swaps and kernel time."""

from __future__ import annotations

import pytest

from inhouse.engine import EngineCore, Request
from inhouse.engine.lora_slots import LoraSlots
from inhouse.hashing import hash_spans
from inhouse.perf.lora import (
    LORA_TOKEN_SLOWDOWN,
    LoraCost,
    adapter_params,
    lora_cost,
)
from inhouse.spec import get_gpu, get_model

from .test_engine_core import run_to_completion


def cost(max_loras: int, load_s: float = 0.01) -> LoraCost:
    return LoraCost(2, max_loras, 16, 1e8, load_s)


def test_slots_keep_the_most_recent_idle_adapter_and_refuse_one_too_many() -> None:
    slots = LoraSlots(2)
    assert slots.acquire("a") and slots.acquire("b")  # both loaded
    assert not slots.can_run("c")  # two running adapters fill both slots
    slots.release("a")
    assert slots.can_run("c")
    assert slots.acquire("c")  # replaces the idle "a", not the running "b"
    assert slots.resident == ("b", "c")
    slots.release("b")
    assert not slots.acquire("b")  # still in its slot: no load
    assert slots.num_loads == 3


def test_one_slot_runs_the_second_adapter_after_the_first_ones_requests(make_engine) -> None:
    # vLLM's multi-LoRA example: with max_loras=1, requests of the second adapter run after
    # every request of the first has finished; base-model requests run beside either.
    engine: EngineCore = make_engine(lora=cost(1))
    first = [Request(f"a{i}", 50, 20, 0.0, lora="a") for i in range(2)]
    second = Request("b0", 50, 20, 0.0, lora="b")
    base = Request("base", 50, 20, 0.0)
    for request in [*first, second, base]:
        engine.add_request(request)
    run_to_completion(engine)
    assert second.first_scheduled_s is not None and base.first_scheduled_s == 0.0
    assert second.first_scheduled_s >= max(r.finish_s or 0.0 for r in first)
    assert engine.scheduler.lora_slots is not None
    assert engine.scheduler.lora_slots.num_loads == 2


def test_enough_slots_run_both_adapters_at_once(make_engine) -> None:
    engine: EngineCore = make_engine(lora=cost(2))
    a, b = Request("a", 50, 20, 0.0, lora="a"), Request("b", 50, 20, 0.0, lora="b")
    engine.add_request(a)
    engine.add_request(b)
    run_to_completion(engine)
    assert a.first_scheduled_s == b.first_scheduled_s == 0.0


def test_an_adapter_step_pays_the_kernels_and_the_load(make_engine) -> None:
    def first_step_s(lora: str | None) -> float:
        engine: EngineCore = make_engine(lora=cost(2, load_s=0.01))
        engine.add_request(Request("r", 64, 4, 0.0, hash_spans([(1, 64)], 16), lora=lora))
        result = engine.step(0.0, max_steps=1)
        assert result is not None
        return result.end_s

    base = first_step_s(None)
    # every token is the adapter's: 4.5% more time, plus one load into a slot
    expected = base + LORA_TOKEN_SLOWDOWN * base + 0.01
    assert first_step_s("a") == pytest.approx(expected, rel=1e-12)


def test_a_rank_16_adapter_on_llama_70b_is_about_400_mb() -> None:
    model = get_model("Llama-3.3-70B")
    # all seven projections of 80 layers: rank x (in + out) each
    assert adapter_params(model, 16) == 16 * 80 * (
        (8192 + 8192) + 2 * (8192 + 1024) + (8192 + 8192) + 2 * (8192 + 28672) + (28672 + 8192)
    )
    lora = lora_cost(model, get_gpu("h100_sxm"), 4, 3, 3, 16)
    assert lora.adapter_bytes_per_gpu == pytest.approx(414e6 / 4, rel=0.01)
    # over a 64 GB/s PCIe Gen5 x16 link: about 1.6 ms per swap
    assert lora.load_s == pytest.approx(lora.adapter_bytes_per_gpu / 64e9)
