"""`inhouse plan --compare`: the chosen plan against alternative architectures, each planned by
the very planner that chose it.

Axes (each a change to the requirements, planned and verified like the original):

* `layout` — for a workload that may run as LoRA adapters on another's model (`lora_on`,
  Layout A), the same requirements with that option taken away: its own pool (Layout B). On
  hardware too small for B, B is also planned with `max_nodes` lifted, to price the extra node.
* `engine` — the other engine's step-time constants (`planning.backend`: vllm <-> sglang).

Every alternative is summarized alike: $/h, pools, SLO margins at 1x peak (1 − p95/target, from
the simulator), degraded mode (one replica lost per pool) and the blast radius of one replica's
failure (the GPUs it holds, the share of its pool's capacity, the workloads it serves).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from inhouse.errors import SpecError
from inhouse.plan.planner import PlanInfeasibleError, make_plan
from inhouse.plan.report import build_report
from inhouse.plan.requirements import Requirements, parse_requirements

AXES = ("layout", "engine")
COMPARE_VERSION = 1


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """The comparable facts of one plan.json."""
    one = (report.get("slo_check") or {}).get("1x", {}).get("workloads", {})
    margins: dict[str, Any] = {}
    for workload, targets in (report.get("slo_check") or {}).get("targets", {}).items():
        for metric, t in targets.items():
            p95 = one.get(workload, {}).get("metrics", {}).get(metric, {}).get("p95_ms")
            margins.setdefault(workload, {})[metric] = {
                "target_ms": t["target_ms"],
                "p95_ms": p95,
                "margin": None if p95 is None else 1.0 - p95 / t["target_ms"],
            }
    degraded = []
    for d in report.get("degraded") or []:
        degraded.append(
            {
                "pool": d["pool"],
                "pass": d["pass"],
                "p95_ms": {w: v["p95_ms"] for w, v in d["workloads"].items()},
                "degraded_slo": d["degraded_slo"],
            }
        )
    blast = [
        {
            "pool": p["name"],
            "gpus_per_replica": p["tp"],
            "replicas": p["replicas"],
            "capacity_lost": 1.0 / p["replicas"],
            "workloads": p["serves"],
        }
        for p in report["pools"]
    ]
    return {
        "usd_per_hour": report["cost"]["usd_per_hour"],
        "pools": [
            f"{p['name']}: {p['replicas']}x {p['model']} {p['quant']} TP{p['tp']} on {p['gpu']}"
            for p in report["pools"]
        ],
        "gpus": sum(p["num_gpus"] for p in report["pools"]),
        "slo_margins": margins,
        "meets_slo_at_1x": bool(one) and all(w["pass"] for w in one.values()),
        "degraded": degraded,
        "blast_radius": blast,
    }


def _variant(req: Requirements, change: Callable[[dict[str, Any]], None]) -> Requirements:
    data = req.model_dump(mode="json")
    change(data)
    return parse_requirements(data, f"{req.name} (alternative)")


def _plan(req: Requirements, verify: bool) -> dict[str, Any]:
    return build_report(make_plan(req, verify=verify), sensitivity=False)


def _layout_alternatives(req: Requirements, verify: bool) -> list[dict[str, Any]]:
    out = []
    for workload in req.workloads:
        host = workload.models.lora_on
        if host is None:
            continue

        def own_pool(data: dict[str, Any], name: str = workload.name) -> None:
            for w in data["workloads"]:
                if w["name"] == name:
                    w["models"]["lora_on"] = None

        def bigger(data: dict[str, Any], name: str = workload.name) -> None:
            own_pool(data, name)
            for offer in data["hardware"]:
                offer["max_nodes"] = None

        label = f"{workload.name} on its own pool (Layout B) instead of LoRA adapters on {host}"
        out.append(_run("layout", label, _variant(req, own_pool), verify, _variant(req, bigger)))
    return out


def _run(
    axis: str, label: str, req: Requirements, verify: bool, fallback: Requirements | None = None
) -> dict[str, Any]:
    entry: dict[str, Any] = {"axis": axis, "label": label}
    try:
        entry.update(feasible=True, **summarize(_plan(req, verify)))
    except PlanInfeasibleError as exc:
        entry.update(feasible=False, why_infeasible=str(exc))
        if fallback is not None:
            try:
                entry["with_more_nodes"] = summarize(_plan(fallback, verify))
            except PlanInfeasibleError as again:
                entry["with_more_nodes"] = {"why_infeasible": str(again)}
    return entry


def _engine_alternative(req: Requirements, verify: bool) -> dict[str, Any]:
    other = "sglang" if req.planning.backend == "vllm" else "vllm"

    def swap(data: dict[str, Any]) -> None:
        data["planning"]["backend"] = other

    def bigger(data: dict[str, Any]) -> None:
        swap(data)
        for offer in data["hardware"]:
            offer["max_nodes"] = None

    label = f"{other} instead of {req.planning.backend}"
    return _run("engine", label, _variant(req, swap), verify, _variant(req, bigger))


def compare(
    req: Requirements,
    chosen_report: dict[str, Any],
    axes: Sequence[str] = AXES,
    verify: bool = True,
) -> dict[str, Any]:
    unknown = [a for a in axes if a not in AXES]
    if unknown:
        raise SpecError(f"--compare: unknown axis {unknown}; choose from {', '.join(AXES)}")
    alternatives: list[dict[str, Any]] = []
    if "layout" in axes:
        alternatives += _layout_alternatives(req, verify)
    if "engine" in axes:
        alternatives.append(_engine_alternative(req, verify))
    return {
        "version": COMPARE_VERSION,
        "name": req.name,
        "chosen": {"label": "the chosen plan", **summarize(chosen_report)},
        "alternatives": alternatives,
    }
