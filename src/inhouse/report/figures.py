"""Figures: every number the document prints, with where it came from and how it may be shown.

A `Figure` carries its value, unit, kind and source (a file and a JSON path into it). The
document never formats a number itself: it asks a `Ledger`, which formats the figure for the
internal or the public version and records it for the traceability appendix.

Kinds and what the public version does with them (the seeds' two-document split):

* `measured` (bench and drill results) and `estimate` (the planner's analytic and simulated
  figures): a range on a coarse 1-2-5 grid that never contains the exact value's text;
* `workload` (the customer's traffic and lengths): a range likewise;
* `price` (any dollar figure, input or derived): a named placeholder, `[$ capex per node]`;
* `target` (SLO targets and alarms) and `config` (replicas, GPUs, knobs): as they are.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["measured", "estimate", "workload", "price", "target", "config"]
Unit = Literal["ms", "s", "pct", "count", "rate", "tok", "usd", "usd_h", "usd_m", "months", "x", ""]
SANITIZED_KINDS = frozenset({"measured", "estimate", "workload", "price"})


@dataclass(frozen=True, slots=True)
class Source:
    """A file (as the reader sees it, e.g. `bench/chat/result.json`) and a path into it."""

    file: str
    path: str


@dataclass(frozen=True, slots=True)
class Figure:
    value: float
    unit: Unit
    kind: Kind
    source: Source
    label: str = ""
    digits: int | None = None

    def text(self) -> str:
        return format_value(self.value, self.unit, self.digits)

    def public_text(self) -> str:
        if self.kind == "price":
            return f"[price: {self.label or 'a price'}]"
        if self.kind in SANITIZED_KINDS:
            return format_range(self.value, self.unit, self.text())
        return self.text()


def format_value(value: float, unit: Unit, digits: int | None = None) -> str:
    if unit == "pct":
        return f"{value * 100:.{1 if digits is None else digits}f}%"
    if unit == "ms":
        if value >= 10_000:
            return f"{value / 1000:,.{1 if digits is None else digits}f} s"
        return f"{value:,.{0 if digits is None else digits}f} ms"
    if unit == "s":
        return f"{value:,.{1 if digits is None else digits}f} s"
    if unit in ("usd", "usd_h", "usd_m"):
        d = 2 if digits is None else digits
        suffix = {"usd": "", "usd_h": "/h", "usd_m": "/month"}[unit]
        return f"${value:,.{d}f}{suffix}"
    if unit == "months":
        return f"{value:,.{1 if digits is None else digits}f} months"
    if unit == "x":
        return f"{value:,.{1 if digits is None else digits}f}x"
    d = 0 if digits is None else digits
    if unit == "rate":
        return f"{value:,.{d if digits is not None else 1}f}"
    text = f"{value:,.{d}f}"
    return f"{text} tokens" if unit == "tok" else text


def _grid_step(value: float) -> float:
    """A 1-2-5 step about a fifth to a half of the value's magnitude."""
    magnitude = 10.0 ** math.floor(math.log10(abs(value)))
    for mult in (1, 2, 5, 10):
        step = magnitude * mult / 5
        if abs(value) / step <= 10:
            return step
    return magnitude


def spells(exact: str, text: str) -> bool:
    """Whether `exact` stands in `text` as a whole figure (not inside a longer number or word)."""
    return re.search(rf"(?<![\w.,]){re.escape(exact)}(?![\w]|[.,]\d)", text) is not None


def format_range(value: float, unit: Unit, exact: str) -> str:
    """A range around `value` whose ends sit on a coarse grid and never spell `exact` (the
    value as the internal version prints it); widened by a step where an end would."""
    if value == 0 or not math.isfinite(value):
        return format_value(value, unit)
    scaled = value * 100 if unit == "pct" else value
    step = _grid_step(scaled)
    low = math.floor(scaled / step) * step
    high = low + step
    if math.isclose(low, scaled):
        low, high = scaled - step, scaled + step
    text = _range_text(max(low, 0.0), high, unit, step)
    for widen in range(1, 4):
        if not spells(exact, text):
            break
        text = _range_text(max(low - widen * step, 0.0), high + widen * step, unit, step)
    return text


def _range_text(low: float, high: float, unit: Unit, step: float) -> str:
    decimals = max(0, -math.floor(math.log10(step))) if step > 0 else 0

    def num(v: float) -> str:
        return f"{v:,.{decimals}f}"

    if unit == "pct":
        return f"{num(low)}–{num(high)}%"
    if unit == "ms" and low >= 10_000:
        return f"{num(low / 1000)}–{num(high / 1000)} s"
    suffix = {"ms": " ms", "s": " s", "months": " months", "x": "x", "tok": " tokens"}.get(unit, "")
    return f"{num(low)}–{num(high)}{suffix}"


@dataclass(frozen=True, slots=True)
class Entry:
    """One use of a figure in the document: what was printed, where, from where."""

    figure: Figure
    shown: str
    section: str


@dataclass
class Ledger:
    """Formats figures for one version of the document and remembers every one it printed."""

    public: bool = False
    section: str = ""
    entries: list[Entry] = field(default_factory=list)

    def show(self, figure: Figure | None, missing: str = "—") -> str:
        if figure is None:
            return missing
        shown = figure.public_text() if self.public else figure.text()
        self.entries.append(Entry(figure, shown, self.section))
        return shown

    def name(self, real: str, placeholder: str) -> str:
        """A tenant's or customer's name: itself inside, a placeholder in public."""
        return placeholder if self.public else real
