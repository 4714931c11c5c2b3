"""The sizing memo's degraded mode: one replica lost per pool, with and without the lowest tier
shed, whether the plan was sized for the degraded SLO, and what the other choice costs. Written
from `plan.json`'s `degraded` and `degraded_mode` alone."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inhouse.plan.memo_format import METRIC_NAMES, _ms, _table, _usd, _with_interval
from inhouse.plan.p95_interval import BLOCK_S, CONFIDENCE, Interval, difference

METRICS = ("ttft", "itl", "tpot", "e2e")


# TTFT by prompt length, where long prompts have a target of their own (`verify.check_key`):
# the metric whose target each row is held to, and its name.
LENGTH_ROWS = {
    "p95_ttft_short_ms": ("ttft", "p95 TTFT, prompts up to the long-prompt length"),
    "p95_ttft_long_ms": ("long_ttft", METRIC_NAMES["long_ttft"]),
}


def _metric(key: str) -> str:
    """`p95_e2el_ms` -> `e2e`; `p95_ttft_long_ms` -> `long_ttft`."""
    if key in LENGTH_ROWS:
        return LENGTH_ROWS[key][0]
    return key.split("_")[1].replace("e2el", "e2e")


def _verdict(value: Any, target: Any) -> str:
    if target is None:
        return ""
    return "ok" if value is not None and value <= target else "MISS"


def normal_targets(r: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Each workload's normal p95 targets (ms) by metric, the long prompts' TTFT as
    `long_ttft`: what a lost replica is held to where no degraded SLO is stated."""
    checks = r.get("slo_check") or {}
    out: dict[str, dict[str, float]] = {}
    for workload, targets in (checks.get("targets") or {}).items():
        out[workload] = {m: float(t["target_ms"]) for m, t in targets.items()}
    for workload, item in (checks.get("long_prompts") or {}).items():
        out.setdefault(workload, {})["long_ttft"] = float(item["ttft"]["target_ms"])
    return out


def _normal_verdict(value: Any, target: float) -> str:
    return (
        "within the normal SLO" if value is not None and value <= target else "over the normal SLO"
    )


def _rows(
    d: Mapping[str, Any], base: Mapping[str, Any], targets: Mapping[str, Any]
) -> tuple[list[str], list[list[str]]]:
    """One row per workload and metric: the p95 at 1x peak and with the replica lost, each with
    its interval, and whether the two differ by more than their intervals allow. `base`: the
    1x check's workloads (`slo_check["1x"]`), or nothing. A workload with no degraded SLO is
    held to its normal `targets` (`normal_targets`): losing a replica for the time it takes to
    replace it is no exemption from the SLO unless the requirements say so."""
    shed = d.get("shed")
    header = ["workload", "metric", "1x peak", "replica lost", "vs 1x"]
    if shed:
        header.append(f"{shed['tier']} tier shed")
    header += ["degraded SLO", ""]
    rows = []
    for workload, w in d["workloads"].items():
        stated = (d["degraded_slo"] or {}).get(workload) or {}
        kept = (shed or {}).get("workloads_kept", {}).get(workload)
        normal = base.get(workload) or {}
        for key, value, metric, label in _judged(w["p95_ms"]):
            target = stated.get(metric, {}).get("target_ms")
            first = _interval(normal, key)
            lost = _interval(w, key)
            row = [
                workload,
                label,
                _with_interval((normal.get("p95_ms") or {}).get(key), first),
                _with_interval(value, lost),
                _compared(first, lost),
            ]
            if shed:
                row.append(
                    "shed"
                    if kept is None
                    else _with_interval(kept["p95_ms"][key], _interval(kept, key))
                )
            own = (targets.get(workload) or {}).get(metric)
            if target is None and own is not None:
                column, judge, against = f"— (normal {_ms(own)})", _normal_verdict, own
            else:
                column, judge, against = _ms(target), _verdict, target
            verdict = judge(value, against)
            if shed and kept is not None and against is not None:
                verdict += f" / {judge(kept['p95_ms'][key], against)} shed"
            rows.append([*row, column, verdict])
    return header, rows


