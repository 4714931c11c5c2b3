"""Replaying a recorded run under other constants: exact at its own, close at others."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inhouse.calibration.corpus import prepare
from inhouse.calibration.replay import record
from inhouse.engine.build import build_replica
from inhouse.perf.constants import get_engine_constants
from inhouse.predict import AIPERF_SILICON, run_closed_loop

from .test_corpus import rows

RUNS = rows(
    "a,Qwen3-32B,h100_sxm,sglang,,bf16,,,2,1,1,1,1,1024,128,16,841.0,16.5",
    "b,MiniMax-M2.5,b200_sxm,vllm,,fp8,fp8,fp8,4,1,1,1,4,1024,256,32,100.0,13.0",
)


@pytest.mark.parametrize("dephased", [False, True], ids=["locked", "dephased"])
@pytest.mark.parametrize("index", [0, 1])
def test_replay_at_the_recorded_constants_is_the_simulation(index: int, dephased: bool) -> None:
    """The recording measures what the prediction does; with a de-phased start its de-phasing
    requests are simulated and recorded but left out of the means."""
    row = prepare(RUNS).rows[index]
    constants = get_engine_constants(row.backend)
    protocol = replace(AIPERF_SILICON, dephased_start=dephased)
    recording = record(row, constants, protocol)
    result = run_closed_loop(
        build_replica(row.spec, constants), row.isl, row.osl, row.concurrency, protocol=protocol
    )
    assert (recording.ttft_ms, recording.tpot_ms) == pytest.approx(
        (result.mean_ttft_ms, result.mean_tpot_ms), rel=1e-9
    )
    replica = build_replica(row.spec, constants)
    assert recording.predict(replica, constants) == pytest.approx(
        (recording.ttft_ms, recording.tpot_ms), rel=1e-12
    )


@pytest.mark.parametrize("index", [0, 1])
def test_replay_under_other_constants_tracks_a_fresh_simulation(index: int) -> None:
    row = prepare(RUNS).rows[index]
    base = get_engine_constants(row.backend)
    recording = record(row, base)
    other = base.with_values(eta_bw=base.eta_bw * 0.85, step_overhead_s=base.step_overhead_s * 2)
    replica = build_replica(row.spec, other)
    fresh = run_closed_loop(replica, row.isl, row.osl, row.concurrency, protocol=AIPERF_SILICON)
    ttft, tpot = recording.predict(replica, other)
    assert tpot == pytest.approx(fresh.mean_tpot_ms, rel=0.02)
    assert ttft == pytest.approx(fresh.mean_ttft_ms, rel=0.10)
    assert tpot > recording.tpot_ms  # slower memory and more overhead: slower decode
