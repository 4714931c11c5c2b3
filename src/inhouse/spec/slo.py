"""Latency and availability objectives: the p95 targets a contract states and the p95s that page.

`*_p95_ms` are the targets; `*_alarm_ms` the p95 that pages after five minutes (default: the
target itself; the seeds' SLO table pages a little above the target, e.g. TTFT 800 ms target,
1000 ms alarm). `availability` is the share of requests answered without a 5xx: one minus it is
the error budget the burn-rate alerts spend. A pool's SLO (`stack.PoolSlo`) and a workload's
(`workloads.WorkloadSpec.slo`) are both this.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from inhouse.spec.base import SpecModel

LatencyMetric = Literal["ttft", "itl", "e2e"]
LATENCY_METRICS: tuple[LatencyMetric, ...] = ("ttft", "itl", "e2e")


class LatencySlo(SpecModel):
    ttft_p95_ms: float | None = Field(default=None, gt=0)
    ttft_alarm_ms: float | None = Field(default=None, gt=0)
    itl_p95_ms: float | None = Field(default=None, gt=0)
    itl_alarm_ms: float | None = Field(default=None, gt=0)
    e2e_p95_ms: float | None = Field(default=None, gt=0)
    e2e_alarm_ms: float | None = Field(default=None, gt=0)
    availability: float = Field(default=0.999, gt=0, lt=1)

    @model_validator(mode="after")
    def _check_alarms(self) -> LatencySlo:
        for metric in LATENCY_METRICS:
            target = getattr(self, f"{metric}_p95_ms")
            alarm = getattr(self, f"{metric}_alarm_ms")
            if target is not None and alarm is not None and alarm < target:
                raise ValueError(
                    f"{metric}_alarm_ms ({alarm}) is below {metric}_p95_ms ({target}): the alarm "
                    "pages when the target is already broken, so set it at or above the target"
                )
        return self

    def alarm_ms(self, metric: LatencyMetric) -> float | None:
        """The p95 that pages: the alarm if set, else the target, else None (no alert)."""
        alarm: float | None = getattr(self, f"{metric}_alarm_ms")
        target: float | None = getattr(self, f"{metric}_p95_ms")
        return alarm if alarm is not None else target

    def target_ms(self, metric: LatencyMetric) -> float | None:
        target: float | None = getattr(self, f"{metric}_p95_ms")
        return target
