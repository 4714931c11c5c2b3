"""A drill's files: `evidence.json`, `timeline.png`, `report.md`; and over all drills,
`summary.json` and `drills.md`."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inhouse.drill.catalog import BY_NAME
from inhouse.drill.evidence import DrillResult, write_json

WINDOW_S = 2.0


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_drill(result: DrillResult, out_dir: Path) -> Path:
    """DIR/NAME/{evidence.json, timeline.png, report.md}; returns the drill's directory."""
    where = out_dir / result.drill
    where.mkdir(parents=True, exist_ok=True)
    write_json(where / "evidence.json", result.to_json())
    write_timeline(result, where / "timeline.png")
    (where / "report.md").write_text(report_md(result), encoding="utf-8")
    return where


def write_timeline(result: DrillResult, path: Path) -> None:
    """Load (requests sent per second), errors, p95 TTFT per window, each fault, each alert."""
    plt = _plt()
    end = max([result.duration_s, *(s.t_s for s in result.samples)], default=1.0) + WINDOW_S
    edges = np.arange(0.0, end + WINDOW_S, WINDOW_S)
    sent = [s.t_s for s in result.samples]
    # failures where they happened (the request's end), sends and refusals when they left
    errors = [s.end_s if s.end_s is not None else s.t_s for s in result.samples
              if s.error and s.error != "rejected-4xx"]  # fmt: skip
    rejected = [s.t_s for s in result.samples if s.error == "rejected-4xx"]
    fig, (ax_load, ax_ttft) = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    mids = edges[:-1] + WINDOW_S / 2
    for values, label, color in (
        (sent, "requests sent /s", "#4472c4"),
        (errors, "failed /s", "#c00000"),
        (rejected, "refused (4xx) /s", "#ed7d31"),
    ):
        counts, _ = np.histogram(values, bins=edges)
        ax_load.plot(mids, counts / WINDOW_S, label=label, color=color)
    ax_load.set_ylabel("requests / s")
    p95 = []
    for lo, hi in itertools.pairwise(edges):
        ttfts = [s.ttft_s * 1000 for s in result.samples if lo <= s.t_s < hi and s.ttft_s]
        p95.append(float(np.percentile(ttfts, 95)) if ttfts else np.nan)
    ax_ttft.plot(mids, p95, color="#70ad47", marker=".", label="p95 TTFT (ms)")
    ax_ttft.set_ylabel("p95 TTFT (ms)")
    ax_ttft.set_xlabel("seconds since the drill started")
    for ax in (ax_load, ax_ttft):
        for event in result.events:
            ax.axvline(event.t_s, color="#7f7f7f", linestyle=":", linewidth=1)
        for alert in result.alerts:
            if alert.fired_s is not None:
                stop = alert.resolved_s if alert.resolved_s is not None else end
                ax.axvspan(alert.fired_s, stop, color="#ffc000", alpha=0.25)
    for event in result.events:
        ax_load.annotate(
            event.what[:40],
            (event.t_s, 0),
            rotation=90,
            fontsize=7,
            va="bottom",
            ha="right",
            color="#404040",
        )
    for alert in result.alerts:
        if alert.fired_s is not None:
            ax_ttft.annotate(
                f"{alert.name} fired",
                (alert.fired_s, 0),
                rotation=90,
                fontsize=7,
                va="bottom",
                ha="left",
                color="#7f6000",
            )
    ax_load.legend(fontsize=8, loc="upper right")
    fig.suptitle(f"drill {result.drill}: {result.verdict}")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _table(rows: Sequence[Sequence[str]], head: Sequence[str]) -> list[str]:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return lines


