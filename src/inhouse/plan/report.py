"""`plan.json`: every number the memo quotes, with the arithmetic behind the costs.

Keys: `workloads` (characterization), `pools` (configuration, memory, analytic and simulated
p95s), `slo_check` (per workload and load multiple), `degraded` (one replica lost per pool),
`lora` (per pool serving adapters: the slot, swap and kernel costs used, with sources),
`cost`, `sensitivity`, `search` (layouts, verification rounds, runners-up, rejections) and
`assumptions`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from inhouse.plan.availability import availability_report
from inhouse.plan.commitments import commitments, requirements_echo
from inhouse.plan.cost import (
    WorkloadCost,
    api_monthly,
    breakeven_months,
    node_cost,
    usd_per_million,
)
from inhouse.plan.fit_coverage import fit_coverage
from inhouse.plan.lora_report import lora_assumptions, lora_pools
from inhouse.plan.planner import Plan
from inhouse.plan.report_degraded import check_rows, degraded, degraded_mode
from inhouse.plan.report_figures import ReportFigures, report_figures
from inhouse.plan.requirements import HOURS_PER_MONTH
from inhouse.plan.search import Candidate, offers_by_gpu
from inhouse.plan.sizing import Sized
from inhouse.plan.stackgen import with_plan_facts, workload_specs
from inhouse.plan.traffic import TrafficProfile
from inhouse.plan.verify import METRIC_KEYS, bench_entry, metric_words, simulate_command
from inhouse.spec.catalog import GIB
from inhouse.spec.stack import StackSpec
from inhouse.spec.triggers import Trigger

PLAN_VERSION = 1


def build_report(
    plan: Plan, *, sensitivity: bool = True, command: str = "", stack_path: str = "stack.yaml"
) -> dict[str, Any]:
    """`plan.json`'s dictionary: the figures computed first, then assembled."""
    figures = report_figures(plan, sensitivity=sensitivity)
    return assemble_report(plan, figures, command=command, stack_path=stack_path)


def assemble_report(
    plan: Plan, figures: ReportFigures, *, command: str, stack_path: str
) -> dict[str, Any]:
    """`plan.json`'s dictionary from the plan and the figures computed for it (no runs here)."""
    req = plan.requirements
    chosen = plan.chosen
    report: dict[str, Any] = {
        "version": PLAN_VERSION,
        "name": req.name,
        "description": req.description,
        "engine": {
            "backend": req.planning.backend,
            "routing_policy": req.planning.routing_policy,
            "step_model_constants": chosen.pools[0].replica.constants.name,
        },
        "workloads": {n: characterize(p, req.workload(n).kind) for n, p in plan.profiles.items()},
        "pools": [pool_entry(p, chosen, plan) for p in chosen.pools],
        "hardware": hardware(plan),
        "slo_check": slo_check(plan),
        "commitments": commitments(req),
        "requirements": requirements_echo(req),
        "degraded": degraded(plan),
        "degraded_mode": degraded_mode(plan),
        "availability": availability_report(plan),
        "lora": lora_pools(plan),
        "cost": cost(plan, figures.costs),
        "sensitivity": figures.sensitivity,
        "search": search_summary(plan),
        "assumptions": assumptions(plan),
        "reproduce": {
            "plan": command,
            "simulate": {
                w.name: simulate_command(req, w.name, w.name, stack_path) for w in req.workloads
            },
            "bench": {w.name: bench_entry(req, w.name, w.name) for w in req.workloads},
            "note": (
                "each command replays one workload alone; the plan's checks mix every workload "
                "and leave the warm-up out"
                if len(req.workloads) > 1
                else "the plan's check leaves the warm-up out; the command counts it"
            ),
        },
    }
    cleaned: dict[str, Any] = _clean(report)
    return cleaned


