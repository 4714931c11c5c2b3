"""The sizing memo's word on the 1x verification's noise: each 1x p95 with its interval, and a
plain statement wherever a pass is within the simulator's noise (`marginal` in `plan.json`:
the interval reaches past the target). Written from `plan.json`'s `slo_check["1x"]` alone."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from inhouse.plan.memo_format import METRIC_NAMES, _ms, _span, _with_interval
from inhouse.plan.p95_interval import BLOCK_S, CONFIDENCE

WITHIN_NOISE = "passed by less than the simulator's noise"


def verification_cell(item: Mapping[str, Any]) -> str:
    """A 1x row's simulated cell: the p95 with its interval, the verdict, and the noise."""
    cell = f"{_with_interval(item.get('p95_ms'), item.get('p95_interval_ms'))} "
    cell += "ok" if item.get("pass") else "MISS"
    if item.get("marginal"):
        cell += f", {WITHIN_NOISE} (interval past the target)"
    return cell


def interval_note(r: Mapping[str, Any]) -> list[str]:
    """Under the SLO table: what the 1x range is and what `within noise` means."""
    one = r["slo_check"].get("1x")
    if not one:
        return []
    return [
        f"The 1x range is the p95's {CONFIDENCE:.0%} interval (a bootstrap over "
        f"{BLOCK_S:g}-s blocks of the run's requests: one {one['simulated_s']:g}-s run with one "
        "seed). Where it reaches past the target, the pass is within the simulator's noise: "
        "another seed could miss."
    ]


def marginal_items(r: Mapping[str, Any]) -> list[str]:
    """Section 7's words for each 1x pass within the simulator's noise."""
    one = r["slo_check"].get("1x") or {}
    return [
        f"the 1x check {WITHIN_NOISE}: {workload} {METRIC_NAMES[metric]} "
        f"{_ms(item['p95_ms'])}, interval {_span(item['p95_interval_ms'])}, target "
        f"{_ms(item['target_ms'])} (one {one['simulated_s']:g}-s run, one seed; a longer "
        "`verify_duration_s` or more seeds would settle it)"
        for workload, metric, item in _marginal(one)
    ]


def any_marginal(r: Mapping[str, Any]) -> bool:
    return any(True for _ in _marginal(r["slo_check"].get("1x") or {}))


def _marginal(one: Mapping[str, Any]) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    for workload, row in (one.get("workloads") or {}).items():
        for metric, item in row["metrics"].items():
            if item.get("marginal"):
                yield workload, metric, item
