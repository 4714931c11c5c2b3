"""Charts (PNG through matplotlib's Agg backend) and a self-contained HTML page.

One run: TTFT / ITL / TPOT / E2EL distributions, and latency percentiles per time window
against the load in that window. A sweep: latency percentiles and goodput against offered load.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from inhouse.bench.metrics import RequestResult

WINDOW_S = 5.0


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_run_charts(results: Sequence[RequestResult], out_dir: Path) -> list[str]:
    done = [r for r in results if r.success]
    if not done:
        return []
    return [_distributions(done, out_dir / "distributions.png"), _timeline(done, out_dir)]


def _distributions(done: Sequence[RequestResult], path: Path) -> str:
    plt = _plt()
    series = {
        "TTFT (ms)": [r.outcome.ttft_s * 1000 for r in done],
        "ITL (ms, per chunk)": [g * 1000 for r in done for g in r.outcome.itl_s],
        "TPOT (ms)": [r.tpot_s * 1000 for r in done if r.output_len > 1],
        "E2EL (ms)": [r.outcome.latency_s * 1000 for r in done],
    }
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for ax, (title, values) in zip(axes.flat, series.items(), strict=True):
        data = np.asarray(values or [0.0])
        ax.hist(data, bins=60, color="#4472c4", alpha=0.85)
        for p, style in ((50, "-"), (95, "--"), (99, ":")):
            value = float(np.percentile(data, p))
            ax.axvline(value, color="#c00000", linestyle=style, label=f"p{p} {value:.1f}")
        ax.set_title(title)
        ax.set_ylabel("count")
        ax.legend(fontsize=8)
    fig.suptitle("Latency distributions (vLLM definitions)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name


def _timeline(done: Sequence[RequestResult], out_dir: Path) -> str:
    """Per window of WINDOW_S: TTFT and TPOT percentiles, and the request rate (the load)."""
    plt = _plt()
    t0 = min(r.outcome.t_sched for r in done)
    end = max(r.outcome.t_send - t0 for r in done)
    num_windows = max(1, int(np.ceil((end + 1e-9) / WINDOW_S)))
    rows = []
    for w in range(num_windows):
        inside = [r for r in done if w * WINDOW_S <= r.outcome.t_send - t0 < (w + 1) * WINDOW_S]
        if not inside:
            continue
        ttft = np.asarray([r.outcome.ttft_s * 1000 for r in inside])
        tpot = np.asarray([r.tpot_s * 1000 for r in inside])
        rows.append(
            (
                (w + 0.5) * WINDOW_S,
                len(inside) / WINDOW_S,
                *np.percentile(ttft, [50, 95, 99]),
                *np.percentile(tpot, [50, 95, 99]),
            )
        )
    data = np.asarray(rows)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, offset, name in ((ax1, 2, "TTFT"), (ax2, 5, "TPOT")):
        for i, p in enumerate((50, 95, 99)):
            ax.plot(data[:, 0], data[:, offset + i], marker="o", label=f"{name} p{p}")
        ax.set_xlabel(f"time (s), {WINDOW_S:g}-s windows")
        ax.set_ylabel(f"{name} (ms)")
        twin = ax.twinx()
        twin.bar(data[:, 0], data[:, 1], width=WINDOW_S * 0.8, alpha=0.15, color="gray")
        twin.set_ylabel("load: requests sent per s")
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle("Latency percentiles against load, per window")
    fig.tight_layout()
    path = out_dir / "timeline.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name


def write_sweep_chart(points: Sequence[dict[str, Any]], out_dir: Path) -> str:
    plt = _plt()
    points = sorted(points, key=lambda p: p["rate"])
    rates = [p["rate"] for p in points]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    for ax, metric in zip(axes[:2], ("ttft", "tpot"), strict=True):
        for p in ("p50", "p95", "p99"):
            ax.plot(rates, [pt.get(f"{p}_{metric}_ms") for pt in points], marker="o", label=p)
        ax.set_xlabel("offered load (req/s)")
        ax.set_ylabel(f"{metric.upper()} (ms)")
        ax.set_title(f"{metric.upper()} percentiles against load")
        ax.legend(fontsize=8)
    ax = axes[2]
    ax.plot(rates, [pt.get("request_throughput") for pt in points], marker="o", label="throughput")
    goodput = [pt.get("request_goodput") for pt in points]
    if any(g is not None for g in goodput):
        ax.plot(rates, [g or 0.0 for g in goodput], marker="s", label="goodput")
    ax.plot(rates, rates, linestyle=":", color="gray", label="offered")
    ax.set_xlabel("offered load (req/s)")
    ax.set_ylabel("req/s")
    ax.set_title("Throughput and goodput")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out_dir / "sweep.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name


def write_html(path: Path, result: dict[str, Any], images: Sequence[str], markdown: str) -> None:
    """One file: the report text and every chart inlined as base64 PNG."""
    figures = []
    for name in images:
        data = base64.b64encode((path.parent / name).read_bytes()).decode("ascii")
        figures.append(
            f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(name)}</figcaption></figure>"
        )
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>inhouse bench report</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}}
pre{{white-space:pre-wrap;background:#f6f6f6;padding:1em}}img{{max-width:100%}}</style>
</head><body>
<h1>inhouse bench</h1>
{"<p><b>WARNING: the client was a bottleneck.</b></p>" if result.get("client_bottleneck") else ""}
<pre>{html.escape(markdown)}</pre>
{"".join(figures)}
</body></html>
"""
    path.write_text(page, encoding="utf-8")
