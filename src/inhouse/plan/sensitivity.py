"""What would invalidate the plan: the chosen stack, re-forecast under seven changed assumptions.

For each change the analytic model (with the simulator's corrections) re-forecasts every pool at
the planned replica counts and reports which SLO breaks, by how much, and — by bisection on the
change's size — where the first SLO starts to break. The trigger is the operator metric and the
level (halfway from today to the break) that should send the operator back to the plan, as
`inhouse.spec.triggers.Trigger`s: the memo words them and `inhouse render` alerts on them.

* `prompt_p95_1.7x`: the p95 prompt 1.7x longer, p50 kept (a heavier tail);
* `output_p95_1.7x`: the p95 output 1.7x longer, p50 kept (longer answers: more decode steps,
  more KV held per request, longer e2e);
* `prefix_hit_halved`: half the expected prefix-cache hit rate;
* `burstiness_2x`: twice the squared CV of arrival gaps (open-loop traffic);
* `traffic_2x`: twice the peak rate or sessions;
* `tp_scaling_20pct_worse`: TP>1 replicas' steps 1/0.8 = 1.25x longer;
* `no_fp8`: FP8 weights and KV not allowed — the same layout in BF16 (if it fits), and the
  cheapest plan a new search finds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from inhouse.engine.build import build_replica
from inhouse.errors import DoesNotFitError
from inhouse.plan.analytic import PoolModel
from inhouse.plan.requirements import Requirements
from inhouse.plan.search import Candidate, predict_workloads, search
from inhouse.plan.sizing import Corrections, Sized
from inhouse.plan.traffic import TrafficProfile
from inhouse.plan.triggers import (
    anchored,
    early_size,
    hit_triggers,
    length_triggers,
    queue_triggers,
    restream,
    tpot_triggers,
    traffic_triggers,
    unseen_length_text,
)
from inhouse.spec.triggers import Trigger, describe

BISECT_STEPS = 7
TP_SCALING_LOSS = 0.2


@dataclass(frozen=True, slots=True)
class Change:
    name: str
    description: str
    full: float  # the change's size as stated (1.7, 1.7, 0.5, 2, 2, 1.25)
    apply: Callable[[float], tuple[dict[str, TrafficProfile], float]]  # size -> profiles, time


def evaluate(
    candidate: Candidate,
    profiles: dict[str, TrafficProfile],
    corrections: Corrections,
    time_scale: float = 1.0,
) -> dict[str, dict[str, float]] | None:
    """Workload p95s of the candidate's pools at their replica counts under changed profiles
    (None if a pool becomes unstable)."""
    pools: list[Sized] = []
    for pool in candidate.pools:
        if pool.need.role == "fallback":
            continue
        streams = tuple(restream(s, pool, profiles) for s in pool.need.streams)
        scale = time_scale if pool.choice.tp > 1 else 1.0
        model = PoolModel(pool.replica, streams, scale)
        forecast = model.forecast(1.0 / pool.replicas, pool.replicas)
        if not forecast.stable:
            return None
        floor = model.forecast(1e-4)
        pools.append(
            Sized(
                pool.need,
                pool.choice,
                pool.replica,
                pool.replicas,
                forecast,
                None,
                floor,
                pool.usd_per_gpu_hour,
                pool.limited_by,
            )
        )
    return predict_workloads(pools, corrections)


def breaches(
    requirements: Requirements, predicted: dict[str, dict[str, float]] | None
) -> list[dict[str, object]]:
    """Every SLO the predictions break, worst first (`over_by`: predicted/target − 1)."""
    out: list[dict[str, object]] = []
    for req in requirements.workloads:
        targets = req.slo.targets()
        if req.slo.long_ttft_p95_ms is not None and "long_ttft" in (predicted or {}).get(
            req.name, {"long_ttft": 0.0}
        ):
            targets["long_ttft"] = req.slo.long_ttft_p95_ms
        for metric, target in targets.items():
            value = float("inf") if predicted is None else predicted[req.name][metric]
            if value > target:
                out.append(
                    {
                        "workload": req.name,
                        "metric": metric,
                        "predicted_ms": value if value != float("inf") else None,
                        "target_ms": target,
                        "over_by": (value / target - 1.0) if value != float("inf") else None,
                    }
                )
    out.sort(key=lambda b: -(b["over_by"] if b["over_by"] is not None else 1e9))  # type: ignore[operator]
    return out


def changes(requirements: Requirements, profiles: dict[str, TrafficProfile]) -> list[Change]:
    def profile_change(key: str) -> Callable[[float], tuple[dict[str, TrafficProfile], float]]:
        return lambda size: ({n: p.scaled(**{key: size}) for n, p in profiles.items()}, 1.0)

    return [
        Change(
            "prompt_p95_1.7x",
            "p95 prompt 1.7x longer (p50 kept)",
            1.7,
            profile_change("prompt_p95_factor"),
        ),
        Change(
            "output_p95_1.7x",
            "p95 output 1.7x longer (p50 kept)",
            1.7,
            profile_change("output_p95_factor"),
        ),
        Change(
            "prefix_hit_halved", "prefix-cache hit rate halved", 0.5, profile_change("hit_factor")
        ),
        Change(
            "burstiness_2x", "arrivals twice as bursty (CV² x2)", 2.0, profile_change("cv2_factor")
        ),
        Change("traffic_2x", "peak traffic doubled", 2.0, profile_change("load_factor")),
        Change(
            "tp_scaling_20pct_worse",
            "tensor-parallel scaling 20% worse (TP>1 steps x1.25)",
            1.0 / (1.0 - TP_SCALING_LOSS),
            lambda size: (profiles, size),
        ),
    ]


def run_sensitivity(
    requirements: Requirements,
    candidate: Candidate,
    profiles: dict[str, TrafficProfile],
    corrections: Corrections,
    observed: dict[str, dict[str, dict[str, float]]] | None = None,
) -> list[dict[str, object]]:
    """Each change's re-forecast, break point and triggers; `observed`: the signals of the
    plan's 1x simulation, which anchor the triggers' planned values (`triggers.anchored`)."""
    out: list[dict[str, object]] = []
    for change in changes(requirements, profiles):
        changed, time_scale = change.apply(change.full)
        predicted = evaluate(candidate, changed, corrections, time_scale)
        broken = breaches(requirements, predicted)
        breaks_at = None
        if broken:
            breaks_at = _break_point(requirements, candidate, change, corrections)
        out.append(
            {
                "name": change.name,
                "change": change.description,
                "size": change.full,
                "predicted_p95_ms": predicted,
                "breaches": broken,
                "first_break": broken[0] if broken else None,
                "breaks_at_size": breaks_at,
            }
        )
        found = [
            anchored(t, observed) if observed else t
            for t in triggers(change, candidate, profiles, breaks_at)
        ]
        out[-1]["triggers"] = [t.model_dump(mode="json") for t in found]
        out[-1]["trigger"] = "; ".join(describe(t) for t in found)
        if not found and change.name.startswith(("prompt", "output")):
            out[-1]["trigger"] = unseen_length_text(change.name.split("_")[0])
    out.append(no_fp8(requirements, candidate, profiles, corrections))
    return out


def _break_point(
    requirements: Requirements, candidate: Candidate, change: Change, corrections: Corrections
) -> float:
    """The smallest size of the change at which some SLO breaks (bisection)."""
    good, bad = 1.0, change.full
    for _ in range(BISECT_STEPS):
        mid = 0.5 * (good + bad)
        changed, time_scale = change.apply(mid)
        if breaches(requirements, evaluate(candidate, changed, corrections, time_scale)):
            bad = mid
        else:
            good = mid
    return bad


def triggers(
    change: Change,
    candidate: Candidate,
    profiles: dict[str, TrafficProfile],
    breaks_at: float | None,
) -> list[Trigger]:
    """The watched series and levels that should send the operator back to the plan: halfway
    from today to the break (`inhouse.plan.triggers`)."""
    size = breaks_at if breaks_at is not None else change.full
    base = (change.name, change.description, breaks_at)
    if change.name.startswith(("prompt", "output")):
        changed, _ = change.apply(early_size(size))
        field = "output" if change.name.startswith("output") else "prompt"
        return length_triggers(candidate, changed, base, field)
    if change.name.startswith("prefix"):
        return hit_triggers(candidate, size, base)
    if change.name.startswith("burst"):
        return queue_triggers(candidate, base)
    if change.name.startswith("traffic"):
        return traffic_triggers(candidate, size, base)
    return tpot_triggers(candidate, size, base)


def no_fp8(
    requirements: Requirements,
    candidate: Candidate,
    profiles: dict[str, TrafficProfile],
    corrections: Corrections,
) -> dict[str, object]:
    """The same layout in BF16 (weights and KV), and the cheapest plan without FP8."""
    result: dict[str, object] = {
        "name": "no_fp8",
        "change": "FP8 weights and FP8 KV cache not allowed",
        "size": None,
    }
    swapped, problems = _bf16_pools(requirements, candidate)
    same = Candidate(candidate.layout, swapped, candidate.fallbacks)
    predicted = None if problems else evaluate(same, profiles, corrections)
    broken = breaches(requirements, predicted) if not problems else []
    result["same_layout"] = {
        "fits": not problems,
        "problems": problems,
        "predicted_p95_ms": predicted,
        "breaches": broken,
    }
    result["breaches"] = broken
    result["first_break"] = broken[0] if broken else None
    result["replan"] = _replan_without_fp8(requirements, candidate, profiles, corrections)
    result["triggers"] = []  # a check before buying, not a series to alert on
    result["trigger"] = (
        "FP8 fails the held-out quality eval against BF16 (run it before buying): re-plan "
        "without FP8"
    )
    return result


def _bf16_pools(requirements: Requirements, candidate: Candidate) -> tuple[list[Sized], list[str]]:
    """The candidate's pools with FP8 weights or KV swapped for BF16 at the same layout and
    replica counts, and a problem for each pool that no longer fits."""
    swapped: list[Sized] = []
    problems: list[str] = []
    for pool in candidate.pools:
        choice = pool.choice
        if choice.quant != "fp8" and choice.kv_dtype != "fp8":
            swapped.append(pool)
            continue
        bf16 = type(choice)(
            choice.model,
            choice.gpu,
            "bf16",
            "auto",
            choice.tp,
            choice.max_num_batched_tokens,
            choice.max_model_len,
        )
        try:
            backend = requirements.planning.backend
            replica = build_replica(bf16.spec(backend, lora_adapters=pool.need.lora_adapters))
        except DoesNotFitError as exc:
            problems.append(f"pool {pool.need.name}: {exc}")
            continue
        swapped.append(
            Sized(
                pool.need,
                bf16,
                replica,
                pool.replicas,
                pool.forecast,
                None,
                pool.floor,
                pool.usd_per_gpu_hour,
                pool.limited_by,
            )
        )
    return swapped, problems


def _replan_without_fp8(
    requirements: Requirements,
    candidate: Candidate,
    profiles: dict[str, TrafficProfile],
    corrections: Corrections,
) -> dict[str, object]:
    """The cheapest plan a new search finds without FP8, or why it finds none."""
    planning = requirements.planning.model_copy(
        update={
            "quantizations": tuple(q for q in requirements.planning.quantizations if q != "fp8")
            or ("bf16",),
            "kv_cache_dtypes": ("auto",),
        }
    )
    alternative = search(requirements, profiles, planning, corrections=corrections)
    if alternative.candidates:
        best = alternative.candidates[0]
        return {
            "usd_per_hour": best.usd_per_hour,
            "extra_usd_per_hour": best.usd_per_hour - candidate.usd_per_hour,
            "pools": best.label,
        }
    misses = alternative.hardware_misses
    if misses:
        why = "; ".join(misses[0].problems)
    elif alternative.rejected_layouts:
        why = alternative.rejected_layouts[0][1][0]
    else:
        why = "no configuration meets the SLOs"
    return {
        "usd_per_hour": None,
        "why_none": why,
        "pools": misses[0].label if misses else None,
    }
