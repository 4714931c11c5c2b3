"""The report's one chart: each measured SLO row against its target, as PNG bytes (Agg)."""

from __future__ import annotations

import io
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from inhouse.report.slo import SloRow

DPI = 110


# A `>=` row measured at 0 (nothing served) is infinitely far from its target: drawn this far.
NOTHING_SERVED_RATIO = 3.0


def bars(rows: Sequence[SloRow]) -> list[tuple[str, float, bool]]:
    """(row, ratio, within target) for each measured row: measured over target (below 1 is
    inside the target for `<` rows; for `>=` rows the ratio is target over measured, so below
    1 is good there too). A measured 0 is drawn, not dropped: 0 failures is a bar at 0, a
    throughput of 0 a red bar at `NOTHING_SERVED_RATIO`."""
    out: list[tuple[str, float, bool]] = []
    for row in rows:
        m, t = row.measured.figure, row.target.figure
        if m is None or t is None or t.value <= 0 or m.value < 0:
            continue
        if row.target.op == "<":
            ratio = m.value / t.value
        else:
            ratio = t.value / m.value if m.value > 0 else NOTHING_SERVED_RATIO
        out.append((f"{row.workload} {row.metric}", ratio, row.verdict is not False))
    return out


def slo_chart(rows: Sequence[SloRow]) -> bytes | None:
    """The measured rows' `bars` against 1 (the target), green within it, red past it."""
    bars_ = bars(rows)
    if not bars_:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(bars_) + 1.2))
    names = [b[0] for b in bars_][::-1]
    values = [b[1] for b in bars_][::-1]
    colors = ["#2e7d32" if b[2] else "#c62828" for b in bars_][::-1]
    ax.barh(names, values, color=colors)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xlabel("measured / target (1 = at the target; red: misses it)")
    ax.set_title("SLO rows: measured against target")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()
