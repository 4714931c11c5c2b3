"""Physical lower bounds of a measured run: what no engine can beat on the catalog's hardware.

Before fitting, every measured row is held against two bounds computed from the catalog alone
(peak FLOP/s and HBM bandwidth, every efficiency 1, no overheads, no communication):

* **TPOT** is at least one decode step of a single sequence: the busiest GPU reads its share
  of the weights one token needs (attention, dense MLP, LM head, and `k` of the experts spread
  over `moe_ep` GPUs) and the KV of an `isl`-token context.
* **TTFT** is at least the prefill of one prompt: its GEMM FLOPs on the busiest GPU at the
  peak of its quantization, or reading the weights, whichever is longer.

A row faster than a bound cannot have run as labelled (a wrong layout, GPU or shape) and is
reported, not fitted.

One rule compares a row with its own configuration's other runs (`queued_outside`): a run
whose mean TPOT is lower than a run of the same configuration with fewer clients decoded
smaller batches with more clients. A KV limit inside the engine cannot do that (the run
with fewer clients shows the cache holds them all), so when its mean TTFT is also longer
than its whole decode, most of its clients were waiting in front of the engine, under a
server or client cap the corpus does not record. Such a row is reported and left out: no
input of the model says what the cap was.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from inhouse.calibration.corpus import CorpusRow
from inhouse.engine.build import build_replica
from inhouse.errors import DoesNotFitError, SpecError
from inhouse.perf.memory import WeightBreakdown, kv_bytes_per_token_per_gpu
from inhouse.spec.catalog import GpuSpec, ModelSpec
from inhouse.spec.parallel import ParallelLayout
from inhouse.spec.quant import WeightQuants


@dataclass(frozen=True, slots=True)
class Bounds:
    ttft_ms: float
    tpot_ms: float


def _peak(gpu: GpuSpec, compute: str) -> float:
    return max(gpu.peak_flops(compute), gpu.peak_flops("bf16"))


def physical_bounds(
    model: ModelSpec,
    gpu: GpuSpec,
    layout: ParallelLayout,
    quants: WeightQuants,
    isl: int,
    kv_dtype: str = "auto",
) -> Bounds:
    """Lower bounds of mean TTFT and mean TPOT for one replica and shape."""
    parts = WeightBreakdown.of(model)
    bw = gpu.hbm_bw_bytes_s
    tp = layout.tp
    attention = parts.attention_sharded / tp + parts.attention_replicated
    local = attention * quants.attention.weight_bytes
    local += parts.dense / tp * quants.dense.weight_bytes + parts.lm_head / tp * 2.0
    experts = 0.0
    expert_params = 0.0
    if model.is_moe:
        per_expert = model.num_moe_layers * model.mlp_params_per_expert / layout.moe_tp
        busiest = math.ceil(model.num_experts_per_tok / layout.moe_ep)
        experts = busiest * per_expert * quants.experts.weight_bytes
        expert_params = model.num_experts_per_tok * per_expert / layout.moe_ep
    kv = kv_bytes_per_token_per_gpu(model, tp, kv_dtype) * isl
    tpot_s = (local + experts + kv) / bw
    dense_params = parts.attention_sharded / tp + parts.attention_replicated
    dense_params += (parts.dense + parts.lm_head) / tp
    flops = 2.0 * isl * dense_params / _peak(gpu, quants.dense.compute)
    flops += 2.0 * isl * expert_params / _peak(gpu, quants.experts.compute)
    ttft_s = max(flops, (local + experts) / bw)
    return Bounds(ttft_ms=1000 * ttft_s, tpot_ms=1000 * tpot_s)


def violations(measured_ttft_ms: float, measured_tpot_ms: float, bounds: Bounds) -> list[str]:
    """What a measurement claims that the hardware cannot do, worded for the report."""
    out = []
    if measured_tpot_ms < bounds.tpot_ms:
        out.append(f"TPOT {measured_tpot_ms:.2f} ms below the bound {bounds.tpot_ms:.2f} ms")
    if measured_ttft_ms < bounds.ttft_ms:
        out.append(f"TTFT {measured_ttft_ms:.1f} ms below the bound {bounds.ttft_ms:.1f} ms")
    return out


# A mean TPOT this much below a run with fewer clients is not noise: repeated runs of one
# configuration in the corpus agree on TPOT within about 1% (median).
TPOT_DROP = 0.9


def _configuration(row: CorpusRow) -> tuple[object, ...]:
    spec = row.spec
    layout = (spec.tp, spec.attention_dp, spec.moe_tp, spec.moe_ep, spec.pp)
    quant = (spec.quant, spec.gemm_quant, spec.moe_quant, spec.knobs.kv_cache_dtype)
    return (spec.model, spec.gpu, spec.backend, layout, quant, row.isl, row.osl)


def queued_outside(rows: list[CorpusRow]) -> list[tuple[CorpusRow, str]]:
    """Rows whose clients waited in front of the engine (see the module docstring)."""
    by_config: dict[tuple[object, ...], list[CorpusRow]] = defaultdict(list)
    for row in rows:
        by_config[_configuration(row)].append(row)
    out = []
    for runs in by_config.values():
        for row in runs:
            fewer = [r for r in runs if r.concurrency < row.concurrency]
            if not fewer:
                continue
            slowest = max(fewer, key=lambda r: r.tpot_ms)
            decode_ms = (row.osl - 1) * row.tpot_ms
            if row.tpot_ms < TPOT_DROP * slowest.tpot_ms and row.ttft_ms > decode_ms:
                out.append(
                    (
                        row,
                        f"TPOT {row.tpot_ms:.2f} ms at {row.concurrency} clients is below "
                        f"{slowest.tpot_ms:.2f} ms at {slowest.concurrency}, and TTFT "
                        f"{row.ttft_ms:.0f} ms exceeds the whole decode ({decode_ms:.0f} ms): "
                        "clients queued in front of the engine",
                    )
                )
    return out


@dataclass
class Screening:
    """The corpus rows the fit may use, and why the others may not."""

    usable: list[CorpusRow]
    invalid: list[tuple[CorpusRow, str]]  # a layout or name the model cannot resolve
    unfit: list[tuple[CorpusRow, str]]  # the memory model says it cannot run
    implausible: list[tuple[CorpusRow, str]]  # faster than the hardware allows
    queued: list[tuple[CorpusRow, str]] = field(default_factory=list)  # waited outside


def screen(rows: list[CorpusRow]) -> Screening:
    """Sort rows into usable, invalid, unfit, implausible and queued (reasons worded)."""
    out = Screening([], [], [], [])
    for row in rows:
        try:
            replica = build_replica(row.spec)
        except DoesNotFitError as exc:
            out.unfit.append((row, str(exc)))
            continue
        except SpecError as exc:
            out.invalid.append((row, str(exc)))
            continue
        bounds = physical_bounds(
            replica.model,
            replica.gpu,
            replica.layout,
            replica.quant,
            row.isl,
            row.spec.knobs.kv_cache_dtype,
        )
        problems = violations(row.ttft_ms, row.tpot_ms, bounds)
        if problems:
            out.implausible.append((row, "; ".join(problems)))
        else:
            out.usable.append(row)
    out.queued = queued_outside(out.usable)
    left_out = {id(row) for row, _ in out.queued}
    out.usable = [row for row in out.usable if id(row) not in left_out]
    return out
