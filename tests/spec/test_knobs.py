"""One knob type, end to end: every knob changes what it claims to change, in every place.

`EngineKnobs` says per field where it acts (`core`, `server`, `vllm`). Here each knob is moved
off a base value, one at a time, and each claim is checked against the real paths:

* `core`: a fleet simulation of the pool (the engine core, its memory split and step times)
  gives different request timings;
* `vllm`: `vllm serve`'s arguments differ;
* every knob the simulated engine takes round-trips through `inhouse engine`'s generated flags
  into the server's options unchanged; the `server` ones change what the server does;
* a knob acting nowhere but `vllm` is documented as vLLM-only in docs/stack.md.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from inhouse.cli.engine import add_arguments, options_from_args
from inhouse.engine.config import EngineConfig
from inhouse.fleet import simulate_stack
from inhouse.launch.engine_args import simulated_engine_args, vllm_serve_args
from inhouse.launch.knob_flags import engine_flag, knobs_from_args
from inhouse.plan.mix import MixedWorkload
from inhouse.server.serve import _load
from inhouse.server.state import EngineOptions, EngineState
from inhouse.spec.knobs import EngineKnobs, knob_names, knob_of
from inhouse.spec.stack import StackSpec, parse_stack
from inhouse.workload import AgentWorkload, Lengths

DOCS = Path(__file__).resolve().parents[2] / "docs" / "stack.md"

# The pool the core claims are checked on: Llama-3.1-8B on one L4 holds ~32k tokens of KV, so
# a dozen agent sessions press on the cache (preemption, eviction, the host tier all matter).
BASE: dict[str, Any] = {
    "max_num_seqs": 16,
    "max_num_batched_tokens": 1024,
    "max_model_len": 16384,
    "otlp_traces_endpoint": "grpc://collector-a:4317",
}
# One value off the base per knob.
MOVED: dict[str, Any] = {
    "max_num_seqs": 4,
    "max_num_batched_tokens": 512,
    "max_model_len": 6144,
    "long_prefill_token_threshold": 256,
    "gpu_memory_utilization": 0.8,
    "enable_prefix_caching": False,
    "enable_chunked_prefill": False,
    "scheduling_policy": "fcfs",
    "block_size": 32,
    "kv_cache_dtype": "fp8",
    "host_kv_gib": 8.0,
    "max_loras": 1,
    "max_lora_rank": 64,
    "tool_call_parser": "hermes",
    "otlp_traces_endpoint": "grpc://collector-b:4317",
    "collect_detailed_traces": "model",
    "shutdown_timeout_s": 5,
    "load_time_s": 0.3,
    "extra_args": ("--dtype", "bfloat16"),
}


def knobs(name: str | None = None) -> EngineKnobs:
    values = dict(BASE)
    if name is not None:
        values[name] = MOVED[name]
        if name == "enable_chunked_prefill":
            values["max_num_batched_tokens"] = values["max_model_len"]  # vLLM's rule
    return EngineKnobs(**values)


def pool_stack(knob_values: EngineKnobs) -> StackSpec:
    pool = {
        "name": "chat",
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "gpu": "l4",
        "replicas": 1,
        "lora_adapters": ["a", "b"],
        "knobs": knob_values.model_dump(),
    }
    return parse_stack({"version": 1, "name": "k", "pools": [pool]})


def test_every_knob_has_a_moved_value_and_says_where_it_acts() -> None:
    assert set(MOVED) == set(knob_names())
    for name in knob_names():
        assert knob_of(name).acts, name
        assert MOVED[name] != EngineKnobs.model_fields[name].default or name in BASE, name


def test_the_core_config_has_the_knobs_names_and_defaults() -> None:
    config_fields = {f.name: f for f in dataclasses.fields(EngineConfig)}
    for name in knob_names():
        default = EngineKnobs.model_fields[name].default
        if name in config_fields and default is not None:
            assert config_fields[name].default == default, name


def _timings(knob_values: EngineKnobs) -> list[tuple[Any, ...]]:
    sessions = dict(
        sessions=8,
        num_apps=2,
        system_prompt_tokens=3000,
        first_message=Lengths(300, 900),
        tool_output=Lengths(1000, 4000),
        output=Lengths(60, 200),
        think_time_s=1.0,
        ramp_s=2.0,
    )
    # Two tiers of the same traffic (the scheduling policy has priorities to order by), each on
    # a LoRA adapter of its own (the adapters' slots and costs matter).
    parts = (
        ("a", AgentWorkload(**sessions, model="a")),
        ("b", AgentWorkload(**sessions, model="b")),
    )
    workload = MixedWorkload(parts, priorities=(("b", 1),))
    result = simulate_stack(pool_stack(knob_values), workload, duration_s=30, seed=1)
    return [
        (r.request_id, r.first_token_s, r.finish_s, r.num_cached_tokens, r.error)
        for r in result.records
    ]


@pytest.fixture(scope="module")
def base_timings() -> list[tuple[Any, ...]]:
    return _timings(knobs())


@pytest.mark.parametrize("name", [n for n in knob_names() if "core" in knob_of(n).acts])
def test_a_core_knob_changes_the_simulation(name: str, base_timings: list[tuple[Any, ...]]) -> None:
    assert _timings(knobs(name)) != base_timings


@pytest.mark.parametrize("name", [n for n in knob_names() if "vllm" in knob_of(n).acts])
def test_a_vllm_knob_changes_vllms_arguments(name: str) -> None:
    base, moved = pool_stack(knobs()), pool_stack(knobs(name))
    assert vllm_serve_args(moved, moved.pools[0], 0, 8000) != vllm_serve_args(
        base, base.pools[0], 0, 8000
    )


def _engine_options(stack: StackSpec) -> EngineOptions:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return options_from_args(parser.parse_args(simulated_engine_args(stack, stack.pools[0], 0, 1)))


def _simulated(knob_values: EngineKnobs) -> EngineKnobs:
    """What the simulated engine takes of the knobs: the vLLM-only ones at their defaults."""
    kept = {n: getattr(knob_values, n) for n in knob_names() if engine_flag(n)}
    return EngineKnobs(**kept)


@pytest.mark.parametrize("name", [None, *knob_names()])
def test_the_simulated_engine_gets_every_knob_it_takes_through_its_flags(
    name: str | None,
) -> None:
    knob_values = knobs(name)
    options = _engine_options(pool_stack(knob_values))
    assert options.knobs == _simulated(knob_values)
    assert options.replica_spec().knobs == options.knobs
    assert options.replica_spec().lora_adapters == ("a", "b")


def test_a_knob_the_simulated_engine_does_not_take_is_documented_as_vllm_only() -> None:
    text = DOCS.read_text(encoding="utf-8")
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(\w+)` \|.*$", text, re.M)}
    for name in knob_names():
        assert name in rows, f"docs/stack.md has no row for knobs.{name}"
        if knob_of(name).acts == {"vllm"}:
            assert engine_flag(name) == ""
            assert "vLLM only" in rows[name], f"knobs.{name}: say it is vLLM only"
        else:
            assert engine_flag(name), name


def test_load_time_delays_readiness_in_the_simulated_server() -> None:
    async def loaded_after(load_time_s: float, wait_s: float) -> bool:
        options = EngineOptions(
            model="Llama-3.1-8B", knobs=EngineKnobs(max_model_len=512, load_time_s=load_time_s)
        )
        state = EngineState.build(options)
        task = asyncio.create_task(_load(state))
        await asyncio.sleep(wait_s)
        loaded = state.is_loaded
        task.cancel()
        return loaded

    assert asyncio.run(loaded_after(0.0, 0.05))
    assert not asyncio.run(loaded_after(MOVED["load_time_s"], 0.05))
    # NOTE: shutdown_timeout_s reaches the server through the flag round trip above;
    # tests/server/test_socket.py::test_drain_timeout_aborts_the_rest shows it cut the drain.


def test_a_bad_knob_flag_names_the_flag() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(Exception, match=r"--gpu-memory-utilization 1\.5"):
        knobs_from_args(parser.parse_args(["--model", "m", "--gpu-memory-utilization", "1.5"]))
