"""The fit's parameter space and objective: constants as one log-space vector, residuals.

Every constant is fitted in log space (all are positive and span decades). The kernel
constants are one set shared by the engines; the software constants are one set per engine.
Two kinds of constant are told apart by how the fit sees them:

* step-time constants change only step durations, so a recorded run is replayed under them
  (`replay.Recording.predict`): cheap, thousands of evaluations per simulation;
* host constants (the API server's latencies) move requests in time and so change the
  schedule itself; their effect is measured by re-simulating with each one nudged, and
  carried linearly (in log space) until the next re-simulation.

Residuals are `log(predicted / measured)` of mean TTFT and of mean TPOT per row, plus a weak
prior per constant, `(log θ − log θ_prior) / PRIOR_E_FOLDS`, that keeps constants no row
constrains (FP4 kernels when no FP4 row is in the fit) at their physical starting values
rather than wherever they drift.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from inhouse.calibration.replay import Recording
from inhouse.engine.build import Replica
from inhouse.perf.constants import ENGINE_FIELDS, KERNEL_FIELDS, EngineConstants

HOST_FIELDS = ("request_overhead_s", "prompt_token_overhead_s", "output_token_overhead_s")
STEP_ENGINE_FIELDS = tuple(f for f in ENGINE_FIELDS if f not in HOST_FIELDS)
PRIOR_E_FOLDS = 2.0
# Physical ranges (log-space bounds) of the constants.
BOUNDS = {
    "eta_bw": (0.3, 1.0),
    "eta_compute": (0.1, 1.0),
    "eta_compute_fp8": (0.1, 1.0),
    "gemm_m_half": (0.5, 2048.0),
    "moe_m_half": (0.1, 512.0),
    "eta_attention": (0.05, 1.0),
    "allreduce_latency_scale": (0.1, 20.0),
    "eta_link": (0.2, 3.0),
    "eta_dequant": (0.1, 1.0),
    "step_overhead_s": (1e-5, 0.05),
    "seq_overhead_s": (1e-8, 1e-3),
    "layer_overhead_s": (1e-7, 1e-3),
    "seq_layer_overhead_s": (1e-10, 1e-5),
    "moe_layer_overhead_s": (1e-7, 1e-3),
    "sparse_layer_overhead_s": (1e-7, 1e-3),
    "request_overhead_s": (1e-4, 0.5),
    "prompt_token_overhead_s": (1e-9, 1e-4),
    "output_token_overhead_s": (1e-8, 1e-3),
}


@dataclass(frozen=True, slots=True)
class Param:
    """One fitted constant: `scope` is "kernels" (shared) or an engine's name."""

    scope: str
    name: str

    @property
    def is_host(self) -> bool:
        return self.name in HOST_FIELDS

    def applies_to(self, backend: str) -> bool:
        return self.scope in ("kernels", backend)


@dataclass
class Space:
    """The parameter vector of a fit over some engines, and its prior."""

    params: list[Param]
    base: dict[str, EngineConstants]
    prior_table: dict[str, EngineConstants] | None = None
    prior: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self.prior = self.vector(self.prior_table or self.base)

    @classmethod
    def over(
        cls, base: dict[str, EngineConstants], prior: dict[str, EngineConstants] | None = None
    ) -> Space:
        """Constants starting at `base`, pulled weakly towards `prior` (default: `base`)."""
        params = [Param("kernels", f) for f in KERNEL_FIELDS]
        for engine in sorted(base):
            params += [Param(engine, f) for f in ENGINE_FIELDS]
        return cls(params, base, prior)

    def vector(self, table: dict[str, EngineConstants]) -> np.ndarray:
        first = next(iter(table.values()))
        values = []
        for p in self.params:
            source = first if p.scope == "kernels" else table[p.scope]
            values.append(math.log(getattr(source, p.name)))
        return np.array(values)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        low = np.array([math.log(BOUNDS[p.name][0]) for p in self.params])
        high = np.array([math.log(BOUNDS[p.name][1]) for p in self.params])
        return low, high

    def constants(self, x: np.ndarray) -> dict[str, EngineConstants]:
        values = [(p, math.exp(v)) for p, v in zip(self.params, x, strict=True)]
        kernels = {p.name: v for p, v in values if p.scope == "kernels"}
        out = {}
        for engine, base in self.base.items():
            own = {p.name: v for p, v in values if p.scope == engine}
            out[engine] = base.with_values(**kernels, **own)
        return out

    def host_indices(self) -> list[int]:
        return [i for i, p in enumerate(self.params) if p.is_host]

    def sparsity(self, rows: list[Recording]) -> np.ndarray:
        """Which residual depends on which parameter: a row only on its engine's."""
        pattern = np.zeros((2 * len(rows) + len(self.params), len(self.params)), dtype=int)
        for i, rec in enumerate(rows):
            for j, p in enumerate(self.params):
                if p.applies_to(rec.row.backend):
                    pattern[2 * i : 2 * i + 2, j] = 1
        pattern[2 * len(rows) :, :] = np.eye(len(self.params), dtype=int)
        return pattern


@dataclass
class Linearized:
    """The objective around one round of simulations: replay for step constants, a linear
    term for host constants (`host_jacobian`: d log prediction / d log constant)."""

    space: Space
    recordings: list[Recording]
    replicas: list[Replica]
    x0: np.ndarray
    host_jacobian: np.ndarray  # (2 * rows, len(params)), zero outside host columns

    def predictions(self, x: np.ndarray) -> np.ndarray:
        """log predicted TTFT and TPOT of every row, interleaved."""
        table = self.space.constants(x)
        out = np.empty(2 * len(self.recordings))
        for i, (rec, replica) in enumerate(zip(self.recordings, self.replicas, strict=True)):
            ttft, tpot = rec.predict(replica, table[rec.row.backend])
            out[2 * i] = math.log(max(ttft, 1e-6))
            out[2 * i + 1] = math.log(max(tpot, 1e-6))
        shifted: np.ndarray = out + self.host_jacobian @ (x - self.x0)
        return shifted

    def residuals(self, x: np.ndarray) -> np.ndarray:
        measured = np.empty(2 * len(self.recordings))
        for i, rec in enumerate(self.recordings):
            measured[2 * i] = math.log(rec.row.ttft_ms)
            measured[2 * i + 1] = math.log(rec.row.tpot_ms)
        prior = (x - self.space.prior) / PRIOR_E_FOLDS
        out: np.ndarray = np.concatenate([self.predictions(x) - measured, prior])
        return out


def median_errors(pairs: list[tuple[float, float, float, float]]) -> tuple[float, float]:
    """Median absolute relative error of TTFT and TPOT over (pred_ttft, ttft, pred_tpot, tpot)."""
    if not pairs:
        return math.nan, math.nan
    ttft = sorted(abs(p / m - 1) for p, m, _, _ in pairs)
    tpot = sorted(abs(p / m - 1) for _, _, p, m in pairs)
    return _median(ttft), _median(tpot)


def _median(values: list[float]) -> float:
    n = len(values)
    mid = n // 2
    return values[mid] if n % 2 else (values[mid - 1] + values[mid]) / 2
