"""Engine knobs: vLLM's own, by vLLM's names, as one type from the stack file to vLLM's arguments.

`EngineKnobs` is what a stack pool's `knobs:` holds. The same value, unchanged and unrenamed,
is resolved by `engine.build_replica` into the engine core's `EngineConfig` (so the fleet
simulator and the simulated engine run it alike), becomes `inhouse engine`'s flags (generated
from the fields by `inhouse.launch.knob_flags`, parsed back by the same module) and `vllm serve`'s
arguments (`inhouse.launch.engine_args`).

Each field carries a `Knob` saying where it acts:

* `core`: the engine core, its memory split or its step times: it changes what the fleet
  simulator and the simulated engine compute;
* `server`: the simulated engine's HTTP server only (draining, the simulated load delay);
* `vllm`: it is rendered into vLLM's arguments.

`tests/spec/test_knobs.py` holds each claim to account: a knob acting in `core` changes a
simulation, one acting in `vllm` changes vLLM's arguments, one acting in `server` changes the
simulated engine's server, and every knob but the vLLM-only ones round-trips through the
simulated engine's flags.

Defaults are vLLM's, with two deliberate exceptions that are always rendered, so vLLM never
runs its own default: `scheduling_policy` is `priority` (the gateway maps tenant tiers to vLLM's
`priority`; with every request at priority 0 it is first come, first served) and
`shutdown_timeout_s` is 30 (vLLM's is 0: a rolling update would abort every stream).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field

from inhouse.spec.base import SpecModel

Place = Literal["core", "server", "vllm"]


@dataclass(frozen=True, slots=True)
class Knob:
    """Where one knob acts, and how it is spelled on the command lines.

    * `acts`: the places it changes (see the module docstring).
    * `flag`: `inhouse engine`'s flag for it ('' for a vLLM-only knob); vLLM's own by default.
    * `vllm_flag`: vLLM's flag when it differs from `flag` ('' when rendered by hand or not
      at all: see `inhouse.launch.knob_flags.vllm_knob_args`).
    * `always`: rendered for vLLM even at its default (vLLM's own default differs).
    * `explicit`: rendered for vLLM when the stack file sets it, even to the default (vLLM's
      default varies by platform; unset, the platform's is left alone).
    """

    acts: frozenset[Place]
    flag: str = ""
    vllm_flag: str = ""
    always: bool = False
    explicit: bool = False


def _acts(
    *places: Place,
    flag: str = "",
    vllm_flag: str = "",
    always: bool = False,
    explicit: bool = False,
) -> Knob:
    return Knob(frozenset(places), flag, vllm_flag, always, explicit)


class EngineKnobs(SpecModel):
    """vLLM's own knobs, by vLLM's names. `None` takes the engine's default (docs/stack.md)."""

    max_num_seqs: Annotated[int | None, _acts("core", "vllm")] = Field(
        default=None, gt=0, description="most sequences in one step"
    )
    max_num_batched_tokens: Annotated[int | None, _acts("core", "vllm")] = Field(
        default=None, gt=0, description="token budget of one step"
    )
    max_model_len: Annotated[int | None, _acts("core", "vllm")] = Field(
        default=None, gt=0, description="longest prompt plus output"
    )
    long_prefill_token_threshold: Annotated[int, _acts("core", "vllm")] = Field(
        default=0, ge=0, description="cap on one prompt's chunk per step (0: no cap)"
    )
    gpu_memory_utilization: Annotated[float, _acts("core", "vllm", always=True)] = Field(
        default=0.9, gt=0, le=1, description="share of GPU memory the engine takes"
    )
    enable_prefix_caching: Annotated[bool, _acts("core", "vllm", always=True)] = True
    enable_chunked_prefill: Annotated[bool, _acts("core", "vllm")] = True
    scheduling_policy: Annotated[
        Literal["fcfs", "priority"], _acts("core", "vllm", always=True)
    ] = "priority"
    # NOTE: rendered only when the stack sets it: vLLM's CPU build refuses 16 (its blocks are
    # 128 tokens), while every GPU backend's default is 16.
    block_size: Annotated[int, _acts("core", "vllm", explicit=True)] = Field(default=16, gt=0)
    kv_cache_dtype: Annotated[str, _acts("core", "vllm")] = "auto"
    host_kv_gib: Annotated[float, _acts("core", "vllm")] = Field(
        default=0.0, ge=0, description="host-RAM KV tier per replica"
    )
    max_loras: Annotated[int | None, _acts("core", "vllm")] = Field(
        default=None,
        gt=0,
        description="adapters in one batch (GPU slots); null: one per adapter of the pool",
    )
    max_lora_rank: Annotated[int, _acts("core", "vllm")] = Field(
        default=16, gt=0, description="largest adapter rank; sizes each slot and its loads"
    )
    tool_call_parser: Annotated[str | None, _acts("vllm")] = Field(
        default=None,
        description="vLLM's tool-call parser; null: the catalog's for the model family, "
        "'none': tool calling off",
    )
    otlp_traces_endpoint: Annotated[str | None, _acts("vllm")] = Field(
        default=None,
        description="OTLP (gRPC) endpoint vLLM sends traces to; null: off, or Tempo's when "
        "`observability.tracing.enabled` (render fills it in)",
    )
    collect_detailed_traces: Annotated[str | None, _acts("vllm")] = Field(
        default=None,
        description="vLLM's detailed-trace modules (model, worker, all) with tracing on; null: "
        "none, or all when `observability.tracing.detailed`",
    )
    shutdown_timeout_s: Annotated[
        int, _acts("server", "vllm", flag="--shutdown-timeout", always=True)
    ] = Field(default=30, ge=0, description="seconds in-flight requests get on SIGTERM")
    load_time_s: Annotated[float, _acts("server")] = Field(
        default=0.0, ge=0, description="simulated weight-loading time"
    )
    extra_args: Annotated[tuple[str, ...], _acts("vllm")] = Field(
        default=(), description="more `vllm serve` arguments"
    )


# What `vllm serve` runs with when given no knob flags: how benchmark and calibration rows were
# measured, so `inhouse predict` and the calibration fit model exactly that.
VLLM_SERVE_DEFAULTS = EngineKnobs(scheduling_policy="fcfs", shutdown_timeout_s=0)


def knob_of(name: str) -> Knob:
    """The `Knob` of field `name` of `EngineKnobs`."""
    for item in EngineKnobs.model_fields[name].metadata:
        if isinstance(item, Knob):
            return item
    raise AssertionError(f"EngineKnobs.{name} has no Knob: say where it acts")


def knob_names() -> tuple[str, ...]:
    return tuple(EngineKnobs.model_fields)