def report_md(result: DrillResult) -> str:
    info = BY_NAME[result.drill]
    lines = [
        f"# Drill `{result.drill}`: {info.title}",
        "",
        f"**Verdict: {result.verdict}.** "
        f"Started {result.started}, {result.duration_s:.0f} s, stack {result.stack}.",
        "",
        info.purpose,
        "",
        "## Expected outcome",
        "",
    ]
    lines += [f"* {item}" for item in info.expected]
    lines += ["", "## Red flags", ""] + [f"* {item}" for item in info.red_flags]
    lines += ["", "## What was observed", ""]
    lines += _table(
        [(c.name, c.expected, c.observed, "ok" if c.ok else "FAILED") for c in result.checks],
        ("check", "expected", "observed", "result"),
    )
    lines += ["", "### Alerts (as Alertmanager's receiver got them)", ""]
    lines += (
        _table(
            [
                (
                    a.name,
                    a.severity,
                    _t(a.fired_s),
                    _t(a.resolved_s),
                    "yes" if a.received_by_alertmanager else "no",
                )
                for a in result.alerts
            ],
            ("alert", "severity", "fired (s)", "resolved (s)", "received"),
        )
        if result.alerts
        else ["None expected in this drill."]
    )
    prom = result.prometheus
    lines += [
        "",
        f"Judge: Prometheus {prom.get('version', '?')}, rules `{prom.get('rules_file')}`"
        f", time scale {prom.get('time_scale')} (holds and windows only).",
    ]
    if result.notes:
        lines += ["", "Notes:", ""] + [f"* {n}" for n in result.notes]
    lines += ["", "![timeline](timeline.png)", "", *_postmortem(result)]
    return "\n".join(lines) + "\n"


def _t(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _postmortem(result: DrillResult) -> list[str]:
    timeline = [(e.t_s, e.what) for e in result.events]
    for a in result.alerts:
        if a.fired_s is not None:
            timeline.append((a.fired_s, f"{a.name} ({a.severity}) reached Alertmanager"))
        if a.resolved_s is not None:
            timeline.append((a.resolved_s, f"{a.name} resolved"))
    failed = [c for c in result.checks if not c.ok]
    lines = ["## Post-mortem", "", "**Timeline** (seconds from the drill's start):", ""]
    lines += [f"* {t:7.1f} s: {what}" for t, what in sorted(timeline)]
    lines += ["", "**Impact.** " + _impact(result), "", "**What went wrong.** "]
    lines[-1] += "; ".join(f"{c.name}: {c.observed}" for c in failed) if failed else "Nothing."
    lines += [
        "",
        "**Root cause.** _(to fill in)_",
        "",
        "**Action items** (owner, due date):",
        "",
        "* _(to fill in)_",
        "",
        "**Detection.** " + _detection(result),
    ]
    return lines


def _impact(result: DrillResult) -> str:
    total = len(result.samples)
    failed = sum(1 for s in result.samples if s.error and s.error != "rejected-4xx")
    refused = sum(1 for s in result.samples if s.error == "rejected-4xx")
    if not total:
        return "No client traffic in this drill."
    return f"{total} requests sent: {failed} failed, {refused} refused by the gateway (4xx)."


def _detection(result: DrillResult) -> str:
    if not result.alerts:
        return "No alert is expected for this drill; its checks are the detection."
    return "; ".join(
        f"{a.name} " + (f"at {a.fired_s:.1f} s" if a.fired_s is not None else "NOT received")
        for a in result.alerts
    )


def write_summary(results: Sequence[DrillResult], out_dir: Path, meta: dict[str, Any]) -> None:
    drills: list[dict[str, Any]] = [
        {
            "drill": r.drill,
            "verdict": r.verdict,
            "duration_s": round(r.duration_s, 1),
            "failed_checks": r.failed_checks,
            "alerts_received": [a.name for a in r.alerts if a.received_by_alertmanager],
        }
        for r in results
    ]
    passed = sum(1 for r in results if r.verdict == "pass")
    summary = {**meta, "passed": passed, "failed": len(results) - passed, "drills": drills}
    write_json(out_dir / "summary.json", summary)
    title = f"{passed} of {len(results)} passed"
    if not meta.get("finished", True):
        planned = meta.get("planned") or []
        title = f"run not finished: {len(results)} of {len(planned)} drills ended, {passed} passed"
    lines = [
        f"# Drills: {title}",
        "",
        f"Stack {meta.get('stack')}, started {meta.get('started')}, "
        f"{meta.get('duration_s', 0):.0f} s; time scale {meta.get('time_scale')}.",
        "",
    ]
    lines += _table(
        [
            (
                f"[{d['drill']}]({d['drill']}/report.md)",
                d["verdict"],
                f"{d['duration_s']:.0f} s",
                ", ".join(d["alerts_received"]) or "-",
                ", ".join(d["failed_checks"]) or "-",
            )
            for d in drills
        ],
        ("drill", "verdict", "duration", "alerts received", "failed checks"),
    )
    (out_dir / "drills.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
