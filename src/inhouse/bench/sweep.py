"""`inhouse bench sweep`: the workload at multiples of a peak rate, then the highest rate that
still meets the SLOs.

A point *meets the SLOs* when at least `slo_target` of its requests (failures count against it)
meet every SLO given, and the client was not the bottleneck. A point where the client was the
bottleneck is neither a pass nor a fail: the search does not go above it.

Search (needs SLOs): from the multiples, `lo` = the highest passing rate and `hi` = the lowest
failing rate above it. With no failure yet, double from the highest rate; with no pass yet,
halve from the lowest; then bisect between `lo` and `hi`. Every step is one full run, with a
fresh prompt salt so no point is served from what an earlier point left in the prefix cache.
A point that was interrupted (Ctrl-C) stops the sweep: the points so far are written, no rate
is found.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from inhouse.bench.config import BenchSpec
from inhouse.bench.metrics import percentile_key

RunPoint = Callable[[BenchSpec, Path], dict[str, Any]]
POINT_KEYS = (
    "request_throughput",
    "request_goodput",
    "good_request_fraction",
    "output_throughput",
    "completed",
    "failed",
    "client_bottleneck",
    "prefix_cache_hit_rate_client",
    "prefix_cache_hit_rate_server",
)


class Interrupted(Exception):
    """A point's run was interrupted (Ctrl-C): the sweep stops there."""


def point_verdict(result: dict[str, Any], slo_target: float) -> str:
    if result["run"].get("interrupted"):
        return "interrupted"  # cut short: its figures neither pass nor fail it
    if result.get("client_bottleneck"):
        return "client-bound"
    fraction = result.get("good_request_fraction")
    if fraction is None:
        return "no-slo"
    return "pass" if fraction >= slo_target else "fail"


def summarize_point(
    rate: float, multiplier: float | None, result: dict[str, Any], slo_target: float
) -> dict[str, Any]:
    point: dict[str, Any] = {"rate": rate, "multiplier": multiplier}
    for metric in ("ttft", "tpot", "itl", "e2el", "ttft_sched"):
        for p in result["run"]["percentiles"]:
            key = f"p{percentile_key(p)}_{metric}_ms"
            point[key] = result.get(key)
    for key in POINT_KEYS:
        point[key] = result.get(key)
    point["verdict"] = point_verdict(result, slo_target)
    return point


def run_sweep(
    spec: BenchSpec,
    peak_rate: float,
    multipliers: Sequence[float],
    out_dir: Path,
    run_point: RunPoint,
    *,
    search: bool = True,
    search_steps: int = 4,
    slo_target: float = 0.99,
) -> dict[str, Any]:
    points: dict[float, dict[str, Any]] = {}

    def measure(rate: float, multiplier: float | None) -> dict[str, Any]:
        rate = round(rate, 4)
        if rate not in points:
            point_spec = replace(spec, rate=rate, prompt_salt=None)
            result = run_point(point_spec, out_dir / f"rate-{rate:g}")
            points[rate] = summarize_point(rate, multiplier, result, slo_target)
            if points[rate]["verdict"] == "interrupted":
                raise Interrupted
        return points[rate]

    best: float | None = None
    interrupted = False
    try:
        for multiplier in multipliers:
            measure(peak_rate * multiplier, multiplier)
        if search and spec.slo:
            best = _search(points, measure, search_steps)
    except Interrupted:
        interrupted = True  # the points so far are kept; no rate was found
    ordered = [points[r] for r in sorted(points)]
    out = {
        "interrupted": interrupted,
        "peak_rate": peak_rate,
        "multipliers": list(multipliers),
        "slo": dict(spec.slo),
        "slo_target": slo_target,
        "max_rate_meeting_slo": best,
        "goodput_at_max_rate": points[best]["request_goodput"] if best is not None else None,
        "points": ordered,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "sweep.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return out


def _search(
    points: dict[float, dict[str, Any]],
    measure: Callable[[float, float | None], dict[str, Any]],
    steps: int,
) -> float | None:
    def bounds() -> tuple[float | None, float | None, float | None]:
        passing = [r for r, p in points.items() if p["verdict"] == "pass"]
        lo = max(passing) if passing else None
        above = [r for r, p in points.items() if p["verdict"] != "pass" and (lo is None or r > lo)]
        bound = min(above) if above else None
        blocked = bound is not None and points[bound]["verdict"] == "client-bound"
        return lo, bound, (bound if blocked else None)

    for _ in range(steps):
        lo, hi, client_bound = bounds()
        if client_bound is not None and (lo is None or client_bound > lo):
            if lo is None:
                return None
            mid = (lo + client_bound) / 2
        elif hi is None:
            assert lo is not None
            mid = lo * 2
        elif lo is None:
            mid = min(points) / 2
        else:
            mid = (lo + hi) / 2
        if round(mid, 4) in points:
            break
        measure(mid, None)
    lo, _, _ = bounds()
    return lo


def render_sweep_markdown(sweep: dict[str, Any], chart: str | None) -> str:
    lines = [
        "# inhouse bench sweep",
        "",
        f"- peak rate {sweep['peak_rate']:g} req/s; multipliers {sweep['multipliers']}",
        f"- SLOs {sweep['slo'] or 'none'}; a point passes when ≥ "
        f"{100 * sweep['slo_target']:g}% of requests meet them",
        f"- **highest rate meeting the SLOs: {sweep['max_rate_meeting_slo']}** "
        f"(goodput {sweep['goodput_at_max_rate']})",
        *(
            ["- **interrupted**: the sweep stopped at the interrupted point"]
            if sweep.get("interrupted")
            else []
        ),
        "",
        "| rate | × | verdict | good % | goodput | throughput | p50 TTFT | p95 TTFT | p99 TTFT "
        "| p50 TPOT | p95 TPOT | p99 TPOT |",
        "|---" * 12 + "|",
    ]

    def f(value: Any) -> str:
        return (
            "—" if value is None else (f"{value:.2f}" if isinstance(value, float) else str(value))
        )

    for p in sweep["points"]:
        good = p.get("good_request_fraction")
        lines.append(
            f"| {p['rate']:g} | {f(p['multiplier'])} | {p['verdict']} | "
            f"{'—' if good is None else f'{100 * good:.1f}'} | {f(p['request_goodput'])} | "
            f"{f(p['request_throughput'])} | {f(p.get('p50_ttft_ms'))} | "
            f"{f(p.get('p95_ttft_ms'))} | {f(p.get('p99_ttft_ms'))} | {f(p.get('p50_tpot_ms'))} | "
            f"{f(p.get('p95_tpot_ms'))} | {f(p.get('p99_tpot_ms'))} |"
        )
    if chart:
        lines += ["", f"![sweep]({chart})"]
    return "\n".join(lines) + "\n"
