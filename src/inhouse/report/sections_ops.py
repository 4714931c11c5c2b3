"""Sections 4, 6 and 8: the SLO commitments, observability and the runbook drills."""

from __future__ import annotations

import re
from typing import Any

from inhouse.report.context import Context, table
from inhouse.report.inputs import DRILLS, DrillRun, Drills
from inhouse.report.measure import Gap
from inhouse.report.rendered import threshold_text
from inhouse.report.slo import METRIC, Bound, SloRow, row_names, tally

POST_MORTEM = [
    "* **Timeline** (UTC): fault injected / detected (first alert) / mitigated / recovered.",
    "* **Impact**: requests failed, p95 TTFT while degraded against the degraded SLO, tenants "
    "affected.",
    "* **Detection**: which alert fired, after how long, and did it reach Alertmanager?",
    "* **Root cause** and **what contained it** (router, limits, probes, drain).",
    "* **Action items**, each with an owner and a date; re-run the drill to close them.",
]


def _bound(ctx: Context, bound: Bound) -> str:
    if bound.figure is None:
        return bound.note or "—"
    text = f"{bound.op} {ctx.show(bound.figure)}"
    return f"{text} ({bound.note})" if bound.note else text


def _measured(ctx: Context, row: SloRow) -> str:
    reading = row.measured
    if reading.figure is None:
        count = "" if ctx.public or not reading.samples else f" ({reading.samples} here)"
        how = f"; {reading.how}" if reading.how else ""
        # NOTE: a failure the stack must fix reads as one, as a miss does (" MISS"), not as a
        # measurement still to take.
        failed = "FAILED, " if reading.gap is Gap.FAILED else ""
        return f"{failed}not measured: {reading.why}{count}{how}"
    verdict = {True: " ok", False: " MISS", None: ""}[row.verdict]
    note = f" ({reading.note})" if reading.note else ""
    return ctx.show(reading.figure) + verdict + note


def _source(row: SloRow) -> str:
    figure = row.measured.figure
    return "—" if figure is None else f"`{figure.source.file}` → `{figure.source.path}`"


def slo(ctx: Context, chart: str | None) -> list[str]:
    lines = ctx.section("4. SLO commitments")
    rows = [
        [
            r.workload,
            r.metric,
            _bound(ctx, r.target),
            _bound(ctx, r.alarm),
            _measured(ctx, r),
            _source(r),
        ]
        for r in ctx.rows
    ]
    lines += table(["workload", "metric", "target", "alarm at", "measured", "source"], rows)
    tallied = tally(ctx.rows)
    failed = (
        f"{len(tallied.failed)} failed, the stack's to fix ({row_names(tallied.failed)}): the runs "
        "sent enough requests and too many of them failed, and more of the bench would fail as "
        "well; "
        if tallied.failed
        else ""
    )
    lines.append(
        f"{len(tallied.measured)} of {len(ctx.rows)} rows are measured; {failed}"
        f"{len(tallied.unmeasured)} not measured yet, a measurement still to take"
        + (f" ({row_names(tallied.unmeasured)})" if tallied.unmeasured else "")
        + " — a row without a measured number is a wish, not a commitment. "
        + (
            f"{len(tallied.missed)} measured row(s) miss their target: {row_names(tallied.missed)}."
            if tallied.missed
            else "Every measured row meets its target."
            if not tallied.unjudged
            else ""
        )
        + (
            f" {len(tallied.unjudged)} measured row(s) have no target to judge them by: "
            f"{row_names(tallied.unjudged)}."
            if tallied.unjudged
            else ""
        )
    )
    lines.append("")
    lines += _planned_p95s(ctx)
    if chart:
        lines += [f"![measured against target, per SLO row]({chart})", ""]
    return lines


