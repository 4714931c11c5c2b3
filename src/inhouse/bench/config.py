"""What a benchmark run is asked to do, and how the workload and its arrivals follow from it.

Load flags map onto the workloads the simulator uses, so `--simulate` runs the same thing:

* agent: `--rate R` starts R sessions per second (Poisson); `--concurrency C` keeps C sessions
  going; neither: its own `sessions`.
* fixed: `--rate R` sends its requests open loop on vLLM's schedule; `--concurrency C` runs C
  clients back to back; neither: its own `concurrency`.
* utility, longctx, shared-prefix, trace: `--rate R` uses vLLM's schedule (gamma gaps,
  `--burstiness`); `--concurrency C` keeps C requests in flight; neither: their own arrivals.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from inhouse.bench.metrics import DEFAULT_PERCENTILES
from inhouse.errors import SpecError
from inhouse.fleet import check_slo
from inhouse.spec.load import MAX_TRACE_BYTES, read_spec_text
from inhouse.workload import (
    TraceWorkload,
    Workload,
    make_workload,
    workload_names,
)
from inhouse.workload.traces import read_trace

DEFAULT_DURATION_S = 60.0
SESSION_WORKLOADS = ("agent",)
CLOSED_WORKLOADS = ("fixed",)


@dataclass(frozen=True)
class BenchSpec:
    workload: str
    target: str | None = None
    api_key: str | None = None
    workload_params: Mapping[str, str] = field(default_factory=dict)
    rate: float | None = None
    burstiness: float = 1.0
    concurrency: int | None = None
    max_concurrency: int | None = None
    duration_s: float | None = None
    num_requests: int | None = None
    slo: Mapping[str, float] = field(default_factory=dict)
    metrics_urls: tuple[str, ...] = ()
    seed: int = 0
    model: str | None = None
    endpoint: str = "completions"
    block_size: int = 16
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    workers: int = 1
    prompt_salt: int | None = None
    request_timeout_s: float = 600.0
    ignore_eos: bool = True
    continuous_usage: bool = False
    rate_scale: float = 1.0
    label: str | None = None
    stream: bool = True
    trace_server_times: bool = False  # calibration against the mock server
    kernel_timestamps: bool = False  # time reads by SO_TIMESTAMPNS (Linux)

    def __post_init__(self) -> None:
        if self.rate is not None and self.concurrency is not None:
            raise SpecError("give --rate or --concurrency, not both (see `inhouse bench -h`)")
        if self.rate is not None and not self.rate > 0:
            raise SpecError(f"--rate must be positive (req/s, or inf), got {self.rate}")
        if self.concurrency is not None and self.concurrency < 1:
            raise SpecError(f"--concurrency must be at least 1, got {self.concurrency}")
        if not self.burstiness > 0:
            raise SpecError(f"--burstiness must be positive, got {self.burstiness}")
        if self.duration_s is not None and not self.duration_s > 0:
            raise SpecError(f"--duration must be positive seconds, got {self.duration_s}")
        if self.num_requests is not None and self.num_requests < 1:
            raise SpecError(f"--num-requests must be at least 1, got {self.num_requests}")
        if self.workers < 1:
            raise SpecError(f"--workers must be at least 1, got {self.workers}")
        if not all(0 <= p <= 100 for p in self.percentiles):  # nan too
            raise SpecError(
                f"--percentiles: each must be between 0 and 100, got "
                f"{','.join(f'{p:g}' for p in self.percentiles)} (e.g. 50,90,99)"
            )
        if not 0 < self.request_timeout_s < math.inf:  # nan too: it never fires
            raise SpecError(
                f"--request-timeout must be a positive number of seconds, got "
                f"{self.request_timeout_s} (a request that runs past it counts as failed)"
            )
        if self.endpoint not in ("completions", "chat"):
            raise SpecError(f"--endpoint is completions or chat, got {self.endpoint!r}")
        if self.rate is not None and math.isinf(self.rate) and self.num_requests is None:
            raise SpecError("--rate inf sends everything at once: give --num-requests N")
        check_slo(self.slo)

    @property
    def base_name(self) -> str:
        return "trace" if self.workload.startswith("trace:") else self.workload

    @property
    def arrival_mode(self) -> str:
        """`timed` (the workload's own arrivals), `schedule` (vLLM's) or `closed`."""
        name = self.base_name
        if name in SESSION_WORKLOADS:
            return "timed"
        if self.rate is not None:
            return "schedule"
        if self.concurrency is not None and name not in CLOSED_WORKLOADS:
            return "closed"
        return "timed"

    @property
    def effective_duration_s(self) -> float | None:
        if self.duration_s is None and self.num_requests is None:
            return DEFAULT_DURATION_S
        return self.duration_s

    def schedule_size(self) -> int:
        """Requests in vLLM's schedule: `--num-requests`, else rate x duration."""
        if self.num_requests is not None:
            return self.num_requests
        assert self.rate is not None
        return max(1, round(self.rate * (self.effective_duration_s or DEFAULT_DURATION_S)))


