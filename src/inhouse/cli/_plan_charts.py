"""Charts for the sizing memo, drawn from `plan.json` with matplotlib's Agg backend."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from inhouse.plan.verify import metric_words

DPI = 110


def write_charts(report: Mapping[str, Any], out_dir: Path) -> dict[str, str]:
    """Write the PNGs next to the memo; returns `{chart: file name}` for those drawn."""
    charts: dict[str, str] = {}
    for name, draw in (
        ("latency", _latency),
        ("cost", _cost),
        ("sensitivity", _sensitivity),
        ("memory", _memory),
    ):
        fig = draw(report)
        if fig is None:
            continue
        file_name = f"{name}.png"
        fig.savefig(out_dir / file_name, dpi=DPI, bbox_inches="tight")
        plt.close(fig)
        charts[name] = file_name
    return charts


def _latency(report: Mapping[str, Any]) -> Any:
    checks = report["slo_check"]
    multiples = sorted((k for k in checks if k.endswith("x")), key=lambda k: float(k[:-1]))
    if not multiples:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for workload, targets in checks["targets"].items():
        long = (checks.get("long_prompts") or {}).get(workload)
        if long is not None:
            targets = {**targets, "long_ttft": long["ttft"]}
        for metric, target in targets.items():
            xs, ys = [], []
            for m in multiples:
                item = checks[m]["workloads"][workload]["metrics"].get(metric)
                if item and item.get("p95_ms") is not None:
                    xs.append(float(m[:-1]))
                    ys.append(item["p95_ms"] / target["target_ms"])
            ax.plot(xs, ys, marker="o", label=f"{workload} p95 {metric_words(metric)}")
    ax.axhline(1.0, color="black", linewidth=1, linestyle="--", label="target")
    ax.set_yscale("log")
    ax.set_xlabel("load (x peak)")
    ax.set_ylabel("simulated p95 / target")
    ax.set_title("Simulated p95 against the SLO target")
    ax.legend(fontsize=7)
    return fig


def _cost(report: Mapping[str, Any]) -> Any:
    cost = report["cost"]
    if not cost["api_usd_per_month"]:
        return None
    names = ["this stack", *cost["api_usd_per_month"]]
    values = [cost["usd_per_month"], *cost["api_usd_per_month"].values()]
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    ax.barh(names, values, color=["tab:green"] + ["tab:gray"] * (len(names) - 1))
    ax.set_xlabel("$ per month")
    ax.set_title(f"Monthly cost at {cost['active_hours_per_month']:.0f} active hours")
    return fig


def _sensitivity(report: Mapping[str, Any]) -> Any:
    """Worst predicted p95 over its target under each change; an overloaded stack (queues that
    grow without bound) is drawn hatched at the right edge."""
    rows: list[tuple[str, float | None]] = []
    for change in report["sensitivity"]:
        predicted = change.get("predicted_p95_ms")
        if change["name"] == "no_fp8":
            predicted = (change.get("same_layout") or {}).get("predicted_p95_ms")
        if not predicted:
            rows.append((change["change"], None))
            continue
        worst = 0.0
        for workload, targets in report["slo_check"]["targets"].items():
            for metric, target in targets.items():
                worst = max(worst, predicted[workload][metric] / target["target_ms"])
        rows.append((change["change"], worst))
    if not rows:
        return None
    finite = [v for _, v in rows if v is not None]
    edge = max([*finite, 1.0]) * 1.2
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    for i, (_, value) in enumerate(rows):
        if value is None:
            ax.barh(i, edge, color="white", edgecolor="tab:red", hatch="//")
            ax.text(edge, i, " overloaded", va="center", fontsize=7, color="tab:red")
        else:
            ax.barh(i, value, color="tab:orange")
    ax.set_yticks(range(len(rows)), [name for name, _ in rows])
    ax.axvline(1.0, color="black", linestyle="--", linewidth=1)
    ax.set_xlabel("worst predicted p95 / target")
    ax.set_title("What would invalidate the plan")
    return fig


def _memory(report: Mapping[str, Any]) -> Any:
    pools = report["pools"]
    fig, ax = plt.subplots(figsize=(6.5, 3.0))
    bottom = [0.0] * len(pools)
    names = [p["name"] for p in pools]
    for part, color in (
        ("weights", "tab:blue"),
        ("reserve", "tab:gray"),
        ("kv_cache", "tab:green"),
    ):
        values = [p["memory_gib_per_gpu"][part] for p in pools]
        ax.bar(names, values, bottom=bottom, label=part, color=color)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_ylabel("GiB per GPU")
    ax.set_title("Memory per GPU")
    ax.legend(fontsize=7)
    return fig