def final_stack(plan: Plan, report: dict[str, Any]) -> StackSpec:
    """The plan's stack with its workloads' own SLOs and the sensitivity's re-plan triggers:
    what `inhouse render` alerts on, from the same triggers the memo words."""
    check = next((c for c in plan.checks if c.multiple == 1.0), None)
    triggers = tuple(
        Trigger.model_validate(t) for row in report["sensitivity"] for t in row.get("triggers", ())
    )
    return with_plan_facts(plan.stack, workload_specs(plan.requirements, check), triggers)


def characterize(profile: TrafficProfile, kind: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "kind": kind,
        "prompt_tokens": {
            "mean": profile.mean_prompt,
            "p50": profile.quantile("prompt", 0.5),
            "p95": profile.quantile("prompt", 0.95),
            "max_served": profile.max_prompt_tokens,
        },
        "output_tokens": {
            "mean": profile.mean_output,
            "p50": profile.quantile("output", 0.5),
            "p95": profile.quantile("output", 0.95),
        },
        "ideal_prefix_hit_rate": profile.ideal_hit_rate,
        "planned_prefix_hit_rate": profile.expected_hit_rate,
        "arrival_cv2": profile.arrival_cv2,
        "prefix_working_set_tokens": {
            "shared": profile.working_set_shared_tokens,
            "per_session": profile.working_set_per_session_tokens,
            "spread": profile.working_set_spread_tokens,
        },
    }
    if profile.is_sessions:
        out["traffic"] = {
            "peak_sessions": profile.peak_sessions,
            "avg_sessions": profile.avg_sessions,
            "think_time_s": profile.think_time_s,
        }
    else:
        out["traffic"] = {
            "peak_per_s": profile.peak_rate_per_s,
            "avg_per_s": profile.avg_rate_per_s,
        }
    return out


def pool_entry(pool: Sized, chosen: Candidate, plan: Plan) -> dict[str, Any]:
    spec = plan.stack.pool(pool.need.name)
    memory = pool.replica.memory
    f = pool.forecast
    sim = plan.checks[0].workloads if plan.checks else {}
    return {
        "name": pool.need.name,
        "role": pool.need.role,
        "serves": list(pool.need.slos),
        "lora_adapters": list(pool.need.lora_adapters),
        "model": pool.choice.model,
        "hf_id": spec.model,
        "quant": pool.choice.quant,
        "kv_cache_dtype": pool.choice.kv_dtype,
        "gpu": pool.choice.gpu,
        "tp": pool.choice.tp,
        "replicas": pool.replicas,
        "num_gpus": pool.num_gpus,
        "max_num_seqs": spec.knobs.max_num_seqs,
        "max_num_batched_tokens": pool.choice.max_num_batched_tokens,
        "max_model_len": pool.choice.max_model_len,
        "long_prompt_tokens": pool.need.long_prompt_tokens,
        "fallback": chosen.fallbacks.get(pool.need.name),
        "placement": [
            {"node": node, "gpu_ids": list(ids)}
            for node, ids in chosen.placement.get(pool.need.name, [])
        ],
        "kv_budget_tokens": memory.kv_tokens,
        "memory_gib_per_gpu": {
            "usable": memory.usable_bytes_per_gpu / GIB,
            "weights": memory.weight_bytes_per_gpu / GIB,
            "reserve": memory.reserve_bytes_per_gpu / GIB,
            "kv_cache": memory.kv_bytes_per_gpu / GIB,
            "kv_bytes_per_token": memory.kv_bytes_per_token_per_gpu,
        },
        "at_peak": {
            "rate_per_replica_per_s": sum(s.rate_per_s for s in f.streams.values()),
            "batch": f.batch,
            "batch_p95": f.batch_p95,
            "decode_step_ms": f.decode_step_ms,
            "chunk_step_ms": f.chunk_step_ms,
            "mixed_step_fraction": f.mixed_step_fraction,
            "utilization": f.utilization,
            "kv_utilization_p95": f.kv_utilization,
            "prefix_cache_fit": f.cache_fit,
        },
        "limited_by": pool.limited_by,
        "predicted": {
            w: {
                f"{m}_p95_ms": s.p95_ms(m, pool.need.quantiles[w])
                for m in ("ttft", "itl", "tpot", "e2e")
            }
            for w, s in f.streams.items()
        },
        "quantile_held": pool.need.quantiles,
        "simulated": {
            w: {f"{m}_p95_ms": sim[w][METRIC_KEYS[m]] for m in METRIC_KEYS}
            for w in pool.need.slos
            if w in sim and pool.need.role != "fallback"
        },
    }


