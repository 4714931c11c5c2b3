"""`plan.json`'s degraded mode: one replica lost per pool, with and without tier shedding, and
whether the plan was sized for the degraded SLO (`degraded_mode`)."""

from __future__ import annotations

from typing import Any

from inhouse.plan.planner import Plan
from inhouse.plan.verify import LONG_TTFT_KEY, METRIC_KEYS, SHORT_TTFT_KEY, SimCheck, checked_key

LENGTH_KEYS = (SHORT_TTFT_KEY, LONG_TTFT_KEY)


def check_rows(
    check: SimCheck, analytic: dict[str, dict[str, float]] | None, *, verification: bool = False
) -> dict[str, Any]:
    """Per workload: pass/fail, counts and each judged metric's p95 with its interval; for the
    1x `verification`, each metric also says whether its pass is `marginal`."""
    rows: dict[str, Any] = {}
    for workload, summary in check.workloads.items():
        checks = summary["checks"]
        assert isinstance(checks, dict)
        intervals = summary.get("p95_interval_ms") or {}
        rows[workload] = {
            "pass": summary["pass"],
            "completed": summary["completed"],
            "failed": summary["failed"],
            "prefix_cache_hit_rate": summary["prefix_cache_hit_rate"],
            "metrics": {
                metric: {
                    **item,
                    "analytic_p95_ms": (analytic or {}).get(workload, {}).get(metric),
                    **_noise(item, intervals.get(checked_key(item, metric)), verification),
                }
                for metric, item in checks.items()
            },
            "p95_ms": {
                k: summary[k] for k in (*METRIC_KEYS.values(), *LENGTH_KEYS) if k in summary
            },
            "p95_interval_ms": summary.get("p95_interval_ms") or {},
        }
    return rows


def _noise(
    item: dict[str, Any], interval: list[float] | None, verification: bool
) -> dict[str, Any]:
    """A metric's p95 interval beside its figure; in the 1x verification, `marginal`: it passed
    but its interval reaches past the target (the pass is within the simulator's noise)."""
    out: dict[str, Any] = {"p95_interval_ms": None if interval is None else list(interval)}
    if verification:
        out["marginal"] = bool(
            item["pass"] and interval is not None and interval[1] > item["target_ms"]
        )
    return out


def degraded(plan: Plan) -> list[dict[str, Any]]:
    out = []
    for check in plan.degraded:
        ((pool, lost),) = check.down.items()
        sized = next(p for p in plan.chosen.pools if p.need.name == pool)
        stated: dict[str, Any] = {}
        for req in plan.requirements.workloads:
            slo = req.degraded_slo
            stated[req.name] = (
                {m: {"target_ms": t, "alarm_ms": slo.alarm_ms(m)} for m, t in slo.targets().items()}
                if slo
                else None
            )
            judged = req.judged_slo(degraded=True)
            if slo and judged.has_long_ttft:
                stated[req.name]["long_ttft"] = {
                    "target_ms": judged.long_ttft_p95_ms,
                    "alarm_ms": judged.long_alarm_ms(),
                }
        analytic = None
        if sized.degraded is not None:
            analytic = {
                w: {m: s.p95_ms(m) for m in ("ttft", "itl", "tpot", "e2e")}
                for w, s in sized.degraded.streams.items()
            }
        out.append(
            {
                "pool": pool,
                "replicas_lost": lost,
                "replicas_left": sized.replicas - lost,
                "failover": (
                    f"{sized.replicas} -> {sized.replicas - lost} replicas: each survivor carries "
                    f"{sized.replicas / (sized.replicas - lost):.2f}x its planned share"
                ),
                "degraded_slo": stated,
                "analytic_p95_ms": analytic,
                "simulated_s": check.duration_s,
                "workloads": check_rows(check, None),
                "pass": check.passed,
                "shed": _shed(plan, pool),
            }
        )
    return out


def _shed(plan: Plan, pool: str) -> dict[str, Any] | None:
    """The same failure with the lowest tier shed, if the pool serves two or more tiers."""
    check = next((c for c in plan.shed if pool in c.down), None)
    if check is None:
        return None
    tiers = {plan.requirements.workload(w).tier for w in check.shed}
    return {
        "tier": ", ".join(sorted(tiers)),
        "workloads": list(check.shed),
        "workloads_kept": check_rows(check, None),
        "pass": check.passed,
    }


def degraded_mode(plan: Plan) -> dict[str, Any]:
    """Whether the plan was sized for the degraded SLO, why not, and the other choice's price."""
    planning = plan.requirements.planning
    alt = plan.alternative
    return {
        "enforce_degraded_slo": planning.enforce_degraded_slo,
        "stated": any(w.degraded_slo is not None for w in plan.requirements.workloads),
        "enforced": plan.degraded_enforced,
        "usd_per_hour": plan.chosen.usd_per_hour,
        "shortfall": plan.shortfall,
        "alternative": None
        if alt is None
        else {
            "meets": alt.meets,
            "pools": alt.label,
            "usd_per_hour": alt.usd_per_hour,
            "why_none": alt.why_none,
        },
        "tiers": {w.name: w.tier for w in plan.requirements.workloads},
    }
