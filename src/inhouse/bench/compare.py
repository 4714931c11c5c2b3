"""`inhouse bench compare BASE NEW`: a regression table between two runs' `result.json`.

Each metric has a direction (latency: higher is worse; throughput, goodput, hit rate: lower is
worse). A change in the bad direction by more than its threshold (percent of the base value) is
a regression; the command exits 1 when there is one, so CI can gate an engine upgrade on it.
"""

from __future__ import annotations

import json
import math
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inhouse.bench.records import unfinished
from inhouse.errors import SpecError

HIGHER_IS_WORSE = tuple(
    f"{p}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for p in ("p50", "p95", "p99")
)
LOWER_IS_WORSE = (
    "request_throughput",
    "output_throughput",
    "request_goodput",
    "good_request_fraction",
    "prefix_cache_hit_rate_client",
    "prefix_cache_hit_rate_server",
)
DEFAULT_THRESHOLD_PCT = 10.0


@dataclass(frozen=True, slots=True)
class Row:
    metric: str
    base: float | None
    new: float | None
    change_pct: float | None
    threshold_pct: float
    status: str  # ok | REGRESSION | improved | missing


def load_result(path: Path) -> dict[str, Any]:
    file = path / "result.json" if path.is_dir() else path
    problem = unfinished(file.parent)
    if problem is not None:
        raise SpecError(f"{problem}; run the bench again, to completion, before comparing it")
    try:
        if not stat.S_ISREG(file.stat().st_mode):  # a FIFO would wait for a writer forever
            raise SpecError(f"{file}: not a regular file; give a result directory or result.json")
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError(f"cannot read {file}: {exc.strerror}") from None
    except ValueError as exc:
        raise SpecError(f"{file} is not JSON: {exc}") from None
    if not isinstance(data, dict) or "completed" not in data:
        raise SpecError(f"{file} is not a bench result (no `completed` key)")
    for metric in HIGHER_IS_WORSE + LOWER_IS_WORSE:
        value = data.get(metric)
        if value is None:
            continue
        # NOTE: a NaN would compare as "ok" and pass the gate; a bool would pass as 0 or 1.
        is_number = isinstance(value, int | float) and not isinstance(value, bool)
        if not is_number or not math.isfinite(value):
            raise SpecError(
                f"{file}: `{metric}` is {value!r:.60}, not a finite number; was it written by "
                f"another inhouse version ({data.get('inhouse_version', 'unknown')})? Re-run "
                "the bench with this one"
            )
    return data


def require_common_metrics(
    rows: list[Row], base: Mapping[str, Any], new: Mapping[str, Any], names: tuple[str, str]
) -> None:
    """Refuse a comparison with nothing in common: it would pass the gate comparing nothing."""
    if not any(row.status != "missing" for row in rows):
        versions = [str(side.get("inhouse_version", "unknown")) for side in (base, new)]
        raise SpecError(
            f"{names[0]} and {names[1]} have no metric in common (inhouse versions "
            f"{versions[0]} and {versions[1]}); compare two results of the same version"
        )


def compare(
    base: Mapping[str, Any],
    new: Mapping[str, Any],
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
    overrides: Mapping[str, float] | None = None,
) -> list[Row]:
    rows = []
    for metric, worse_sign in [(m, 1) for m in HIGHER_IS_WORSE] + [(m, -1) for m in LOWER_IS_WORSE]:
        b, n = base.get(metric), new.get(metric)
        limit = (overrides or {}).get(metric, threshold_pct)
        if b is None and n is None:
            continue
        if b is None or n is None:
            rows.append(Row(metric, b, n, None, limit, "missing"))
            continue
        b, n = float(b), float(n)
        if b == 0:
            change = 0.0 if n == 0 else float("inf") * (1 if n > 0 else -1)
        else:
            change = 100.0 * (n - b) / abs(b)
        bad = change * worse_sign
        status = "REGRESSION" if bad > limit else ("improved" if bad < -limit else "ok")
        rows.append(Row(metric, b, n, change, limit, status))
    return rows


def render_table(rows: list[Row], base_name: str, new_name: str) -> str:
    head = f"{'metric':<32} {'base':>12} {'new':>12} {'change':>9} {'limit':>7}  status"
    lines = [f"base: {base_name}", f"new:  {new_name}", head, "-" * len(head)]

    def fmt(value: float | None) -> str:
        return "—" if value is None else f"{value:,.3f}"

    for row in rows:
        change = "—" if row.change_pct is None else f"{row.change_pct:+.1f}%"
        lines.append(
            f"{row.metric:<32} {fmt(row.base):>12} {fmt(row.new):>12} {change:>9} "
            f"{row.threshold_pct:>6g}%  {row.status}"
        )
    regressions = [r.metric for r in rows if r.status == "REGRESSION"]
    lines.append("")
    lines.append(
        f"{len(regressions)} regression(s): {', '.join(regressions)}"
        if regressions
        else "no regression past the thresholds"
    )
    return "\n".join(lines)


def parse_overrides(items: list[str] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    known = set(HIGHER_IS_WORSE) | set(LOWER_IS_WORSE)
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or key not in known:
            raise SpecError(
                f"--metric-threshold {item!r}: use METRIC=PCT with METRIC one of "
                f"{', '.join(sorted(known))}"
            )
        try:
            out[key] = float(value)
        except ValueError:
            raise SpecError(f"--metric-threshold {item!r}: {value!r} is not a number") from None
    return out