def hardware(plan: Plan) -> list[dict[str, Any]]:
    offers = offers_by_gpu(plan.requirements)
    out = []
    for gpu, count in plan.chosen.gpus.items():
        offer = offers[gpu]
        nc = node_cost(offer)
        out.append(
            {
                "gpu": gpu,
                "gpus_used": count,
                "nodes": plan.chosen.nodes[gpu],
                "gpus_per_node": offer.gpus_per_node,
                "pricing": offer.pricing,
                "node_usd_per_hour": nc.usd_per_hour,
                "usd_per_gpu_hour": nc.usd_per_gpu_hour,
                "arithmetic": nc.arithmetic,
            }
        )
    return out


def slo_check(plan: Plan) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for check in plan.checks:
        verification = check.multiple == 1.0
        analytic = plan.chosen.predictions if verification else None
        rows = check_rows(check, analytic, verification=verification)
        out[f"{check.multiple:g}x"] = {"simulated_s": check.duration_s, "workloads": rows}
        if verification:
            out["1x"]["marginal"] = any(
                item["marginal"] for row in rows.values() for item in row["metrics"].values()
            )
    if not plan.checks:
        out["analytic_only"] = plan.chosen.predictions
    for req in plan.requirements.workloads:
        out.setdefault("targets", {})[req.name] = {
            m: {"target_ms": t, "alarm_ms": req.slo.alarm_ms(m)}
            for m, t in req.slo.targets().items()
        }
        if req.slo.has_long_ttft:
            # Apart from `targets`, whose keys are the four metrics every reader knows.
            out.setdefault("long_prompts", {})[req.name] = {
                "above_tokens": req.slo.long_prompt_tokens,
                "ttft": {
                    "target_ms": req.slo.long_ttft_p95_ms,
                    "alarm_ms": req.slo.long_alarm_ms(),
                },
            }
    return out


def cost(plan: Plan, costs: Mapping[str, WorkloadCost]) -> dict[str, Any]:
    """The cost sheet; `costs`: each workload's share (`report_figures.workload_costs`)."""
    req = plan.requirements
    chosen = plan.chosen
    offers = offers_by_gpu(req)
    hours = req.usage.active_hours_per_month
    workloads = {name: c.as_dict(req.api_prices) for name, c in costs.items()}
    capex = 0.0
    for gpu, count in chosen.nodes.items():
        per_node = offers[gpu].capex_usd_per_node
        if offers[gpu].pricing == "capex" and per_node is not None:
            capex += per_node * count
    opex_hour = sum(
        (node_cost(offers[g]).power_usd_per_hour + node_cost(offers[g]).ops_usd_per_hour) * n
        for g, n in chosen.nodes.items()
    )
    rent_hour = sum(
        node_cost(offers[g]).usd_per_gpu_hour * c
        for g, c in chosen.gpus.items()
        if offers[g].pricing == "hourly"
    )
    monthly = chosen.usd_per_hour * HOURS_PER_MONTH
    total_tps = sum(c.input_tokens_per_s + c.output_tokens_per_s for c in costs.values())
    breakeven: dict[str, Any] = {}
    api_total: dict[str, float] = {}
    for api in req.api_prices:
        spend = sum(api_monthly(api, w["per_month"]) for w in workloads.values())
        api_total[api.name] = spend
        if capex > 0:
            breakeven[api.name] = breakeven_months(
                capex, (opex_hour + rent_hour) * HOURS_PER_MONTH, spend
            )
        else:
            breakeven[api.name] = 0.0 if spend > monthly else None
    return {
        "usd_per_hour": chosen.usd_per_hour,
        "usd_per_month": monthly,
        "rented_usd_per_month_active_hours_only": (
            rent_hour * hours + (chosen.usd_per_hour - rent_hour) * HOURS_PER_MONTH
            if rent_hour
            else None
        ),
        "hours_per_month": HOURS_PER_MONTH,
        "active_hours_per_month": hours,
        "capex_usd": capex,
        "opex_usd_per_hour": opex_hour + rent_hour,
        "usd_per_million_tokens": {n: w["usd_per_million_tokens"] for n, w in workloads.items()},
        "usd_per_million_tokens_blended_all": usd_per_million(chosen.usd_per_hour, total_tps),
        "effective_usd_per_million_tokens_with_idle_hours": (
            monthly / (total_tps * 3600 * hours) * 1e6 if total_tps else None
        ),
        "usd_per_request": {n: w["usd_per_request"] for n, w in workloads.items()},
        "usd_per_request_with_idle_hours": {
            n: w["usd_per_request_with_idle_hours"] for n, w in workloads.items()
        },
        "workloads": workloads,
        "api_usd_per_month": api_total,
        "breakeven_months": breakeven,
        "formula": "usd_per_million_tokens = usd_per_hour / (tokens_per_s * 3600) * 1e6",
    }


