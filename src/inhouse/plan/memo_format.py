"""Number and table formatting shared by the sizing memo's sections."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

METRIC_NAMES = {
    "ttft": "p95 TTFT",
    "itl": "p95 ITL",
    "tpot": "p95 TPOT",
    "e2e": "p95 e2e",
    "long_ttft": "p95 TTFT (long prompts)",
}


def _ms(value: Any) -> str:
    if value is None:
        return "—"
    value = float(value)
    return f"{value / 1000:.2f} s" if value >= 10_000 else f"{value:,.0f} ms"


def _span(interval: Sequence[float]) -> str:
    """`934–1,173 ms` (the unit once when both ends share it)."""
    low, high = _ms(interval[0]), _ms(interval[1])
    if low.endswith(" ms") and high.endswith(" ms"):
        low = low.removesuffix(" ms")
    return f"{low}–{high}"


def _with_interval(value: Any, interval: Sequence[float] | None) -> str:
    """`1,080 ms (934–1,173 ms)`: a p95 with its interval, where there is one."""
    if value is None or not interval:
        return _ms(value)
    return f"{_ms(value)} ({_span(interval)})"


def _usd(value: Any, digits: int = 2) -> str:
    return "—" if value is None else f"${float(value):,.{digits}f}"


def _pct(value: Any) -> str:
    return "—" if value is None else f"{float(value):.0%}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return [*out, ""]
