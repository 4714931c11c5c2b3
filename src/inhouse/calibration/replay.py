"""A recorded closed-loop run, replayed under other step-time constants without re-simulating.

A prediction of mean TTFT and mean TPOT is a weighted sum of step durations: request `r`'s
TTFT is the steps between the one that ended its predecessor (its client's previous request,
or the start) and the one that gave its first token; its TPOT the steps from there to its last
token, over `osl - 1`. Holding the schedule fixed (which steps ran, with what batch), new
constants change only the durations, so

    TTFT(θ) ≈ TTFT(θ₀) + Σ_j V_j · (d_j(θ) − d_j(θ₀)),   TPOT(θ) likewise with W,

where `d_j` is the duration of recorded entry `j` (one step, or a jump of `k` decode steps at
their mean context, whose durations are linear in context) and `V`, `W` the weights the
measured requests give it. The fit evaluates thousands of constant sets this way on numpy
arrays, then re-simulates at the new constants, which re-schedules, and repeats: the schedule
the final constants are judged on is always a real simulation's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inhouse.calibration.corpus import CorpusRow
from inhouse.engine.build import Replica, build_replica
from inhouse.engine.core import StepResult
from inhouse.engine.request import Request
from inhouse.perf.coefficients import compute_coefficients
from inhouse.perf.constants import EngineConstants
from inhouse.perf.step import step_seconds
from inhouse.predict import AIPERF_SILICON, BenchmarkProtocol, ClosedLoop, wave_weights

SHAPE_FIELDS = ("seqs", "tokens", "sampled", "ctx", "pairs", "host", "decodes", "decode_ctx")


class _RecordingLoop(ClosedLoop):
    """A closed loop that keeps every step's shape and which steps each request spans."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.shapes: list[tuple[float, ...]] = []
        self.mult: list[float] = []
        self.after: dict[str, int] = {}  # request id -> entry whose end sent it
        self.first: dict[str, int] = {}
        self.last: dict[str, int] = {}

    def schedule_send(self, at_s: float, osl_share: float | None = None) -> None:
        self.after[f"r{self.sent}"] = len(self.shapes) - 1
        super().schedule_send(at_s, osl_share)

    def on_step(self, result: StepResult) -> None:
        entry = len(self.shapes)
        if result.batch is not None:
            s = result.batch.shape()
            shape = (s.num_seqs, s.num_tokens, s.num_sampled, s.ctx_tokens, s.attn_pairs,
                     s.host_load_tokens, s.num_decodes, s.decode_ctx_tokens)  # fmt: skip
            self.shapes.append(tuple(float(x) for x in shape))
            self.mult.append(1.0)
            for request in result.emitted:
                if request.num_output_tokens == 1:
                    self.first[request.request_id] = entry
        else:
            n, k = len(result.emitted), result.num_steps
            start = sum(r.num_computed_tokens for r in result.emitted) - n * k
            ctx = start + n * (k - 1) / 2.0
            self.shapes.append((n, n, n, ctx, ctx + n, 0.0, n, ctx))
            self.mult.append(float(k))
        for request in result.finished:
            self.last[request.request_id] = entry


@dataclass
class Recording:
    """One row's simulated run at some constants, ready to replay under others."""

    row: CorpusRow
    shapes: dict[str, np.ndarray]
    mult: np.ndarray
    v: np.ndarray  # TTFT weight of each entry (ms per second of its duration)
    w: np.ndarray  # TPOT weight
    ttft_ms: float
    tpot_ms: float
    base_s: np.ndarray  # each entry's duration (one step of it) at the recorded constants

    def durations(self, replica: Replica, constants: EngineConstants) -> np.ndarray:
        """Each entry's single-step duration under other constants (same catalog entries)."""
        c = compute_coefficients(
            replica.model, replica.gpu, replica.layout, replica.quant, constants,
            replica.spec.knobs.kv_cache_dtype,
        )  # fmt: skip
        s = self.shapes
        seconds = step_seconds(
            c, s["seqs"], s["tokens"], s["sampled"], s["ctx"], s["pairs"], s["host"],
            s["decodes"], s["decode_ctx"], np.maximum, np.minimum,
        )  # fmt: skip
        return np.asarray(seconds, dtype=float)

    def predict(self, replica: Replica, constants: EngineConstants) -> tuple[float, float]:
        delta = self.mult * (self.durations(replica, constants) - self.base_s)
        return self.ttft_ms + float(self.v @ delta), self.tpot_ms + float(self.w @ delta)


def _weights(
    loop: _RecordingLoop, measured: list[Request], requested: int
) -> tuple[np.ndarray, np.ndarray]:
    entries = len(loop.shapes)
    v = np.zeros(entries + 1)
    w = np.zeros(entries + 1)
    weights = wave_weights(len(measured), loop.concurrency, requested)
    for weight, request in zip(weights, measured, strict=True):
        rid = request.request_id
        start, first, last = loop.after[rid] + 1, loop.first[rid], loop.last[rid]
        # Difference arrays: +weight on [start, first], and on (first, last].
        v[start] += weight
        v[first + 1] -= weight
        per_token = weight / max(request.output_len - 1, 1)
        w[first + 1] += per_token
        w[last + 1] -= per_token
    return 1000 * np.cumsum(v)[:entries], 1000 * np.cumsum(w)[:entries]


def record(
    row: CorpusRow,
    constants: EngineConstants,
    protocol: BenchmarkProtocol = AIPERF_SILICON,
    sampled_waves: int = 4,
) -> Recording:
    """Simulate `row` at `constants` and keep what replaying it needs."""
    replica = build_replica(row.spec, constants)
    requested = protocol.measured(row.concurrency)
    head = protocol.head(row.concurrency)
    total = min(requested, sampled_waves * row.concurrency)
    loop = _RecordingLoop(replica, row.isl, row.osl, row.concurrency, protocol, head + total)
    done = loop.run()[head:]
    v, w = _weights(loop, done, requested)
    shapes = {
        name: np.array([s[i] for s in loop.shapes], dtype=float)
        for i, name in enumerate(SHAPE_FIELDS)
    }
    weights = wave_weights(len(done), row.concurrency, requested)
    ttft = tpot = 0.0
    for weight, r in zip(weights, done, strict=True):
        assert r.first_token_s is not None and r.finish_s is not None, "every request finished"
        ttft += weight * (r.first_token_s - r.arrival_s)
        tpot += weight * (r.finish_s - r.first_token_s) / max(r.output_len - 1, 1)
    recording = Recording(
        row, shapes, np.array(loop.mult), v, w, 1000 * ttft, 1000 * tpot, np.zeros(0)
    )
    recording.base_s = recording.durations(replica, constants)
    return recording
