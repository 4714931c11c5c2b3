"""The report's one chart: each measured SLO row against its target, as PNG bytes (Agg)."""

from __future__ import annotations

import io
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from inhouse.report.slo import SloRow

DPI = 110


def slo_chart(rows: Sequence[SloRow]) -> bytes | None:
    """Measured over target (below 1 is inside the target for `<` rows; for `>` rows the
    ratio is target over measured, so below 1 is good there too)."""
    bars: list[tuple[str, float, bool]] = []
    for row in rows:
        m, t = row.measured.figure, row.target.figure
        if m is None or t is None or t.value <= 0 or m.value <= 0:
            continue
        ratio = m.value / t.value if row.target.op == "<" else t.value / m.value
        bars.append((f"{row.workload} {row.metric}", ratio, row.verdict is not False))
    if not bars:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(bars) + 1.2))
    names = [b[0] for b in bars][::-1]
    values = [b[1] for b in bars][::-1]
    colors = ["#2e7d32" if b[2] else "#c62828" for b in bars][::-1]
    ax.barh(names, values, color=colors)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xlabel("measured / target (1 = at the target; red: misses it)")
    ax.set_title("SLO rows: measured against target")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()