def search_summary(plan: Plan) -> dict[str, Any]:
    result = plan.search
    chosen = plan.chosen
    runners = []
    for cand in result.candidates[1:6]:
        if cand.usd_per_hour > chosen.usd_per_hour + 1e-6:
            why = f"costs ${cand.usd_per_hour - chosen.usd_per_hour:,.2f}/h more"
        else:
            why = f"same cost, less margin ({cand.margin:.0%} vs {chosen.margin:.0%})"
        runners.append(_candidate(cand) | {"lost_because": why})
    fraction = 1.0 - plan.requirements.planning.headroom / 2
    failed = [
        _candidate(v.candidate)
        | {
            "lost_because": f"in the simulator (held to {fraction:.1%} of each target): "
            + "; ".join(
                f"{w} p95 {metric_words(m)} {i['p95_ms']:,.0f} ms vs {i['target_ms']:,.0f} ms "
                "target"
                for w, s in v.check.workloads.items()
                for m, i in s["checks"].items()
                if i["p95_ms"] > fraction * i["target_ms"]
            ),
            "round": v.round,
        }
        for v in plan.verifications
        if v is not plan.verifications[-1]
    ]
    return {
        "layouts": [
            {
                "name": layout.name,
                "description": layout.description,
                "pools": [n.name for n in layout.needs],
            }
            for layout in {
                c.layout.name: c.layout for c in result.candidates + result.hardware_misses
            }.values()
        ],
        "chosen": _candidate(chosen),
        "runners_up": runners,
        "failed_verification": failed,
        "rejected_layouts": [
            {"layout": layout.description, "why": reasons}
            for layout, reasons in result.rejected_layouts
        ],
        "over_hardware": [
            _candidate(c) | {"lost_because": "; ".join(c.problems)}
            for c in {c.layout.description: c for c in reversed(result.hardware_misses)}.values()
        ],
        "corrections": plan.corrections,
        "verification_rounds": len(plan.verifications),
        "configurations_sized": sum(len(s.sized) + len(s.rejected) for s in result.sizing.values()),
    }


def _candidate(cand: Candidate) -> dict[str, Any]:
    return {
        "layout": cand.layout.description,
        "pools": cand.label,
        "usd_per_hour": cand.usd_per_hour,
        "margin": cand.margin,
        "analytic_p95_ms": cand.predictions,
    }


