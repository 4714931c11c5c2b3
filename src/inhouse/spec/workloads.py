"""The workloads a stack was sized for: what clients send, what they were promised, what the
plan expects them to see.

`inhouse plan` writes one entry per workload of the requirements into the stack file. `inhouse
render` alerts each workload's SLO on the series that carry that workload (the gateway's, by the
model name clients send), so that two workloads sharing a pool (utility calls as LoRA adapters
on the chat model) are no longer held to the strictest SLO of the two. A hand-written stack
without `workloads` keeps the per-pool alerts of `pools[].slo`.

A workload whose long prompts have a TTFT of their own (`slo.long_ttft_p95_ms`) is split by its
pool's length rule: `ttft_*` then hold for the prompts its pool keeps, `long_ttft_*` for those
the rule sends to the `long_pool`; render alerts each on that pool's share of the workload.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from inhouse.spec.base import SpecModel
from inhouse.spec.slo import LatencySlo


class PlannedP95(SpecModel):
    """The plan's simulated p95s at 1x peak (ms), the figures the memo commits to."""

    ttft_ms: float | None = Field(default=None, ge=0)
    itl_ms: float | None = Field(default=None, ge=0)
    e2e_ms: float | None = Field(default=None, ge=0)
    # The long prompts' own (those the length rule sends to a long pool): they run longest.
    long_e2e_ms: float | None = Field(default=None, ge=0)


class WorkloadSlo(LatencySlo):
    """A workload's SLO: `LatencySlo`, and the p95 TTFT of its long prompts where they have
    their own (`long_ttft_p95_ms`, at or above `ttft_p95_ms`; `long_ttft_alarm_ms` pages,
    default the target). Long: what the length rule of the workload's pool sends to its
    `long_pool`; without a long pool, the gateway's series of all the workload's prompts is held
    to the long target (its p95 is at most the larger of the two parts')."""

    long_ttft_p95_ms: float | None = Field(default=None, gt=0)
    long_ttft_alarm_ms: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check_long(self) -> WorkloadSlo:
        target, alarm = self.long_ttft_p95_ms, self.long_ttft_alarm_ms
        if alarm is not None and target is None:
            raise ValueError(
                f"long_ttft_alarm_ms ({alarm:g}) has no long_ttft_p95_ms target to page on: "
                "state the target or remove the alarm"
            )
        if target is not None and alarm is not None and alarm < target:
            raise ValueError(
                f"long_ttft_alarm_ms ({alarm:g}) is below long_ttft_p95_ms ({target:g}): the "
                "alarm pages when the target is already broken, so set it at or above the target"
            )
        if target is not None and (self.ttft_p95_ms is None or target < self.ttft_p95_ms):
            raise ValueError(
                f"long_ttft_p95_ms ({target:g}) loosens ttft_p95_ms for long prompts: state "
                "ttft_p95_ms, at or below it"
            )
        return self

    def for_long_prompts(self) -> LatencySlo:
        """The TTFT target and alarm of the long prompts, as a `LatencySlo` (TTFT only)."""
        assert self.long_ttft_p95_ms is not None, "a workload with a long-prompt TTFT"
        return LatencySlo(
            ttft_p95_ms=self.long_ttft_p95_ms,
            ttft_alarm_ms=self.long_ttft_alarm_ms,
            availability=self.availability,
        )


class WorkloadSpec(SpecModel):
    """One workload: clients send `model` (a pool's served name, alias or LoRA adapter); `slo`
    is the workload's own; `planned_p95` what the plan simulated for it at peak (render sizes
    grace periods from its e2e)."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$", max_length=40)
    model: str
    slo: WorkloadSlo = Field(default_factory=WorkloadSlo)
    planned_p95: PlannedP95 = Field(default_factory=PlannedP95)
