"""`make_plan`: requirements in, a verified plan (or a named infeasibility) out.

    profiles = characterize(workloads)             # the simulator's own generators
    loop:  candidates = search(requirements)       # analytic: memory, Little's law, queues
           verify the best in the fleet simulator  # 1x peak, production routing
           if it fails, scale the analytic model by what the simulator measured and re-rank
           with planning.enforce_degraded_slo (default): one replica lost must meet the
           degraded SLO too, else grow the pool or take the next candidate
    then:  2x and 3x peak, one replica lost per pool (and the lowest tier shed), cost,
           sensitivity

The loop calibrates the analytic model against the simulator for this workload: when a
simulated p95 exceeds its analytic forecast, later rounds scale that metric's load-dependent part
(the forecast above its idle floor, which the step model gets exactly) by the observed ratio.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inhouse.plan.degraded import (
    Alternative,
    cheapest_other,
    degraded_checks,
    enforcing,
    misses,
    shed_checks,
)
from inhouse.plan.refusals import (
    PlanInfeasibleError,
    fit_default_prompt_limits,
    refuse_a_floor_above_every_model,
    refuse_checks_past_the_request_limit,
    refuse_prompts_past_every_context,
    refuse_unknown_models,
)
from inhouse.plan.requirements import Requirements
from inhouse.plan.search import Candidate, SearchResult, grow, search
from inhouse.plan.stackgen import build_stack
from inhouse.plan.traffic import TrafficProfile, profile_workload
from inhouse.plan.verify import SimCheck, checked_key, metric_words, run_check
from inhouse.plan.workload_req import Slo
from inhouse.spec.stack import StackSpec

__all__ = [
    "Plan",
    "PlanInfeasibleError",
    "Verification",
    "binding_constraints",
    "characterize",
    "infeasible_message",
    "make_plan",
    "model_names",
    "slo_of",
]

MAX_ROUNDS = 4
CORRECTION_MARGIN = 1.05
MAX_CORRECTION = 10.0


@dataclass(slots=True)
class Verification:
    candidate: Candidate
    check: SimCheck
    round: int
    corrections: dict[str, dict[str, float]]


@dataclass(slots=True)
class Plan:
    requirements: Requirements
    profiles: dict[str, TrafficProfile]
    chosen: Candidate
    stack: StackSpec
    search: SearchResult
    verifications: list[Verification]
    corrections: dict[str, dict[str, float]]
    checks: list[SimCheck] = field(default_factory=list)
    degraded: list[SimCheck] = field(default_factory=list)
    shed: list[SimCheck] = field(default_factory=list)  # degraded, the lowest tier shed
    degraded_enforced: bool = False  # sized for, and meets, the degraded SLO
    shortfall: str | None = None  # why the degraded SLO could not be enforced
    alternative: Alternative | None = None  # the cheapest plan of the other choice


def characterize(requirements: Requirements) -> dict[str, TrafficProfile]:
    seed = requirements.planning.seed
    return {req.name: profile_workload(req, seed) for req in requirements.workloads}


def model_names(requirements: Requirements) -> dict[str, str]:
    """What clients put in `model` per workload: the workload's name (see `stackgen`)."""
    return {req.name: req.name for req in requirements.workloads}


def make_plan(requirements: Requirements, *, verify: bool = True) -> Plan:
    """Search, verify, and check the chosen plan under load and failure.

    With `planning.enforce_degraded_slo` (the default) and a degraded SLO stated, a candidate
    must also meet it with one replica lost (in the simulator); if none does, the plan is the
    best one for the normal SLOs and `shortfall` says which constraint prevents the degraded
    one. `alternative` prices the other choice."""
    refuse_unknown_models(requirements)
    refuse_a_floor_above_every_model(requirements)
    refuse_prompts_past_every_context(requirements)
    requirements = fit_default_prompt_limits(requirements)
    profiles = characterize(requirements)
    planning = requirements.planning
    if not verify or planning.verify_top == 0:
        result = search(requirements, profiles, planning)
        if not result.candidates:
            raise PlanInfeasibleError(infeasible_message(requirements, result, []))
        candidate = result.candidates[0]
        stack = build_stack(candidate, requirements, profiles)
        return Plan(requirements, profiles, candidate, stack, result, [], {})
    enforce = enforcing(requirements)
    outcome = _verify(requirements, profiles, gate=enforce)
    plan, shortfall = outcome.plan, None
    if plan is None and enforce:
        shortfall = binding_constraints(outcome.why or "no candidate meets the degraded SLO")
        plan = outcome.best_normal or _verify(_relaxed(requirements), profiles, gate=False).plan
    if plan is None:
        raise PlanInfeasibleError(outcome.why or f"{requirements.name}: no plan")
    plan.requirements = requirements
    plan.degraded_enforced = enforce and shortfall is None
    plan.shortfall = shortfall
    _stress(plan)
    plan.alternative = cheapest_other(requirements, profiles, enforce=not plan.degraded_enforced)
    return plan