def assumptions(plan: Plan) -> list[str]:
    req = plan.requirements
    planning = req.planning
    constants = plan.chosen.pools[0].replica.constants
    out = [
        f"Engine: {planning.backend} step-time constants '{constants.name}' "
        f"({constants.fitted_on or 'see perf/data/engines.yaml'}): eta_bw {constants.eta_bw}, "
        f"eta_compute {constants.eta_compute}, "
        f"step overhead {constants.step_overhead_s * 1000:.2f} ms.",
        fit_coverage(planning.backend, constants, [p.choice.gpu for p in plan.chosen.pools]),
        f"Routing: {planning.routing_policy} in every pool, in the plan and in the simulator.",
        f"Headroom: analytic p95s at most {1 - planning.headroom:.0%} of each target; replica "
        f"utilization at most {planning.max_utilization:.0%}; KV cache at most 90% at p95.",
        "Availability >= 99% means at least two replicas per pool (N+1), fallback pools "
        "aside; what the replica counts give is section 5's availability table.",
        "Dominated options are not sized: a quantization whose weights are no smaller and GEMMs "
        "no faster than another allowed one (BF16 next to FP8 on an H100), a 16-bit KV cache "
        "next to an allowed FP8 one. Every allowed option is taken to meet the quality bar; the "
        "no-FP8 sensitivity row prices the other choice.",
        f"Verification: the simulated p95s at 1x peak must sit within "
        f"{1 - planning.headroom / 2:.1%} of each target (half the analytic headroom).",
        f"Simulator checks: {planning.verify_duration_s:g} s of arrivals at 1x peak, "
        f"{planning.stress_duration_s:g} s at the other multiples and with a replica lost; the "
        "first 20% (at most 30 s) are warm-up and not counted; seed "
        f"{planning.seed}.",
        "Average rates hold during active hours only "
        f"({req.usage.active_hours_per_month:g} h/month); the stack runs all "
        f"{HOURS_PER_MONTH:g} h.",
        *lora_assumptions(plan),
    ]
    for name, profile in plan.profiles.items():
        w = req.workload(name)
        if w.prefix_reuse > profile.ideal_hit_rate + 1e-9:
            out.append(
                f"{name}: stated prefix reuse {w.prefix_reuse:.0%} exceeds what its shape allows "
                f"({profile.ideal_hit_rate:.0%}); planned at {profile.expected_hit_rate:.0%}."
            )
        else:
            out.append(
                f"{name}: prefix-cache hit rate planned at {profile.expected_hit_rate:.0%} "
                f"(the shape's ideal is {profile.ideal_hit_rate:.0%})."
            )
    if plan.corrections:
        out.append(
            "Analytic load terms scaled to the simulator's measurements: "
            + ", ".join(
                f"{w} {m} x{f:.2f}" for w, ms in plan.corrections.items() for m, f in ms.items()
            )
        )
    if plan.checks:
        out += forecast_gaps(plan.chosen.predictions, plan.checks[0].workloads)
    return out


# A forecast this far below the simulator's 1x p95 is named: the sensitivity rows use it.
FORECAST_GAP = 0.05


def forecast_gaps(
    predictions: Mapping[str, Mapping[str, float]], simulated: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """Each p95 the analytic forecast puts more than `FORECAST_GAP` below the simulator's 1x
    check. NOTE: the simulator's corrections stop at a cap (x10), and the code assistant's TTFT
    forecast stayed 13% below the simulator there, while section 7 re-forecast on it."""
    out = []
    for workload, summary in simulated.items():
        for metric, item in summary["checks"].items():
            forecast = predictions.get(workload, {}).get(metric)
            measured = float(item["p95_ms"])
            if forecast is None or not measured > forecast * (1 + FORECAST_GAP):
                continue
            out.append(
                f"{workload} p95 {metric_words(metric)}: the analytic forecast "
                f"({forecast:,.0f} ms) sits {1 - forecast / measured:.0%} below the "
                f"simulator's 1x p95 ({measured:,.0f} ms); "
                "the re-forecasts of 'What would invalidate the plan' are optimistic by about "
                "that much for it."
            )
    return out


def _clean(value: Any) -> Any:
    """JSON-safe: no NaN or infinity (null instead), tuples as lists."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
