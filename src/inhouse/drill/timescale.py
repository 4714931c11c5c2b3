"""`--time-scale`: the rules' `for:` durations and range windows, scaled by one factor.

A drill has minutes, the rules are written for hours (a 5-minute hold, a 1-hour burn window). The
only change a drill may make to the rules `inhouse render` writes is to multiply every `for:`
(and `keep_firing_for:`) and every range selector (`[5m]`, and both parts of a subquery
`[30m:1m]`) by one factor.
Thresholds, expressions and labels stay as rendered; the factor is printed and recorded in
each drill's evidence. `scale_rules(text, 1.0)` returns the rules unchanged.
"""

from __future__ import annotations

import math
import re
from typing import Any

import yaml

from inhouse.errors import SpecError
from inhouse.render.yamltext import dump_yaml

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_UNITS_MS["y"] = 365 * _UNITS_MS["d"]
_DURATION = re.compile(r"(\d+)(ms|[smhdwy])")
_RANGE = re.compile(r"\[\s*((?:\d+(?:ms|[smhdwy]))+)\s*(?::\s*((?:\d+(?:ms|[smhdwy]))+)?\s*)?\]")
# A rule's holds: `for:` before it fires, `keep_firing_for:` before it resolves (Prometheus
# 2.42+); a hold left at hours would keep a drill's alert firing long after its fault ended.
HOLDS = ("for", "keep_firing_for")
# PromQL string literals: double- or single-quoted with backslash escapes, or backquoted raw.
_STRING = re.compile(r"""("(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)""")
# Scaled windows never go below this: rate() needs two samples, and drills scrape each second.
MIN_RANGE_MS = 5_000


def parse_duration_ms(text: str) -> int:
    """Prometheus duration (`1h30m`, `30s`, `500ms`) in milliseconds."""
    pos, total = 0, 0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += int(match.group(1)) * _UNITS_MS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise SpecError(f"{text!r} is not a Prometheus duration (e.g. 30s, 5m, 1h30m)")
    return total


def format_duration_ms(ms: int) -> str:
    """The shortest Prometheus spelling of a whole number of milliseconds."""
    if ms <= 0:
        return "0s"
    parts = []
    for unit in ("d", "h", "m", "s"):
        size = _UNITS_MS[unit]
        if ms >= size:
            parts.append(f"{ms // size}{unit}")
            ms %= size
    if ms:
        parts.append(f"{ms}ms")
    return "".join(parts)


def scale_duration(text: str, factor: float, floor_ms: int = 0) -> str:
    ms = parse_duration_ms(text)
    if ms == 0:
        return text
    return format_duration_ms(max(floor_ms, math.ceil(ms * factor)))


def scale_expr(expr: str, factor: float) -> str:
    """Every range selector and subquery window of a PromQL expression, scaled; string
    literals (label values, `label_replace` arguments) untouched, whatever they look like."""

    def repl(match: re.Match[str]) -> str:
        window = scale_duration(match.group(1), factor, MIN_RANGE_MS)
        if match.group(0).find(":") < 0:
            return f"[{window}]"
        step = match.group(2)
        return f"[{window}:{scale_duration(step, factor, 1000) if step else ''}]"

    parts = _STRING.split(expr)  # odd indexes: the string literals, kept as they are
    return "".join(p if i % 2 else _RANGE.sub(repl, p) for i, p in enumerate(parts))


def check_factor(factor: float) -> float:
    if not (0 < factor <= 1):
        raise SpecError(
            f"--time-scale {factor:g}: use a factor in (0, 1]; it shortens the rules' `for:` "
            "holds and range windows (1 = as rendered), never their thresholds"
        )
    return factor


def scale_rules(text: str, factor: float) -> str:
    """Rules YAML (`groups:`), with every `for:` and range window multiplied by `factor`."""
    check_factor(factor)
    if factor == 1.0:
        return text
    data: dict[str, Any] = yaml.safe_load(text)
    for group in data.get("groups", []):
        for rule in group.get("rules", []):
            rule["expr"] = scale_expr(str(rule["expr"]), factor)
            for hold in HOLDS:
                if hold in rule:
                    rule[hold] = scale_duration(str(rule[hold]), factor, 1000)
    header = (
        f"# `inhouse drill --time-scale {factor:g}`: the rendered rules with every `for:` and\n"
        f"# range window multiplied by {factor:g} (floors: 1 s holds, 5 s windows); thresholds\n"
        "# unchanged.\n"
    )
    return header + dump_yaml(data)
