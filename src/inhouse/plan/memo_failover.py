"""The sizing memo's degraded mode: one replica lost per pool, with and without the lowest tier
shed, whether the plan was sized for the degraded SLO, and what the other choice costs. Written
from `plan.json`'s `degraded` and `degraded_mode` alone."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inhouse.plan.memo_format import METRIC_NAMES, _ms, _table, _usd

METRICS = ("ttft", "itl", "tpot", "e2e")


def _metric(key: str) -> str:
    """`p95_e2el_ms` -> `e2e`."""
    return key.split("_")[1].replace("e2el", "e2e")


def _verdict(value: Any, target: Any) -> str:
    if target is None:
        return ""
    return "ok" if value is not None and value <= target else "MISS"


def _rows(d: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    shed = d.get("shed")
    header = ["workload", "metric", "simulated"]
    if shed:
        header.append(f"{shed['tier']} tier shed")
    header += ["degraded SLO", ""]
    rows = []
    for workload, w in d["workloads"].items():
        stated = (d["degraded_slo"] or {}).get(workload) or {}
        kept = (shed or {}).get("workloads_kept", {}).get(workload)
        for key, value in w["p95_ms"].items():
            metric = _metric(key)
            if metric not in METRICS:
                continue
            target = stated.get(metric, {}).get("target_ms")
            row = [workload, METRIC_NAMES[metric], _ms(value)]
            if shed:
                row.append("shed" if kept is None else _ms(kept["p95_ms"][key]))
            verdict = _verdict(value, target)
            if shed and kept is not None and target is not None:
                verdict += f" / {_verdict(kept['p95_ms'][key], target)} shed"
            rows.append([*row, _ms(target), verdict])
    return header, rows


def failover_lines(r: Mapping[str, Any]) -> list[str]:
    lines = ["### Failover (one replica lost)", ""]
    for d in r["degraded"]:
        lines += [f"**{d['pool']}**: {d['failover']}.", ""]
        header, rows = _rows(d)
        lines += _table(header, rows)
        shed = d.get("shed")
        if shed:
            lines += [
                f"With the {shed['tier']} tier shed ({', '.join(shed['workloads'])} refused at "
                "the gateway while the replica is lost; modelled as that traffic not sent), the "
                f"other workloads {'meet' if shed['pass'] else 'still miss'} their degraded "
                "SLO.",
                "",
            ]
    if not r["degraded"]:
        lines += ["No pool has two replicas, so losing one takes its traffic to the fallback.", ""]
    lines += _mode_lines(r.get("degraded_mode") or {})
    return [*lines, ""]


def _mode_lines(mode: Mapping[str, Any]) -> list[str]:
    """How the plan treats the degraded SLO, and the price of the other choice."""
    if not mode.get("stated"):
        return ["No workload states a degraded SLO; the rows above are for information."]
    alt = mode.get("alternative") or {}
    if mode.get("enforced"):
        out = (
            "Sized for the degraded SLO (`planning.enforce_degraded_slo`, on by default): one "
            "replica lost per pool was simulated and meets every stated degraded target."
        )
        if alt.get("pools"):
            saved = float(mode.get("usd_per_hour") or 0.0) - float(alt["usd_per_hour"])
            price = (
                "the same price"
                if abs(saved) < 0.005
                else f"{_usd(alt['usd_per_hour'])}/h, {_usd(saved)}/h less"
            )
            out += (
                f" The cheapest plan for the normal SLOs alone (analytic) is {alt['pools']}, at "
                f"{price}."
            )
        return [out]
    if mode.get("enforce_degraded_slo"):
        out = (
            "`planning.enforce_degraded_slo` is on, but no plan on the offered hardware meets "
            f"the degraded SLO: {mode.get('shortfall')}. This plan meets the normal SLOs only."
        )
        return [out]
    out = (
        "`planning.enforce_degraded_slo` is off: the degraded SLO is reported, not sized for; "
        "where a row says MISS it is not met with one replica lost."
    )
    if alt.get("pools"):
        out += (
            f" The cheapest plan that also meets it (analytic) is {alt['pools']} at "
            f"{_usd(alt['usd_per_hour'])}/h; leave the setting on (the default) to size and "
            "verify it."
        )
    elif alt.get("why_none"):
        out += f" No plan would meet it: {alt['why_none']}."
    return [out]


def degraded_sentence(r: Mapping[str, Any]) -> list[str]:
    """One line for the summary."""
    mode = r.get("degraded_mode") or {}
    if not mode.get("stated"):
        return []
    if mode.get("enforced"):
        return ["With one replica lost, every stated degraded SLO holds (section 5).", ""]
    return [
        "With one replica lost the degraded SLO is NOT met: "
        + (mode.get("shortfall") or "enforcement is off (section 5)")
        + ".",
        "",
    ]


def failover_risks(r: Mapping[str, Any]) -> list[str]:
    out = []
    for d in r["degraded"]:
        if d["pass"]:
            continue
        shed = d.get("shed")
        remedy = (
            f"shedding the {shed['tier']} tier keeps the others within it"
            if shed and shed["pass"]
            else "shed low-priority traffic"
        )
        out.append(
            f"* Losing a {d['pool']} replica breaks the degraded SLO (section 5): replace it "
            f"fast (cold start dominated by weight load); {remedy}."
        )
    return out
