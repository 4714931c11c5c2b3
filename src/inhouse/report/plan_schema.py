"""What `inhouse report` reads from plan.json, field by field: its type and range.

`inhouse plan` writes plan.json; the report reads some hundred of its fields, by key and index,
into prose, tables, the diagram, the cost sheet and the playbook's bench commands. A hand-edited
or tampered file gave a traceback (`pools[0].tp` a string), a figure printed as "—" (a count
that is not a number) or a negative price. `check_plan` checks every field the report reads once,
when the file is loaded, and returns the first that is wrong as a `Problem`: its JSON path, what
it should be and what it is (the CLI words it, naming the file and `inhouse plan` as the fix).

A field's path uses `[]` for every item of a list and `*` for every key of an object:
`pools[].replicas`, `workloads.*.traffic`. `required`: the key must be there whenever its parent
is (a planner always writes it); `nullable`: null stands for "none" (a capex offer's rent, an
API never paid back). Parents come before their children; a child is checked only where its
parent is an object or list. Then anything else in the file that is NaN or infinite is refused.
`tests/report/test_plan_schema.py` records what building every file reads and checks this list
covers it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from inhouse.errors import SpecError
from inhouse.report.bench_args import parse_simulate
from inhouse.report.inputs import PathPart, path_text

METRICS = ("ttft", "itl", "tpot", "e2e")  # slo.METRIC's keys: a target of another is unknown


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _known(check: Callable[[str], object]) -> Callable[[Any], bool]:
    def known(v: Any) -> bool:
        if not isinstance(v, str):
            return False
        try:
            check(v)
        except (SpecError, ValueError):
            return False
        return True

    return known


def _model(name: str) -> object:
    from inhouse.spec.catalog import get_model

    return get_model(name)


def _quant(name: str) -> object:
    from inhouse.spec.quant import normalize_quant

    return normalize_quant(name)


# kind -> (what it is, in words; the test)
KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "object": ("an object", lambda v: isinstance(v, dict)),
    "list": ("a list", lambda v: isinstance(v, list)),
    "pools": ("a list of at least one pool", lambda v: isinstance(v, list) and len(v) > 0),
    "text": ("a string", lambda v: isinstance(v, str)),
    "name": ("a non-empty string", lambda v: isinstance(v, str) and v.strip() != ""),
    "names": (
        "a list of non-empty strings",
        lambda v: isinstance(v, list) and all(isinstance(x, str) and x.strip() for x in v),
    ),
    "counts": (
        "a list of non-negative integers",
        lambda v: isinstance(v, list) and all(map(_count, v)),
    ),
    "count": ("a non-negative integer", _count),
    "flag": ("true or false", lambda v: isinstance(v, bool)),
    "signed": (
        "a finite number",
        lambda v: isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v),
    ),
    "positive": ("a positive integer", lambda v: _count(v) and v > 0),
    "number": ("a non-negative number", _number),
    "fraction": ("a number from 0 to 1", lambda v: _number(v) and v <= 1),
    "pricing": ('"capex" or "hourly"', lambda v: v in ("capex", "hourly")),
    "model": ("a catalog model, or a directory with its config.json", _known(_model)),
    "quant": ("a quantization the catalog knows", _known(_quant)),
    "metrics": (
        f"an object keyed by {', '.join(METRICS)}",
        lambda v: isinstance(v, dict) and set(v) <= set(METRICS),
    ),
    "traffic": (
        "an object with peak_sessions (sessions) or peak_per_s (requests)",
        lambda v: isinstance(v, dict) and ("peak_sessions" in v or "peak_per_s" in v),
    ),
    "simulate": ("an `inhouse simulate` command with --workload and -W", _known(parse_simulate)),
}


@dataclass(frozen=True, slots=True)
class Field:
    path: str
    kind: str
    required: bool = True
    nullable: bool = False


def _f(path: str, kind: str, *, optional: bool = False, nullable: bool = False) -> Field:
    """A field; every item of a list or object (`[]`, `*` last) is there or not, never missing."""
    assert kind in KINDS, kind
    return Field(path, kind, not optional and not path.endswith(("[]", "*")), nullable)


_W = "workloads.*"
_P = "pools[]"
_H = "requirements.hardware[]"
_C = "cost.workloads.*"
_D = "degraded[]"
PLAN_FIELDS: tuple[Field, ...] = (
    _f("name", "name"),
    _f("description", "text", optional=True, nullable=True),
    _f("engine", "object", optional=True),
    _f("engine.backend", "name", optional=True),
    _f("engine.routing_policy", "name", optional=True),
    _f("workloads", "object"),
    _f(_W, "object"),
    _f(f"{_W}.kind", "name"),
    _f(f"{_W}.traffic", "traffic"),
    _f(f"{_W}.traffic.peak_sessions", "count", optional=True),
    _f(f"{_W}.traffic.avg_sessions", "number", optional=True),
    _f(f"{_W}.traffic.peak_per_s", "number", optional=True),
    _f(f"{_W}.traffic.avg_per_s", "number", optional=True),
    *(_f(f"{_W}.{t}", "object") for t in ("prompt_tokens", "output_tokens")),
    *(
        _f(f"{_W}.{t}.{s}", "number")
        for t in ("prompt_tokens", "output_tokens")
        for s in ("mean", "p95")
    ),
    _f(f"{_W}.planned_prefix_hit_rate", "fraction"),
    _f("pools", "pools"),
    _f(_P, "object"),
    *(_f(f"{_P}.{k}", "name") for k in ("name", "kv_cache_dtype", "gpu")),
    _f(f"{_P}.serves", "names"),
    _f(f"{_P}.lora_adapters", "names", optional=True),
    _f(f"{_P}.model", "name"),
    _f(f"{_P}.hf_id", "model"),
    _f(f"{_P}.quant", "quant"),
    *(_f(f"{_P}.{k}", "positive") for k in ("tp", "replicas", "num_gpus", "max_num_seqs")),
    _f(f"{_P}.max_num_batched_tokens", "positive"),
    _f(f"{_P}.placement", "list"),
    _f(f"{_P}.placement[]", "object"),
    _f(f"{_P}.placement[].node", "count"),
    _f(f"{_P}.placement[].gpu_ids", "counts"),
    _f(f"{_P}.kv_budget_tokens", "count"),
    _f(f"{_P}.memory_gib_per_gpu", "object"),
    _f(f"{_P}.memory_gib_per_gpu.weights", "number"),
    _f(f"{_P}.at_peak", "object"),
    *(
        _f(f"{_P}.at_peak.{k}", "number")
        for k in ("rate_per_replica_per_s", "batch", "utilization")
    ),
    _f("hardware", "list"),
    _f("hardware[]", "object"),
    _f("hardware[].gpu", "name"),
    *(_f(f"hardware[].{k}", "positive") for k in ("gpus_used", "nodes", "gpus_per_node")),
    _f("hardware[].pricing", "pricing"),
    _f("hardware[].node_usd_per_hour", "number"),
    _f("requirements", "object"),
    _f("requirements.hardware", "list"),
    _f(_H, "object"),
    _f(f"{_H}.gpu", "name"),
    _f(f"{_H}.pricing", "pricing"),
    _f(f"{_H}.capex_usd_per_node", "number", nullable=True),
    _f(f"{_H}.usd_per_gpu_hour", "number", nullable=True),
    *(
        _f(f"{_H}.{k}", "number")
        for k in ("amortization_years", "effective_power_kw_per_node", "pue", "usd_per_kwh")
    ),
    _f(f"{_H}.avg_power_fraction", "fraction"),
    _f(f"{_H}.ops_usd_per_node_year", "number"),
    _f("requirements.usage", "object"),
    *(
        _f(f"requirements.usage.active_{k}", "number")
        for k in ("hours_per_day", "days_per_month", "hours_per_month")
    ),
    _f("requirements.api_prices", "list", optional=True),
    _f("requirements.api_prices[]", "object"),
    _f("requirements.api_prices[].name", "name"),
    _f("requirements.api_prices[].input_usd_per_million", "number"),
    _f("requirements.api_prices[].output_usd_per_million", "number"),
    _f(
        "requirements.api_prices[].cached_input_usd_per_million",
        "number",
        optional=True,
        nullable=True,
    ),
    _f("slo_check", "object"),
    _f("slo_check.targets", "object"),
    _f("slo_check.1x", "object", optional=True),
    _f("slo_check.1x.simulated_s", "number", optional=True),
    _f("slo_check.1x.workloads", "object", optional=True),
    _f("slo_check.1x.workloads.*", "object"),
    _f("slo_check.1x.workloads.*.metrics", "object", optional=True),
    _f("slo_check.1x.workloads.*.metrics.*", "object"),
    _f("slo_check.1x.workloads.*.metrics.*.p95_ms", "number", optional=True, nullable=True),
    _f("slo_check.targets.*", "metrics"),
    _f("slo_check.targets.*.*", "object"),
    _f("slo_check.targets.*.*.target_ms", "number"),
    _f("slo_check.targets.*.*.alarm_ms", "number"),
    _f("commitments", "object", optional=True),
    _f("commitments.*", "object"),
    _f("commitments.*.ttft_cold", "object", optional=True),
    _f("commitments.*.ttft_cold.target_ms", "number", nullable=True),
    _f("commitments.*.ttft_cold.alarm_ms", "number", nullable=True),
    _f("degraded", "list"),
    _f(_D, "object"),
    _f(f"{_D}.pool", "name"),
    _f(f"{_D}.failover", "text"),
    _f(f"{_D}.degraded_slo", "object", optional=True),
    _f(f"{_D}.degraded_slo.*", "object", nullable=True),
    *(
        _f(f"{_D}.degraded_slo.*.{metric}{rest}", kind, optional=rest == "")
        for metric in METRICS
        for rest, kind in (("", "object"), (".target_ms", "number"), (".alarm_ms", "number"))
    ),
    _f(f"{_D}.workloads", "object", optional=True),
    _f(f"{_D}.workloads.*", "object"),
    _f(f"{_D}.workloads.*.p95_ms", "object", optional=True),
    *(
        _f(f"{_D}.workloads.*.p95_ms.p95_{key}_ms", "number", optional=True, nullable=True)
        for key in ("ttft", "itl", "tpot", "e2el")
    ),
    _f("cost", "object"),
    _f("cost.usd_per_hour", "number"),
    _f("cost.usd_per_month", "number"),
    _f(
        "cost.effective_usd_per_million_tokens_with_idle_hours",
        "number",
        optional=True,
        nullable=True,
    ),
    _f("cost.api_usd_per_month", "object"),
    _f("cost.api_usd_per_month.*", "number"),
    _f("cost.breakeven_months", "object", optional=True),
    _f("cost.breakeven_months.*", "number", nullable=True),
    _f("cost.workloads", "object"),
    _f(_C, "object"),
    _f(f"{_C}.usd_per_hour", "number"),
    _f(f"{_C}.at_average_load", "object"),
    *(
        _f(f"{_C}.at_average_load.{k}", "number")
        for k in (
            "input_tokens_per_s",
            "cached_input_tokens_per_s",
            "output_tokens_per_s",
            "requests_per_s",
        )
    ),
    _f("cost.hours_per_month", "number", optional=True),
    _f(f"{_C}.usd_per_million_tokens_with_idle_hours", "number", optional=True, nullable=True),
    _f(f"{_C}.per_month", "object", optional=True),
    *(_f(f"{_C}.per_month.{k}", "number") for k in ("input_tokens", "output_tokens")),
    _f(f"{_C}.api_usd_per_month", "object", optional=True),
    _f(f"{_C}.api_usd_per_month.*", "number"),
    _f(f"{_C}.usd_per_million_tokens", "object"),
    *(
        _f(f"{_C}.usd_per_million_tokens.{k}", "number", nullable=True)
        for k in ("blended", "input", "output")
    ),
    _f("sensitivity", "list", optional=True),
    _f("sensitivity[]", "object"),
    _f("sensitivity[].name", "text", optional=True),
    _f("sensitivity[].breaks_at_size", "number", optional=True, nullable=True),
    _f("search", "object", optional=True),
    *(
        _f(f"search.{key}{rest}", kind, optional=rest == "")
        for key in ("failed_verification", "runners_up", "over_hardware")
        for rest, kind in (
            ("", "list"),
            ("[]", "object"),
            ("[].layout", "text"),
            ("[].pools", "text"),
            ("[].lost_because", "text"),
        )
    ),
    _f("search.rejected_layouts", "list", optional=True),
    _f("search.rejected_layouts[]", "object"),
    _f("search.rejected_layouts[].layout", "text"),
    _f("search.rejected_layouts[].why", "names"),
    _f("reproduce", "object", optional=True),
    _f("reproduce.simulate", "object", optional=True),
    _f("reproduce.simulate.*", "simulate"),
    _f("reproduce.bench", "object", optional=True),
    _f("reproduce.bench.*", "object"),
    _f("reproduce.bench.*.model", "name", optional=True),
    _f("reproduce.bench.*.workload", "name", optional=True),
    _f("reproduce.bench.*.params", "object", optional=True),
)

_PART = re.compile(r"\[\]|[^.\[\]]+")
Pattern = tuple[str, ...]  # "[]", "*" or a key


def pattern(path: str) -> Pattern:
    """`pools[].placement[].node` -> ("pools", "[]", "placement", "[]", "node")."""
    return tuple(_PART.findall(path))


@dataclass(frozen=True, slots=True)
class Problem:
    """A field that is not what the report reads: where, what it should be, what it is."""

    path: str
    expected: str
    got: str

    def __str__(self) -> str:
        return f"{self.path}: expected {self.expected}, got {self.got}"


def _shown(value: Any) -> str:
    text = json.dumps(value)  # NaN and Infinity as JSON's readers spell them
    return text if len(text) <= 60 else text[:57] + "..."


def _matches(data: Any, parts: Pattern, field: Field) -> Iterator[tuple[list[PathPart], Any]]:
    """(concrete path, value) for each place `parts` names; (path, KeyError) where a required
    key is missing under a parent that is there."""
    places: list[tuple[list[PathPart], Any]] = [([], data)]
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        deeper: list[tuple[list[PathPart], Any]] = []
        for where, value in places:
            if part == "[]" and isinstance(value, list):
                deeper += [([*where, i], item) for i, item in enumerate(value)]
            elif part == "*" and isinstance(value, dict):
                deeper += [([*where, key], item) for key, item in value.items()]
            elif isinstance(value, dict) and part not in ("[]", "*"):
                if part in value:
                    deeper.append(([*where, part], value[part]))
                elif last and field.required:
                    deeper.append(([*where, part], KeyError))
        places = deeper
    yield from places


def check_fields(data: Any, fields: tuple[Field, ...] = PLAN_FIELDS) -> Problem | None:
    """The first field of `fields` that `data` has wrong (or lacks), else None."""
    for field in fields:
        what, test = KINDS[field.kind]
        for where, value in _matches(data, pattern(field.path), field):
            if value is KeyError:
                return Problem(path_text(where), what, "nothing (the key is missing)")
            if value is None and field.nullable:
                continue
            if not test(value):
                return Problem(
                    path_text(where), what + (" or null" if field.nullable else ""), _shown(value)
                )
    return None


def non_finite(data: Any, where: tuple[PathPart, ...] = ()) -> Problem | None:
    """The first NaN or infinity anywhere in `data`."""
    if isinstance(data, float) and not math.isfinite(data):
        return Problem(
            path_text(where), "a finite number (JSON has no NaN or Infinity)", _shown(data)
        )
    items = (
        data.items()
        if isinstance(data, dict)
        else enumerate(data)
        if isinstance(data, list)
        else ()
    )
    for key, value in items:
        found = non_finite(value, (*where, key))
        if found is not None:
            return found
    return None


def check_plan(data: Any) -> Problem | None:
    """What the report reads from plan.json, then no NaN or infinity anywhere in it."""
    if not isinstance(data, dict):
        return Problem("(the file)", "an object", _shown(data))
    return check_fields(data) or non_finite(data)


def _summary_fields(at: str) -> tuple[Field, ...]:
    """One planned architecture as `inhouse plan --compare` summarizes it (`plan/compare.py`):
    what the report's alternative section reads of it. `usd_per_hour` is checked apart: an
    infeasible one has none."""
    m = f"{at}.slo_margins.*"
    return (
        _f(at, "object"),
        _f(f"{at}.feasible", "flag", optional=True),
        _f(f"{at}.why_infeasible", "text", optional=True),
        _f(f"{at}.usd_per_hour", "number", optional=True),
        _f(f"{at}.pools", "names", optional=True),
        _f(f"{at}.gpus", "count", optional=True),
        _f(f"{at}.meets_slo_at_1x", "flag", optional=True),
        _f(f"{at}.slo_margins", "object", optional=True),
        _f(m, "object"),
        _f(f"{m}.*", "object"),
        _f(f"{m}.*.margin", "signed", optional=True, nullable=True),
        _f(f"{at}.degraded", "list", optional=True),
        _f(f"{at}.degraded[]", "object"),
        _f(f"{at}.degraded[].pool", "name"),
        _f(f"{at}.degraded[].pass", "flag"),
        _f(f"{at}.blast_radius", "list", optional=True),
        _f(f"{at}.blast_radius[]", "object"),
        _f(f"{at}.blast_radius[].pool", "name"),
        _f(f"{at}.blast_radius[].gpus_per_replica", "positive"),
        _f(f"{at}.blast_radius[].replicas", "positive"),
        _f(f"{at}.blast_radius[].workloads", "names"),
    )


_A = "alternatives[]"
COMPARE_FIELDS: tuple[Field, ...] = (
    _f("name", "text", optional=True),
    *_summary_fields("chosen"),
    _f("alternatives", "list"),
    _f(_A, "object"),
    _f(f"{_A}.label", "name"),
    *_summary_fields(_A)[1:],
    _f(f"{_A}.with_more_nodes", "object", optional=True),
    *_summary_fields(f"{_A}.with_more_nodes")[1:],
)


def check_compare(data: Any) -> Problem | None:
    """What the report reads from compare.json (`inhouse plan --compare`), then no NaN or
    infinity anywhere in it; a feasible architecture must have its `usd_per_hour`."""
    if not isinstance(data, dict):
        return Problem("(the file)", "an object", _shown(data))
    problem = check_fields(data, COMPARE_FIELDS) or non_finite(data)
    if problem is not None:
        return problem
    summaries: list[tuple[tuple[PathPart, ...], Any]] = [(("chosen",), data.get("chosen"))]
    for i, alt in enumerate(data.get("alternatives") or []):
        summaries.append((("alternatives", i), alt))
        more = alt.get("with_more_nodes")
        if alt.get("feasible") is False and isinstance(more, dict) and "why_infeasible" not in more:
            summaries.append((("alternatives", i, "with_more_nodes"), more))
    for where, summary in summaries:
        if summary.get("feasible") is not False and "usd_per_hour" not in summary:
            path = path_text((*where, "usd_per_hour"))
            return Problem(path, KINDS["number"][0], "nothing (the key is missing)")
    return None
