"""Layouts: the pool needs a plan compares."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from inhouse.plan.layout import build_layouts
from inhouse.plan.planner import characterize
from inhouse.plan.requirements import Requirements
from inhouse.plan.search import predict_workloads, search
from inhouse.plan.sensitivity import evaluate
from inhouse.plan.sizing import PoolNeed

from .plan_helpers import parse
from .test_long_prompt_ttft import _long

# What serving LoRA guests changes on the host's pool; every other field is the host's own.
LORA_FIELDS = {
    "streams",
    "slos",
    "degraded_slos",
    "quantiles",
    "min_replicas",
    "max_model_len",
    "lora_adapters",
}


def _split_with_guest() -> Requirements:
    """A long-context workload split at 6,000 tokens, and utility calls that may run as LoRA
    adapters on it (short prompts: all of them fit under the split)."""
    data = _long(long_prompt_tokens=6000, long_ttft_p95_ms=4000)
    guest: dict[str, Any] = {
        "name": "util",
        "kind": "utility",
        "tier": "batch",
        "traffic": {"avg_per_s": 1.0, "peak_per_s": 2.0},
        "prompt_tokens": {"p50": 300, "p95": 800},
        "output_tokens": {"p50": 50, "p95": 100},
        "slo": {"ttft_p95_ms": 2000, "itl_p95_ms": 100},
        "models": {"allowed": ["Llama-3.1-8B"], "lora_on": "chat"},
    }
    data["workloads"].append(guest)
    return parse(data)


def _standard_parts(requirements: Requirements) -> tuple[PoolNeed, PoolNeed]:
    """The split workload's standard pool, with the guest on it and without."""
    by_guests = {
        need.lora_adapters: need
        for layout in build_layouts(requirements, characterize(requirements))
        for need in layout.needs
        if need.name == "chat" and need.long_prompt_tokens is not None
    }
    return by_guests[("util",)], by_guests[()]


def test_a_pool_hosting_lora_guests_keeps_every_other_field_of_its_need() -> None:
    hosting, alone = _standard_parts(_split_with_guest())
    assert alone.prompt_range is not None  # the split's range is there to lose
    for field in dataclasses.fields(PoolNeed):
        if field.name not in LORA_FIELDS:
            assert getattr(hosting, field.name) == getattr(alone, field.name), field.name


def test_the_reforecast_of_a_split_pool_hosting_lora_guests_is_the_plans_at_todays_traffic() -> (
    None
):
    # The sensitivity table re-forecasts each pool's share of the traffic from its prompt range;
    # without it the standard pool took the long prompts back and its TTFT doubled at 1x.
    requirements = _split_with_guest()
    profiles = characterize(requirements)
    candidates = [
        c
        for c in search(requirements, profiles, requirements.planning).candidates
        if any(p.need.lora_adapters and p.need.long_prompt_tokens for p in c.pools)
    ]
    assert candidates
    planned = predict_workloads(candidates[0].pools)
    again = evaluate(candidates[0], profiles, None)
    assert again is not None
    for workload, metrics in planned.items():
        assert again[workload] == pytest.approx(metrics, rel=1e-9), workload
