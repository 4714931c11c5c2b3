"""The workloads a stack was sized for: what clients send, what they were promised, what the
plan expects them to see.

`inhouse plan` writes one entry per workload of the requirements into the stack file. `inhouse
render` alerts each workload's SLO on the series that carry that workload (the gateway's, by the
model name clients send), so that two workloads sharing a pool (utility calls as LoRA adapters
on the chat model) are no longer held to the strictest SLO of the two. A hand-written stack
without `workloads` keeps the per-pool alerts of `pools[].slo`.
"""

from __future__ import annotations

from pydantic import Field

from inhouse.spec.base import SpecModel
from inhouse.spec.slo import LatencySlo


class PlannedP95(SpecModel):
    """The plan's simulated p95s at 1x peak (ms), the figures the memo commits to."""

    ttft_ms: float | None = Field(default=None, ge=0)
    itl_ms: float | None = Field(default=None, ge=0)
    e2e_ms: float | None = Field(default=None, ge=0)


class WorkloadSpec(SpecModel):
    """One workload: clients send `model` (a pool's served name, alias or LoRA adapter); `slo`
    is the workload's own; `planned_p95` what the plan simulated for it at peak (render sizes
    grace periods from its e2e)."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$", max_length=40)
    model: str
    slo: LatencySlo = Field(default_factory=LatencySlo)
    planned_p95: PlannedP95 = Field(default_factory=PlannedP95)
