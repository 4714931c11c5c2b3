"""What the planner refuses before it sizes or simulates anything, each by the field that
makes the requirements unplannable, with the fix; and the error that says no plan meets them.

`make_plan` (`inhouse.plan.planner`) runs these first: unknown models and a fallback larger
than the workload's own, a quality floor above every model, prompts past every context, the
default prompt limit fitted to the context, and a simulator check that would send more
requests than a run may.
"""

from __future__ import annotations

from inhouse.errors import InhouseError, SpecError
from inhouse.fleet import MAX_SIMULATED_REQUESTS
from inhouse.plan.layout import allowed_models, fallback_larger_than_primary
from inhouse.plan.requirements import Requirements
from inhouse.plan.search import Candidate
from inhouse.plan.workload_req import WorkloadReq
from inhouse.spec.catalog import get_model


class PlanInfeasibleError(InhouseError):
    """No plan meets the requirements; the message names the binding constraint."""


def refuse_unknown_models(requirements: Requirements) -> None:
    """A model name the catalog does not know is refused by the field that names it (the
    catalog's "unknown model 'x'; known: ..." named neither the workload nor the field), and
    so is a fallback model larger than one the workload may run on."""
    for req in requirements.workloads:
        fields = [(f"models.allowed[{i}]", name) for i, name in enumerate(req.models.allowed)]
        if req.models.fallback is not None:
            fields.append(("models.fallback", req.models.fallback))
        for where, name in fields:
            try:
                get_model(name)
            except SpecError as exc:
                raise SpecError(
                    f"{requirements.name}: workloads[{req.name}].{where}: {exc}"
                ) from exc
        larger = fallback_larger_than_primary(req)
        if larger is not None:
            raise SpecError(f"{requirements.name}: {larger}")


def refuse_a_floor_above_every_model(requirements: Requirements) -> None:
    """`models.min_params_b` above every allowed model leaves nothing to size (it was reported
    as "no GPU on offer fits the model")."""
    for i, req in enumerate(requirements.workloads):
        models, refused = allowed_models(req)
        if not models and req.models.lora_on is None:  # adapters may still ride on another
            raise SpecError(
                f"workloads.{i}.models.min_params_b ({req.models.min_params_b:g}) refuses every "
                f"allowed model: {'; '.join(refused)}. Lower the floor or allow a larger model."
            )


def refuse_prompts_past_every_context(requirements: Requirements) -> None:
    """A workload whose p95 prompt (an agent's: its first turn) is longer than the context of
    every model it may run on cannot be planned; say so by field before sampling it (a prompt
    of a billion tokens was sampled for minutes, then called infeasible)."""
    for req in requirements.workloads:
        models = list(req.models.allowed)
        if req.models.lora_on is not None:
            models += requirements.workload(req.models.lora_on).models.allowed
        longest = max((get_model(name) for name in models), key=lambda m: m.max_context)
        for what, tokens in _lengths_to_fit(req):
            if tokens > longest.max_context:
                raise PlanInfeasibleError(
                    f"{requirements.name}: workloads[{req.name}].{what} ({tokens:,} tokens) is "
                    "longer than the context of every allowed model (the longest: "
                    f"{longest.name}, {longest.max_context:,} tokens). To act: shorten it, or "
                    "allow a model with a longer context."
                )


# The longest output the generators draw is 8x the p95 (`traffic.make_workload`), and a pool's
# `max_model_len` leaves room for twice the longest sampled one (`layout._max_model_len`).
OUTPUT_ALLOWANCE_OVER_P95 = 16


def fit_default_prompt_limits(requirements: Requirements) -> Requirements:
    """A workload that states no `max_prompt_tokens` gets 4x its p95, but never more than the
    longest context it may run on holds beside its outputs: 4x a 40K p95 asked 160K tokens of
    a 128K model, and the plan was infeasible by a limit nobody had stated."""
    workloads = []
    for req in requirements.workloads:
        if req.kind == "agent" or req.max_prompt_tokens is not None:
            workloads.append(req)
            continue
        assert req.prompt_tokens is not None
        models = list(req.models.allowed)
        if req.models.lora_on is not None:
            models += requirements.workload(req.models.lora_on).models.allowed
        context = max(get_model(name).max_context for name in models)
        room = context - OUTPUT_ALLOWANCE_OVER_P95 * req.output_tokens.p95
        default = 4 * req.prompt_tokens.p95
        if default > room:
            req = req.model_copy(update={"max_prompt_tokens": max(req.prompt_tokens.p95, room)})
        workloads.append(req)
    return requirements.model_copy(update={"workloads": tuple(workloads)})


def _lengths_to_fit(req: WorkloadReq) -> list[tuple[str, int]]:
    """(field, tokens) that one request of the workload holds at its p95, and its longest
    prompt where the requirements state one."""
    out = [("output_tokens.p95", req.output_tokens.p95)]
    if req.kind == "agent":
        assert req.multi_turn is not None
        mt = req.multi_turn
        first = mt.system_prompt_tokens + mt.first_message_tokens.p95
        out.append(("multi_turn.system_prompt_tokens + first_message_tokens.p95", first))
        out.append(("multi_turn.tool_output_tokens.p95", mt.tool_output_tokens.p95))
    else:
        assert req.prompt_tokens is not None
        out.insert(0, ("prompt_tokens.p95", req.prompt_tokens.p95))
    if req.max_prompt_tokens is not None:
        out.insert(0, ("max_prompt_tokens", req.max_prompt_tokens))
    return out


def refuse_checks_past_the_request_limit(requirements: Requirements, candidate: Candidate) -> None:
    """Before simulating anything: the largest check's expected requests — the analytic
    forecast's request rate at peak (agents: sessions over turn time) x its load multiple x its
    duration — must stay within what one simulated run may send (a stray digit in a rate, a
    duration or a multiple simulated for hours)."""
    planning = requirements.planning
    rate = sum(
        stream.rate_per_s * pool.replicas
        for pool in candidate.pools
        if pool.need.role != "fallback"
        for stream in pool.forecast.streams.values()
    )
    checks = [
        (
            f"planning.verify_duration_s ({planning.verify_duration_s:g})",
            1.0,
            planning.verify_duration_s,
        )
    ]
    checks.append(
        (
            f"planning.stress_duration_s ({planning.stress_duration_s:g})",
            1.0,
            planning.stress_duration_s,
        )
    )
    checks += [
        (f"planning.load_multiples.{i} ({multiple:g})", multiple, planning.stress_duration_s)
        for i, multiple in enumerate(planning.load_multiples)
        if multiple != 1.0
    ]
    field, multiple, duration_s = max(checks, key=lambda c: c[1] * c[2])
    expected = rate * multiple * duration_s
    if expected > MAX_SIMULATED_REQUESTS:
        raise SpecError(
            f"{requirements.name}: {field}: the simulator check at {multiple:g}x peak would send "
            f"about {expected:,.0f} requests ({rate:,.4g} requests/s forecast at peak x "
            f"{multiple:g} x {duration_s:g} s), more than the {MAX_SIMULATED_REQUESTS:,} a "
            "simulated run may (docs/simulate.md, Limits). Lower it (a load multiple: or "
            "planning.stress_duration_s), check the workloads' peak traffic, or plan with "
            "--no-verify."
        )
