"""`runbook.md`: per alert what it means, the first PromQL to run, mitigations and when to
escalate. Section anchors are the alert names in lower case, which each rule's `runbook_url`
points at."""

from __future__ import annotations

from inhouse.render.alerts import Alert
from inhouse.render.dashboard_guide import DASHBOARDS, first_look_line
from inhouse.render.layout import EngineLayout, slo_of
from inhouse.spec.stack import StackSpec


def render_runbook(
    stack: StackSpec, engines: EngineLayout, alerts: list[Alert], namespace: str
) -> str:
    by_name: dict[str, list[Alert]] = {}
    for alert in alerts:
        by_name.setdefault(alert.name, []).append(alert)
    lines = [*_head_lines(stack, engines, namespace), *map(_alert_row, alerts)]
    for same in by_name.values():
        lines += _alert_section(same)
    lines.append("")
    return "\n".join(lines)


def _head_lines(stack: StackSpec, engines: EngineLayout, namespace: str) -> list[str]:
    """The title, the layout, the dashboards and the alert table's header."""
    return [
        f"# Runbook: {stack.name}",
        "",
        f"Rendered by `inhouse render` for namespace `{namespace}`. Alerts with "
        "`severity: page` wake someone now; `severity: ticket` waits for working hours. "
        "Every alert's `runbook_url` points at its section below.",
        "",
        "## Layout",
        "",
        *_layout_lines(engines),
        "",
        "## Dashboards",
        "",
        "Import `grafana/*.json` (or apply `k8s/grafana.yaml`). Each alert below names the "
        "panel to open first.",
        "",
        "| dashboard | file | what it shows |",
        "|---|---|---|",
        *(f"| {d.title} | `grafana/{d.key}.json` | {d.shows} |" for d in DASHBOARDS),
        "",
        "## Alerts",
        "",
        "| alert | severity | pool | workload |",
        "|---|---|---|---|",
    ]


def _alert_row(alert: Alert) -> str:
    pool = alert.labels.get("pool", "all")
    # A rule rendered once per workload (its SLO, its burn rate, its planned traffic) says
    # which one, or the rows of a pool that serves several read the same.
    workload = alert.labels.get("workload", "all" if "pool" in alert.labels else "—")
    return f"| [{alert.name}](#{alert.anchor}) | {alert.severity} | {pool} | {workload} |"


def _alert_section(same: list[Alert]) -> list[str]:
    """One alert's section: its rules (one per pool or workload), then the first one's
    runbook entry."""
    alert = same[0]
    entry = alert.runbook
    when = f"for {alert.hold}" if alert.hold != "0s" else "at once"
    return [
        "",
        f"## {alert.name}",
        "",
        f"**Severity:** {alert.severity}. **Fires** ({when}) when:",
        "",
        *(f"* `{' '.join(a.expr.split())}`" for a in same),
        "",
        f"**What it means.** {entry.meaning}",
        "",
        *([look, ""] if (look := first_look_line(alert.name)) else []),
        "**First query.**",
        "",
        "```promql",
        entry.first_promql,
        "```",
        "",
        "**Mitigations.**",
        "",
        *(f"{i}. {step}" for i, step in enumerate(entry.mitigations, 1)),
        "",
        f"**Escalate.** {entry.escalate}",
    ]


def _layout_lines(engines: EngineLayout) -> list[str]:
    mode = (
        "single node: static layout, one StatefulSet per pool, pod <pool>-<i> on replica i's "
        "GPU group, updated one replica at a time"
        if engines.single_node
        else "multi-node: one Deployment per pool, scaled by KEDA on vllm:num_requests_waiting"
    )
    lines = [
        f"Mode: {mode}.",
        "",
        "| engine | pool | model | TP | GPUs | p95 alarms |",
        "|---|---|---|---|---|---|",
    ]
    for unit in engines.units:
        slo = slo_of(unit.pool)
        alarms = ", ".join(
            f"{key.upper()} {slo.alarm_ms(key):g} ms"
            for key in ("ttft", "itl", "e2e")
            if slo.alarm_ms(key) is not None
        )
        gpus = ",".join(map(str, unit.gpu_ids)) or "device plugin"
        lines.append(
            f"| {unit.name} | {unit.pool.name} | {unit.pool.client_model_name} | {unit.pool.tp} "
            f"| {gpus} | {alarms} |"
        )
    return lines