@dataclass(slots=True)
class _Outcome:
    plan: Plan | None  # a plan meeting everything asked
    best_normal: Plan | None  # the first that met the normal SLOs (degraded gate aside)
    why: str | None  # why `plan` is None


def _relaxed(requirements: Requirements) -> Requirements:
    planning = requirements.planning.model_copy(update={"enforce_degraded_slo": False})
    return requirements.model_copy(update={"planning": planning})


def _verify(
    requirements: Requirements, profiles: dict[str, TrafficProfile], *, gate: bool
) -> _Outcome:
    """The search-and-simulate loop; with `gate`, a candidate must also meet the degraded SLO
    with a replica lost."""
    planning = requirements.planning
    corrections: dict[str, dict[str, float]] = {}
    verifications: list[Verification] = []
    names = model_names(requirements)
    rounds = max(1, min(MAX_ROUNDS, planning.verify_top))
    fraction = 1.0 - planning.headroom / 2
    result = search(requirements, profiles, planning)
    if not result.candidates:
        return _Outcome(None, None, infeasible_message(requirements, result, verifications))
    candidate = result.candidates[0]
    refuse_checks_past_the_request_limit(requirements, candidate)
    best_normal: Plan | None = None
    why: str | None = None
    for round_index in range(rounds):
        stack = build_stack(candidate, requirements, profiles)
        check = run_check(stack, requirements, names)
        snapshot = {k: dict(v) for k, v in corrections.items()}
        verifications.append(Verification(candidate, check, round_index, snapshot))
        if _meets(check, fraction):
            plan = Plan(
                requirements, profiles, candidate, stack, result, verifications, corrections
            )
            if not gate:
                return _Outcome(plan, plan, None)
            plan.degraded = degraded_checks(stack, requirements, names)
            missed = misses(requirements, plan.degraded)
            if not missed:
                return _Outcome(plan, best_normal or plan, None)
            best_normal = best_normal or plan
            why = _degraded_why(requirements, candidate, plan.degraded, missed)
            tried = {v.candidate.label for v in verifications}
            grown = grow(candidate, missed, requirements, profiles, planning, corrections)
            options = [
                c for c in (grown, *result.candidates) if c is not None and c.label not in tried
            ]
            if not options:
                break
            candidate = min(options, key=lambda c: (round(c.usd_per_hour, 2), -c.margin))
            continue
        tried = {v.candidate.label for v in verifications}
        next_candidate = _next_candidate(
            requirements, profiles, candidate, check, corrections, fraction, tried
        )
        if next_candidate is None:
            break
        candidate, searched = next_candidate
        result = searched or result
    return _Outcome(
        None, best_normal, why or infeasible_message(requirements, result, verifications)
    )


def _degraded_why(
    requirements: Requirements, candidate: Candidate, checks: list[SimCheck], missed: list[str]
) -> str:
    """The binding constraint of a degraded miss, in words."""
    parts = []
    for check in checks:
        ((pool, _),) = check.down.items()
        for name in missed:
            summary = check.workloads.get(name)
            if summary is None:
                continue
            for metric, item in summary["checks"].items():
                if not item["pass"]:
                    parts.append(
                        f"with one {pool} replica lost, {name} p95 {metric_words(metric)} "
                        "simulates at "
                        f"{item['p95_ms']:,.0f} ms against its degraded target "
                        f"{item['target_ms']:,.0f} ms ({candidate.label})"
                    )
    return "; ".join(parts) or f"{', '.join(missed)} fail requests with a replica lost"


def _next_candidate(
    requirements: Requirements,
    profiles: dict[str, TrafficProfile],
    candidate: Candidate,
    check: SimCheck,
    corrections: dict[str, dict[str, float]],
    fraction: float,
    tried: set[str],
) -> tuple[Candidate, SearchResult | None] | None:
    """After a miss in the simulator: the cheaper of the same stack with one more replica where
    the miss was, and the best untried candidate of a search whose analytic model is corrected
    by the miss."""
    planning = requirements.planning
    _update_corrections(corrections, candidate, check, fraction)
    missed = [
        w
        for w, summary in check.workloads.items()
        if any(i["p95_ms"] > fraction * i["target_ms"] for i in summary["checks"].values())
        or summary["failed"]
    ]
    options: list[tuple[Candidate, SearchResult | None]] = []
    grown = grow(candidate, missed, requirements, profiles, planning, corrections)
    if grown is not None and grown.label not in tried:
        options.append((grown, None))
    searched = search(requirements, profiles, planning, corrections=corrections)
    fresh = [c for c in searched.candidates if c.label not in tried]
    if fresh:
        options.append((fresh[0], searched))
    if not options:
        return None
    return min(options, key=lambda o: (round(o[0].usd_per_hour, 2), -o[0].margin))


