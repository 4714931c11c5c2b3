"""Per-engine constants of the step-time model, fitted by `scripts/fit_calibration.py`.

They describe software (kernels, scheduler, API server), not hardware: the same constants apply
to every GPU, whose physics come from the catalog. That is what lets the model predict an H200
or a B200 it was never fitted on.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cache
from importlib import resources
from typing import Any

import yaml

from inhouse.errors import SpecError


@dataclass(frozen=True, slots=True)
class EngineConstants:
    """Efficiencies and overheads of one serving engine.

    * `eta_bw`: fraction of peak HBM bandwidth that weight and KV reads achieve.
    * `eta_compute`: fraction of dense peak FLOP/s that 16-bit GEMMs achieve.
    * `eta_compute_fp8`: the same for 8-bit and 4-bit GEMMs (FP8/INT8/FP4 kernels reach a
      different fraction of their own, higher, peak).
    * `eta_attention`: fraction of peak FLOP/s that prefill attention achieves.
    * `step_overhead_s`: fixed cost of one step (scheduling, input prep, sampling, launch).
    * `layer_overhead_s`: per-layer, per-step cost (kernel launches, norms, small ops).
    * `seq_overhead_s`: per-sequence, per-step cost (sampling, detokenization, bookkeeping).
    * `allreduce_latency_scale`: multiplies the catalog's link latency per all-reduce.
    * `request_overhead_s`: time from a request's arrival to the scheduler seeing it
      (HTTP parsing, IPC), paid once per request.
    * `prompt_token_overhead_s`: the part of that delay that grows with the prompt
      (tokenization, input processing), per prompt token.
    * `closed_loop_spread`: how far closed-loop clients de-phase after the first wave, as a
      fraction of one full cycle (1: evenly spread; 0: locked in waves). A property of real
      benchmark runs against this engine (client and API-server timing noise), used only by
      `inhouse predict`'s closed-loop model.
    * `max_num_batched_tokens`, `max_num_seqs`: the engine's defaults for an online server.
    * `mixed_batches`: whether the scheduler mixes prefill chunks with decodes in one step
      (vLLM V1) or runs them as separate batches (SGLang's default). Not fitted: a fact.
    """

    name: str
    eta_bw: float
    eta_compute: float
    eta_compute_fp8: float
    eta_attention: float
    step_overhead_s: float
    layer_overhead_s: float
    seq_overhead_s: float
    allreduce_latency_scale: float
    request_overhead_s: float
    prompt_token_overhead_s: float
    closed_loop_spread: float
    max_num_batched_tokens: int
    max_num_seqs: int
    fitted_on: str = ""
    mixed_batches: bool = True

    def with_values(self, **values: float) -> EngineConstants:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data.update(values)
        return EngineConstants(**data)


FITTED_FIELDS = (
    "eta_bw",
    "eta_compute",
    "eta_compute_fp8",
    "eta_attention",
    "step_overhead_s",
    "layer_overhead_s",
    "seq_overhead_s",
    "allreduce_latency_scale",
    "request_overhead_s",
    "prompt_token_overhead_s",
    "closed_loop_spread",
)


@cache
def _engine_table() -> dict[str, EngineConstants]:
    text = resources.files("inhouse.perf").joinpath("data", "engines.yaml").read_text("utf-8")
    raw: dict[str, dict[str, Any]] = yaml.safe_load(text)
    return {name: EngineConstants(name=name, **values) for name, values in raw.items()}


def known_backends() -> list[str]:
    return sorted(_engine_table())


def get_engine_constants(backend: str) -> EngineConstants:
    key = backend.strip().lower()
    table = _engine_table()
    if key not in table:
        raise SpecError(f"unknown backend {backend!r}; known: {', '.join(known_backends())}")
    return table[key]
