"""Targets a requirements file states that the planner reports but does not size for.

`plan.json` -> `commitments` -> workload -> `ttft_cold`: `{target_ms, alarm_ms}` for the p95
TTFT of cold-prefix requests (`slo.ttft_cold_p95_ms`), which `inhouse report` measures.
"""

from __future__ import annotations

from typing import Any

from inhouse.plan.requirements import Requirements

UNSIZED_METRICS = ("ttft_cold",)


def commitments(req: Requirements) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for workload in req.workloads:
        stated = {
            metric: {"target_ms": target, "alarm_ms": workload.slo.alarm_ms(metric)}
            for metric in UNSIZED_METRICS
            if (target := getattr(workload.slo, f"{metric}_p95_ms")) is not None
        }
        if stated:
            out[workload.name] = stated
    return out


def requirements_echo(req: Requirements) -> dict[str, Any]:
    """The requirements as planned, every default filled in, and each offer's effective node
    power: `plan.json` -> `requirements`, so the cost sheet and the report cite one file."""
    from inhouse.plan.cost import power_kw

    data: dict[str, Any] = req.model_dump(mode="json")
    for offer, entry in zip(req.hardware, data["hardware"], strict=True):
        entry["effective_power_kw_per_node"] = power_kw(offer)
    data["usage"]["active_hours_per_month"] = req.usage.active_hours_per_month
    return data
