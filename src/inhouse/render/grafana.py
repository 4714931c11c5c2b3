"""Grafana dashboard JSON: panels laid out on a 24-column grid, a `datasource` variable so the
dashboards import as they are (Dashboards -> Import) into any Grafana, no uid baked in. What the
dashboards show is in `grafana_boards`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from inhouse.spec.stack import StackSpec

# The dashboards are checked against Grafana 12.4's dashboard schema (tests/render); they keep
# schemaVersion 39, so they import from Grafana 10.4 on and 12.4 migrates them as it loads them.
GRAFANA_SCHEMA_VERSION = "12.4.11"
SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRAFANA_UID_MAX = 40
RATE = "$__rate_interval"
QUANTILES = (("0.5", "p50"), ("0.95", "p95"), ("0.99", "p99"))


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    description: str
    targets: tuple[tuple[str, str], ...]  # (PromQL, legend)
    unit: str = "short"
    threshold: float | None = None
    kind: str = "timeseries"
    width: int = 12


Section = tuple[str, list[Panel]]  # a dashboard row: its title and its panels


@dataclass(slots=True)
class Board:
    key: str
    title: str
    description: str
    sections: list[Section] = field(default_factory=list)
    variables: list[dict[str, Any]] = field(default_factory=list)


def quantiles(metric: str, selector: str, by: str = "") -> tuple[tuple[str, str], ...]:
    group = f"le, {by}" if by else "le"
    legend = f"{{{{{by}}}}} " if by else ""
    return tuple(
        (
            f"histogram_quantile({q}, sum by ({group}) "
            f"(rate({metric}_bucket{{{selector}}}[{RATE}])))",
            f"{legend}{name}",
        )
        for q, name in QUANTILES
    )


def rate_sum(metric: str, selector: str = "", by: str = "", window: str = RATE) -> str:
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({metric}{{{selector}}}[{window}]))"


def hist(q: str, metric: str, selector: str = "", by: str = "") -> str:
    group = f"le, {by}" if by else "le"
    return f"histogram_quantile({q}, {rate_sum(metric + '_bucket', selector, group)})"


def mean(metric: str, selector: str = "", by: str = "") -> str:
    """A histogram's mean over the rate window: rate of its sum over rate of its count."""
    return (
        f"{rate_sum(metric + '_sum', selector, by)} / {rate_sum(metric + '_count', selector, by)}"
    )


def panel(title: str, description: str, *targets: tuple[str, str], **style: object) -> Panel:
    return Panel(title, description, targets, **style)  # type: ignore[arg-type]


def le_label(bound: float) -> str:
    """A bucket bound as prometheus_client writes its `le` label (0.75, 1.0, 2.5)."""
    return str(float(bound))


def textbox(name: str, label: str, value: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "description": description,
        "type": "textbox",
        "query": value,
        "current": {"text": value, "value": value},
        "hide": 0,
        "options": [],
    }


def panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.threshold is not None:
        defaults["thresholds"] = {
            "mode": "absolute",
            "steps": [
                {"color": "green", "value": None},
                {"color": "red", "value": panel.threshold},
            ],
        }
        defaults["custom"] = {"thresholdsStyle": {"mode": "line"}}
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": DATASOURCE,
                "expr": expr,
                "legendFormat": legend,
            }
            for i, (expr, legend) in enumerate(panel.targets)
        ],
    }


def board_uid(stack_name: str, key: str) -> str:
    """`inhouse-<stack>-<board>`, unique per stack and board within Grafana's 40 characters
    (it refuses a longer uid, and provisions one dashboard per uid): a stack name too long for
    that is replaced by a digest of it."""
    uid = f"inhouse-{stack_name}-{key}"
    if len(uid) <= GRAFANA_UID_MAX:
        return uid
    digest = hashlib.sha256(stack_name.encode()).hexdigest()[:12]
    return f"inhouse-{digest}-{key}"


def board_json(stack: StackSpec, board: Board) -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y = 0
    for title, section in board.sections:
        panels.append(
            {
                "id": len(panels) + 1,
                "type": "row",
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        x = 0
        for panel in section:
            if x + panel.width > 24:
                x, y = 0, y + 8
            panels.append(panel_json(panel, len(panels) + 1, x, y))
            x += panel.width
        y += 8
    datasource_var = {
        "name": "datasource",
        "label": "Prometheus",
        "type": "datasource",
        "query": "prometheus",
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
    }
    return {
        "id": None,
        "uid": board_uid(stack.name, board.key),
        "title": f"{stack.name} / {board.title}",
        "description": board.description,
        "tags": ["inhouse", stack.name],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": [datasource_var, *board.variables]},
        "panels": panels,
    }


def query_variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": "variable"},
        "refresh": 2,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "options": [],
        "hide": 0,
        "regex": "",
        "sort": 1,
    }


def render_boards(stack: StackSpec, boards: list[Board]) -> dict[str, str]:
    """`grafana/<key>.json` -> dashboard JSON text."""
    return {
        f"grafana/{b.key}.json": json.dumps(board_json(stack, b), indent=2) + "\n" for b in boards
    }


def dashboard_exprs(model: dict[str, Any]) -> list[str]:
    """Every PromQL expression of a dashboard (panels and variables), for the name check."""
    exprs = [t["expr"] for p in model["panels"] for t in p.get("targets", [])]
    for var in model["templating"]["list"]:
        if var["type"] == "query":
            exprs.append(var["query"]["query"].removeprefix("label_values(").split(",")[0])
    return exprs