def _meets(check: SimCheck, fraction: float) -> bool:
    """Every simulated p95 within `fraction` of its target (the simulator's headroom: half the
    analytic one), and nothing failed."""
    return check.passed and all(
        item["p95_ms"] <= fraction * item["target_ms"]
        for summary in check.workloads.values()
        for item in summary["checks"].values()
    )


def _update_corrections(
    corrections: dict[str, dict[str, float]],
    candidate: Candidate,
    check: SimCheck,
    fraction: float,
) -> None:
    for workload, summary in check.workloads.items():
        checks = summary["checks"]
        assert isinstance(checks, dict)
        for metric, item in checks.items():
            if item["p95_ms"] <= fraction * item["target_ms"]:
                continue
            old = corrections.get(workload, {}).get(metric, 1.0)
            analytic = candidate.predictions.get(workload, {}).get(metric, 0.0)
            idle = candidate.floors.get(workload, {}).get(metric, 0.0)
            # NOTE: a long-prompt TTFT (`long_ttft`) gets a factor of its own, which the long
            # pools' TTFT forecasts take (`sizing.correction_key`); on a layout with no long
            # pool it has no analytic figure (0 here), so its misses grow the pools (`grow`)
            # without correcting the model.
            simulated = float(summary[checked_key(item, metric)])
            # The analytic load part was already scaled by `old`; find the factor that makes it
            # match the simulator, with a margin.
            load_part = (analytic - idle) / old
            if load_part <= 0:
                continue
            factor = (simulated - idle) / load_part * CORRECTION_MARGIN
            corrections.setdefault(workload, {})[metric] = min(
                MAX_CORRECTION, max(old * CORRECTION_MARGIN, factor)
            )


def _stress(plan: Plan) -> None:
    """The chosen stack at the other load multiples, with one replica lost per pool (unless the
    degraded gate ran them already), and with the lowest tier shed where a pool serves two."""
    requirements = plan.requirements
    names = model_names(requirements)
    stress_s = requirements.planning.stress_duration_s
    plan.checks = [plan.verifications[-1].check]
    for multiple in requirements.planning.load_multiples:
        if multiple == 1.0:
            continue
        plan.checks.append(
            run_check(plan.stack, requirements, names, multiple=multiple, duration_s=stress_s)
        )
    if not plan.degraded:
        plan.degraded = degraded_checks(plan.stack, requirements, names)
    plan.shed = shed_checks(plan.stack, requirements, names)


def infeasible_message(
    requirements: Requirements, result: SearchResult, verifications: list[Verification]
) -> str:
    """Why nothing was planned: the binding constraint first, then what else failed."""
    lines = [f"{requirements.name}: no plan meets the requirements."]
    if verifications:
        last = verifications[-1]
        for workload, summary in last.check.workloads.items():
            if not summary["completed"]:
                # NOTE: with nothing measured every p95 is NaN, which no line below names.
                lines.append(
                    f"  binding constraint: {workload} — no request of it completed after the "
                    f"warm-up in the {last.check.duration_s:g} s simulated at 1x peak, so no "
                    "p95 could be measured; raise planning.verify_duration_s (too little "
                    "traffic for the check), or plan with --no-verify."
                )
                continue
            if summary["failed"]:
                lines.append(
                    f"  binding constraint: {workload} — {summary['failed']} of its requests "
                    f"failed in the simulator with the best analytic plan "
                    f"({last.candidate.label})."
                )
            checks = summary["checks"]
            assert isinstance(checks, dict)
            for metric, item in checks.items():
                if item["p95_ms"] > (1.0 - requirements.planning.headroom / 2) * item["target_ms"]:
                    lines.append(
                        f"  binding constraint: {workload} p95 {metric_words(metric)} — the best "
                        "analytic plan "
                        f"({last.candidate.label}) simulates at {item['p95_ms']:,.0f} ms against "
                        f"the {item['target_ms']:,.0f} ms target (less "
                        f"{requirements.planning.headroom / 2:.0%} headroom in simulation)."
                    )
    for layout, reasons in result.rejected_layouts:
        for reason in reasons:
            lines.append(f"  binding constraint ({layout.description}): {reason}")
    for miss in result.hardware_misses[:3]:
        lines.append(
            f"  binding constraint ({miss.layout.description}): "
            f"{'; '.join(miss.problems)} [{miss.label}]"
        )
    lines.append(
        "  To act: relax the named target, shorten the prompts behind it, allow more or faster "
        "GPUs, or allow a smaller model or quantization (see docs/plan.md)."
    )
    return "\n".join(lines)


def binding_constraints(message: str) -> str:
    """An infeasibility message's binding constraints on one line (for the memo's prose)."""
    found = [
        line.strip().removeprefix("binding constraint").strip()
        for line in message.splitlines()
        if line.strip().startswith("binding constraint")
    ]
    return "; ".join(found) if found else message.strip()


def slo_of(requirements: Requirements, workload: str, degraded: bool = False) -> Slo:
    req = requirements.workload(workload)
    return (req.degraded_slo or req.slo) if degraded else req.slo