def _judged(p95_ms: Mapping[str, Any]) -> list[tuple[str, Any, str, str]]:
    """(key, p95, metric, name) of each p95 a lost replica is judged on: with TTFT by prompt
    length, each length's TTFT and not the all-prompts one, which no target holds."""
    by_length = any(key in LENGTH_ROWS for key in p95_ms)
    out = []
    for key, value in p95_ms.items():
        metric = _metric(key)
        if metric not in (*METRICS, "long_ttft") or (by_length and key == "p95_ttft_ms"):
            continue
        name = LENGTH_ROWS[key][1] if key in LENGTH_ROWS else METRIC_NAMES[metric]
        out.append((key, value, metric, name))
    return out


def normal_misses(r: Mapping[str, Any]) -> dict[str, list[str]]:
    """Per workload with no degraded SLO: the metrics (and pools lost) whose p95 with one
    replica lost is over its normal target."""
    normal = normal_targets(r)
    out: dict[str, list[str]] = {}
    for d in r.get("degraded") or []:
        for workload, w in d["workloads"].items():
            if ((d.get("degraded_slo") or {}).get(workload)) is not None:
                continue
            for _, value, metric, name in _judged(w["p95_ms"]):
                target = (normal.get(workload) or {}).get(metric)
                if target is not None and (value is None or value > target):
                    out.setdefault(workload, []).append(f"{name}, pool {d['pool']}")
    return out


def _interval(row: Mapping[str, Any], key: str) -> Interval | None:
    found = (row.get("p95_interval_ms") or {}).get(key)
    return None if not found else (float(found[0]), float(found[1]))


def _compared(first: Interval | None, lost: Interval | None) -> str:
    """What the runs support: higher or lower only where the intervals do not overlap."""
    if first is None or lost is None:
        return "—"
    return difference(first, lost) or "no clear difference"


def failover_lines(r: Mapping[str, Any]) -> list[str]:
    lines = ["### Failover (one replica lost)", ""]
    base = ((r.get("slo_check") or {}).get("1x") or {}).get("workloads") or {}
    if r["degraded"]:
        lines += [
            f"Each p95 comes with its {CONFIDENCE:.0%} interval (a bootstrap over the simulated "
            f"requests in {BLOCK_S:g}-s blocks): a simulated p95 moves by 5-8% from one run to "
            "the next, so `vs 1x` says higher or lower only where the two intervals do not "
            "overlap.",
            "",
        ]
    normal = normal_targets(r)
    for d in r["degraded"]:
        lines += [f"**{d['pool']}**: {d['failover']}.", ""]
        header, rows = _rows(d, base, normal)
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
        return [
            "No workload states a degraded SLO (`degraded_slo`), so a lost replica is held to "
            "the normal SLO until it is replaced: a row 'over the normal SLO' is a miss for that "
            "long. State a degraded SLO to size for a looser one."
        ]
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
    missed = normal_misses(r)
    normal = [
        f"With one replica lost, {workload} misses its normal SLO ({'; '.join(what)}), and no "
        "degraded SLO is stated (section 5)."
        for workload, what in missed.items()
    ]
    if normal:
        normal.append("")
    if not mode.get("stated"):
        return normal
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
        # NOTE: "shed low-priority traffic" was said of pools serving one tier, with nothing
        # lower to shed (the code assistant's one workload).
        if shed is None:
            remedy = (
                "no lower tier shares the pool to shed: state a `degraded_slo` to size for one "
                "replica lost, or add a replica"
            )
        elif shed["pass"]:
            remedy = f"shedding the {shed['tier']} tier keeps the others within it"
        else:
            remedy = f"even with the {shed['tier']} tier shed it misses: add a replica"
        # NOTE: with no degraded SLO stated the check holds the lost replica to the normal
        # one; "breaks the degraded SLO" named an SLO nobody stated.
        which = (
            "the degraded SLO"
            if any((d.get("degraded_slo") or {}).values())
            else "the normal SLO (no degraded SLO is stated)"
        )
        out.append(
            f"* Losing a {d['pool']} replica breaks {which} (section 5): replace it "
            f"fast (cold start dominated by weight load); {remedy}."
        )
    return out