def _planned_p95s(ctx: Context) -> list[str]:
    """The planner's simulated p95s at 1x peak (plan.json `slo_check["1x"]`), counted over the
    requests after its warm-up as the measured rows are: what the table's figures were planned
    to be."""
    plan = ctx.inputs.plan
    base = ("slo_check", "1x", "workloads")
    parts = []
    for workload, result in (plan.get(*base) or {}).items():
        for metric in result.get("metrics") or {}:
            figure = plan.figure(
                *base, workload, "metrics", metric, "p95_ms", kind="estimate", unit="ms"
            )
            if figure is not None and metric in METRIC:
                parts.append(f"{workload} {METRIC[metric]} {ctx.show(figure)}")
    if not parts:
        return []
    length = plan.figure("slo_check", "1x", "simulated_s", kind="config", unit="s", digits=0)
    over = f"{ctx.show(length)} of arrivals, " if length is not None else ""
    return [
        f'Planned: the planner\'s simulation at 1x peak ({over}plan.json `slo_check["1x"]`), '
        "over the requests scheduled after its warm-up, as the measured rows are: "
        + "; ".join(parts)
        + ". Its TTFT counts every request, warm or cold, where the measured rows split them.",
        "",
    ]


def observability(ctx: Context) -> list[str]:
    lines = ctx.section("6. Observability")
    lines += [
        "Prometheus for metrics, Grafana for dashboards, Loki for logs, Tempo for traces, "
        "Alertmanager for pages and tickets, all on the same rack: no SaaS, the air gap rules it "
        "out.",
        "",
    ]
    render = ctx.inputs.render
    if render is None:
        return [*lines, "No render output given (`inhouse report --render DIR`).", ""]
    lines += [f"Dashboards, as `inhouse render` wrote them to `{render.directory}/grafana/`:", ""]
    lines += table(
        ["dashboard", "file", "panels", "what it shows"],
        [
            [
                d.title,
                f"`{d.file}`",
                str(len(d.panels)),
                ", ".join(d.panels[:6]) + ("…" if len(d.panels) > 6 else ""),
            ]
            for d in ctx.dashboards
        ],
    )
    lines += [f"Alerts, from `{render.directory}/prometheus/rules.yaml`:", ""]
    rows = []
    for a in ctx.alerts:
        rows.append([a.name, a.pool or "all", threshold_text(a), a.hold, a.severity, a.summary])
    lines += table(["alert", "pool", "threshold", "for", "page or ticket", "summary"], rows)
    pages = sum(1 for a in ctx.alerts if a.severity == "page")
    lines += [
        f"{pages} page and {len(ctx.alerts) - pages} ticket rules; each links its entry in "
        "`runbook.md`. A page wakes someone; a ticket waits for working hours.",
        "",
    ]
    return lines


def _md_sections(text: str | None) -> dict[str, str]:
    """`## Heading` -> its body, headings lower-cased."""
    out: dict[str, str] = {}
    if not text:
        return out
    parts = re.split(r"^#{2,3}\s+(.+)$", text, flags=re.MULTILINE)
    for heading, body in zip(parts[1::2], parts[2::2], strict=False):
        out[heading.strip().lower()] = body.strip()
    return out


def _find(sections: dict[str, str], *words: str) -> str | None:
    for heading, body in sections.items():
        if any(w in heading for w in words):
            return body
    return None


def _bullet(line: str) -> str:
    """`*     5.6 s: ...` (aligned times) reads as code in CommonMark: one space after the mark."""
    return re.sub(r"^([*-])\s{2,}", r"\1 ", line)


def drill_conditions(found: Drills | None) -> str:
    """How the drills ran, where it was not as in production: `--quick` (summary.json) and
    the rules' `for:` holds and range windows scaled (each evidence's `prometheus.time_scale`):
    a page that came within a scaled hold comes after the full hold in production; and the
    virtual soak's days shortened (`--soak-day-s`, summary.json `soak_day_s`), when it ran."""
    if found is None:
        return ""
    parts = []
    if found.summary is not None and found.summary.get("quick") is True:
        parts.append("quick runs")
    scales = sorted(
        {
            float(scale)
            for run in found.runs
            if isinstance(scale := run.evidence.get("prometheus", "time_scale"), int | float)
            and not isinstance(scale, bool)
            and scale != 1
        }
    )
    if scales:
        parts.append("the rules' holds and windows at " + ", ".join(f"{s:g}x" for s in scales))
    day_s = found.summary.get("soak_day_s") if found.summary is not None else None
    if (
        isinstance(day_s, int | float)
        and not isinstance(day_s, bool)
        and found.run("soak") is not None
    ):
        parts.append(f"the soak's simulated days shortened to {day_s:g} s, not 24 h")
    return ", ".join(parts)