def parse_slo(text: str | None) -> dict[str, float]:
    """`ttft_ms=800,itl_ms=60,e2el_ms=2000` (also `ttft:800`, vLLM's goodput form)."""
    out: dict[str, float] = {}
    for item in (text or "").replace(" ", ",").split(","):
        if not item:
            continue
        key, sep, value = item.replace(":", "=", 1).partition("=")
        if not sep:
            raise SpecError(f"--slo {item!r}: use KEY=MS, e.g. ttft_ms=800,itl_ms=60")
        key = key.strip()
        if not key.endswith("_ms"):
            key += "_ms"
        try:
            out[key] = float(value)
        except ValueError:
            raise SpecError(f"--slo {item!r}: {value!r} is not a number of ms") from None
    return check_slo(out)


def parse_params(items: list[str] | None) -> dict[str, str]:
    """`-p key=value` workload parameters."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError(f"--param {item!r}: use KEY=VALUE (see `inhouse bench --list`)")
        out[key.strip()] = value.strip()
    return out


def build_workload(spec: BenchSpec) -> Workload:
    """The workload with the load flags folded into its parameters (see the module table)."""
    if spec.workload.startswith("trace:"):
        return load_trace(Path(spec.workload[len("trace:") :]))
    if spec.workload not in workload_names():
        raise SpecError(
            f"--workload {spec.workload!r} is unknown; use one of "
            f"{', '.join(workload_names())}, or trace:PATH"
        )
    params: dict[str, object] = dict(spec.workload_params)
    name = spec.workload
    if name == "agent":
        if spec.rate is not None:
            params["session_rate_per_s"] = spec.rate
        if spec.concurrency is not None:
            params["sessions"] = spec.concurrency
    elif name == "fixed":
        if spec.concurrency is not None:
            params["concurrency"] = spec.concurrency
    elif spec.rate is not None and not math.isinf(spec.rate):
        params["rate_per_s"] = spec.rate
        if spec.burstiness != 1.0:
            params["arrivals"] = "gamma"
            params["burstiness"] = spec.burstiness
    return make_workload(name, params)


def load_trace(path: Path, model: str | None = None) -> TraceWorkload:
    """A Mooncake `.jsonl` or Azure `.csv` trace; says on stderr how many rows it leaves out."""
    text = read_spec_text(path, "--workload trace file", MAX_TRACE_BYTES)
    trace = read_trace(
        text, str(path), azure=path.suffix == ".csv", model=model, name=f"trace:{path.name}"
    )
    say_rows_left_out(trace, path)
    return trace


def say_rows_left_out(trace: TraceWorkload, path: Path) -> None:
    if trace.num_empty:
        total = len(trace.rows) + trace.num_empty
        print(
            f"trace {path}: {trace.num_empty:,} of {total:,} rows left out "
            "(an empty prompt or output: nothing to replay)",
            file=sys.stderr,
        )
