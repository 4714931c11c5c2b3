"""What `inhouse render` wrote, read back: alerts from `prometheus/rules.yaml`, dashboards from
`grafana/*.json`. The report quotes these files; it never recomputes a threshold."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import yaml

from inhouse.report.figures import Figure, Source
from inhouse.report.inputs import RenderOutput

RULES_FILE = "prometheus/rules.yaml"
_ABSENT = re.compile(r"^absent(?:_over_time)?\((.*)\)$", re.S)
_JOB = re.compile(r'\bjob="([^"]*)"')
_COMPARISON = re.compile(r"(>=|<=|==|>|<)\s*(-?\d+(?:\.\d+)?(?:e-?\d+)?)\s*\)?\s*$")


@dataclass(frozen=True, slots=True)
class Alert:
    name: str
    severity: str
    hold: str
    expr: str
    pool: str | None
    summary: str
    comparator: str | None
    threshold: float | None
    source: Source
    workload: str | None = None  # the `workload` label, on alerts of one workload's SLO


@dataclass(frozen=True, slots=True)
class Dashboard:
    file: str
    title: str
    panels: tuple[str, ...]


def _threshold(expr: str) -> tuple[str | None, float | None]:
    """The comparison the alert's expression ends in (`... > 0.95`). An `absent(...)` rule has
    none: a comparison inside it filters the series whose absence fires it."""
    if _ABSENT.match(expr.strip()):
        return None, None
    last = expr.strip().splitlines()[-1] if expr.strip() else ""
    match = _COMPARISON.search(last)
    if match is None:
        return None, None
    return match.group(1), float(match.group(2))


_TEMPLATE_LABEL = re.compile(r"\{\{\s*\$labels\.(\w+)\s*\}\}")
_MATCHER = re.compile(r'(\w+)="([^"]*)"')


def summary_text(summary: str, labels: dict[str, Any], expr: str) -> str:
    """An alert's summary template in words: `{{ $labels.X }}` becomes the value the rule
    fixes (its own label, or an `X="v"` matcher in its expression), else `X` as a code span,
    the label a page will name; two placeholders in a row (`{{ $labels.Hostname }}{{
    $labels.hostname }}`, one per exporter) read as one."""
    fixed: dict[str, str] = {str(k): str(v) for k, v in _MATCHER.findall(expr)}
    fixed.update({str(k): str(v) for k, v in labels.items()})

    def word(match: re.Match[str]) -> str:
        name = match.group(1)
        return fixed.get(name, f"`{name}`")

    text = _TEMPLATE_LABEL.sub(word, summary)
    return re.sub(r"(`\w+`)(`\w+`)", lambda m: m.group(1), text)


def read_alerts(render: RenderOutput | None) -> list[Alert]:
    if render is None or RULES_FILE not in render.files:
        return []
    data: Any = yaml.safe_load(render.files[RULES_FILE]) or {}
    name = f"{render.directory}/{RULES_FILE}"
    out = []
    for g, group in enumerate(data.get("groups") or []):
        for r, rule in enumerate(group.get("rules") or []):
            if "alert" not in rule:
                continue
            labels = rule.get("labels") or {}
            comparator, threshold = _threshold(str(rule.get("expr", "")))
            out.append(
                Alert(
                    name=str(rule["alert"]),
                    severity=str(labels.get("severity", "")),
                    hold=str(rule.get("for") or "at once"),
                    expr=" ".join(str(rule.get("expr", "")).split()),
                    pool=labels.get("pool"),
                    summary=summary_text(
                        str((rule.get("annotations") or {}).get("summary", "")),
                        labels,
                        str(rule.get("expr", "")),
                    ),
                    comparator=comparator,
                    threshold=threshold,
                    source=Source(name, f"groups[{g}].rules[{r}].expr"),
                    workload=labels.get("workload"),
                )
            )
    return out


_ANY_COMPARISON = re.compile(r"(?:>=|<=|==|!=|>|<)\s*-?\d")
# A latency quantile in seconds: a recording rule `..._seconds:p95_5m` or a histogram_quantile
# over a `..._seconds_bucket` histogram. (A share of a seconds histogram's buckets, as the event
# loop's lag rule takes, is not a latency.)
_SECONDS_QUANTILE = re.compile(r"_seconds:p\d+|histogram_quantile\(.*_seconds_bucket")


def threshold_text(alert: Alert) -> str:
    """The alert's threshold as section 6 prints it: a latency in ms (the rules compare
    seconds; the SLOs are stated in ms), anything else as written. A rule of several
    comparisons is not reduced to one of them (its last is often a guard, `>= 10` errors).
    An `absent(...)` rule has no threshold: a dash and what its absence means."""
    absent = _ABSENT.match(alert.expr.strip())
    if absent is not None:
        return _absence_text(absent.group(1).strip())
    if alert.threshold is None or alert.comparator is None:
        return alert.expr[:60]
    if len(_ANY_COMPARISON.findall(alert.expr)) > 1:
        return "several conditions (rules.yaml)"
    if _SECONDS_QUANTILE.search(alert.expr):
        return f"{alert.comparator} {round(alert.threshold * 1000.0, 6):,g} ms"
    return f"{alert.comparator} {alert.threshold:g}"


def _absence_text(inner: str) -> str:
    """What an `absent(inner)` rule fires on, for the threshold column (its `for:` is beside)."""
    if inner.startswith("up{") or inner.startswith("up "):
        job = _JOB.search(inner)
        target = f"`{job.group(1)}` target" if job else "target"
        return f"— (absent: no {target} scraped up)"
    return f"— (absent: no `{inner[:60]}` series)"


def find_alert(
    alerts: list[Alert], name: str, pool: str | None = None, workload: str | None = None
) -> Alert | None:
    """The first alert of `name` on `pool` and, given a workload, one labelled for it (or for
    no workload): two workloads on one pool each have their own latency alert."""
    for alert in alerts:
        if alert.name != name or (pool is not None and alert.pool not in (None, pool)):
            continue
        if workload is None or alert.workload in (None, workload):
            return alert
    return None


def alert_threshold(alert: Alert | None, unit: str = "pct") -> Figure | None:
    if alert is None or alert.threshold is None:
        return None
    value = alert.threshold * 1000.0 if unit == "ms" else alert.threshold
    return Figure(value, "ms" if unit == "ms" else "pct", "target", alert.source)


def read_dashboards(render: RenderOutput | None) -> list[Dashboard]:
    if render is None:
        return []
    out = []
    for path, text in sorted(render.files.items()):
        if not (path.startswith("grafana/") and path.endswith(".json")):
            continue
        try:
            board = json.loads(text)
        except json.JSONDecodeError:
            continue
        if not isinstance(board, dict) or "panels" not in board:
            continue
        panels = tuple(
            str(p.get("title", "")) for p in board.get("panels") or [] if p.get("type") != "row"
        )
        out.append(Dashboard(f"{render.directory}/{path}", str(board.get("title", path)), panels))
    return out