def drills(ctx: Context) -> list[str]:
    lines = ctx.section("8. Runbook drills")
    found = ctx.inputs.drills
    lines += [
        "Seven scripted failure drills, run before go-live and monthly after, each judged by a "
        "real Prometheus and Alertmanager: an alert counts only when its notification reached "
        "Alertmanager's receiver.",
        "",
    ]
    how = drill_conditions(found)
    if how:
        lines += [
            f"How these drills ran: {how}. A scaled hold shortens when an alert may fire, not its "
            "threshold: in production each page comes after its rule's full `for:`.",
            "",
        ]
    if found is None:
        lines += [
            "No drill evidence given (`inhouse drill run all --out DIR`, then "
            "`inhouse report --drills DIR`): every drill below is **not run**.",
            "",
        ]
    summary = []
    for name, title in DRILLS:
        run = found.run(name) if found else None
        verdict = "not run" if run is None else str(run.evidence.get("verdict") or "?")
        summary.append([name, title, verdict, run.evidence.name if run else "—"])
    lines += table(["drill", "what it breaks", "verdict", "evidence"], summary)
    for name, title in DRILLS:
        run = found.run(name) if found else None
        lines += _drill(ctx, name, title, run)
    return lines


def _expected(ctx: Context, check: dict[str, Any]) -> str:
    """A check's expected outcome, where the drill's report.md states none. A check's
    `expected` text can quote the run's own figures (the soak's names the windows its thirds
    pooled), so the public version names the check alone."""
    if ctx.public:
        return f"* {check.get('name')}"
    return f"* {check.get('name')}: {check.get('expected')}"


def _checks(ctx: Context, checks: list[dict[str, Any]]) -> list[str]:
    """Each check against what was observed. The public version gives the verdict, not the
    observed or expected text, either of which can carry a measured figure (see `_expected`)."""
    if ctx.public:
        return table(
            ["check", "observed"],
            [
                [str(c.get("name")), "as expected" if c.get("ok") else "NOT as expected"]
                for c in checks
            ],
        )
    rows = [
        [
            str(c.get("name")),
            str(c.get("expected")),
            f"{c.get('observed')} ({'as expected' if c.get('ok') else 'NOT as expected'})",
        ]
        for c in checks
    ]
    return table(["check", "expected", "observed"], rows)


def _drill(ctx: Context, name: str, title: str, run: DrillRun | None) -> list[str]:
    lines = [f"### {title} (`{name}`)", ""]
    if run is None:
        return [*lines, "Not run: no evidence.", ""]
    sections = _md_sections(run.report_md)
    checks: list[dict[str, Any]] = list(run.evidence.get("checks") or [])
    lines += [
        "**Expected outcome.**",
        "",
        _find(sections, "expected") or "\n".join(_expected(ctx, c) for c in checks),
        "",
    ]
    flags = _find(sections, "red flag")
    if flags:
        lines += ["**Red flags.**", "", flags, ""]
    lines += ["**Observed** (verdict: " + str(run.evidence.get("verdict")) + ").", ""]
    lines += _checks(ctx, checks)
    alerts = run.evidence.get("alerts") or []
    if alerts:
        lines += table(
            ["alert", "severity", "fired", "received by Alertmanager"],
            [
                [
                    str(a.get("name")),
                    str(a.get("severity")),
                    "yes" if a.get("fired_s") is not None else "no",
                    "yes" if a.get("received_by_alertmanager") else "no",
                ]
                for a in alerts
            ],
        )
    if run.timeline_file and not ctx.public:
        lines += [f"![{name} timeline]({run.timeline_file})", ""]
    template = _find(sections, "post-mortem", "postmortem")
    lines += [
        "**Post-mortem template.**",
        "",
        *(
            [_bullet(line) for line in template.splitlines()]
            if template and not ctx.public
            else POST_MORTEM
        ),
        "",
    ]
    return lines
