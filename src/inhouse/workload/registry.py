"""Workloads by name, with parameters given as `key=value` strings (the CLI's form)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from inhouse.errors import SpecError
from inhouse.workload.agent import AgentWorkload
from inhouse.workload.arrivals import ARRIVAL_KINDS, Arrivals, Lengths
from inhouse.workload.base import Workload
from inhouse.workload.synthetic import (
    FixedWorkload,
    LongContextWorkload,
    SharedPrefixWorkload,
    UtilityWorkload,
)
from inhouse.workload.volume import MAX_LENGTH_TOKENS, MAX_PREFIX_GROUPS, PREFIX_GROUP_KEYS

WORKLOADS: dict[str, type[Any]] = {
    "agent": AgentWorkload,
    "utility": UtilityWorkload,
    "longctx": LongContextWorkload,
    "shared-prefix": SharedPrefixWorkload,
    "fixed": FixedWorkload,
}
# Keys that set fields of a workload's `arrivals`.
ARRIVAL_KEYS = {"arrivals": "kind", "rate_per_s": "rate_per_s", "burstiness": "burstiness"}


def workload_names() -> list[str]:
    return list(WORKLOADS)


def workload_params(name: str) -> dict[str, object]:
    """A workload's parameters and their defaults, as the CLI accepts them."""
    defaults = _class(name)()
    out: dict[str, object] = {}
    for f in dataclasses.fields(defaults):
        value = getattr(defaults, f.name)
        if isinstance(value, Arrivals):
            out["arrivals"] = value.kind
            out["rate_per_s"] = value.rate_per_s
            out["burstiness"] = value.burstiness
        else:
            out[f.name] = str(value) if isinstance(value, Lengths) else value
    return out


def make_workload(name: str, params: Mapping[str, object] | None = None) -> Workload:
    cls = _class(name)
    defaults = cls()
    fields = {f.name: getattr(defaults, f.name) for f in dataclasses.fields(defaults)}
    kwargs: dict[str, object] = {}
    arrivals: dict[str, object] = {}
    for key, value in (params or {}).items():
        if key in ARRIVAL_KEYS and "arrivals" in fields:
            arrivals[ARRIVAL_KEYS[key]] = value
        elif key in fields:
            kwargs[key] = _coerce(name, key, value, fields[key])
        else:
            allowed = ", ".join(workload_params(name))
            raise SpecError(f"workload {name!r} has no parameter {key!r}; it takes: {allowed}")
    if arrivals:
        kwargs["arrivals"] = _arrivals(name, fields["arrivals"], arrivals)
    try:
        workload: Workload = cls(**kwargs)
    except AssertionError as exc:
        raise SpecError(f"workload {name!r}: {exc}") from None
    return workload


def _class(name: str) -> type[Any]:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise SpecError(
            f"workload {name!r} is unknown; use one of: {', '.join(WORKLOADS)}, or trace:PATH"
        ) from None


def _arrivals(name: str, base: Arrivals, values: dict[str, object]) -> Arrivals:
    kind = str(values.get("kind", base.kind))
    if kind not in ARRIVAL_KINDS or kind == "closed":
        raise SpecError(f"workload {name!r}: arrivals={kind!r}; use poisson, gamma or constant")
    try:
        return Arrivals(
            kind,  # type: ignore[arg-type]
            rate_per_s=float(values.get("rate_per_s", base.rate_per_s)),  # type: ignore[arg-type]
            burstiness=float(values.get("burstiness", base.burstiness)),  # type: ignore[arg-type]
        )
    except (AssertionError, ValueError) as exc:
        raise SpecError(f"workload {name!r}: bad arrivals: {exc}") from None


def _coerce(name: str, key: str, value: object, default: object) -> object:
    try:
        if isinstance(default, Lengths):
            lengths = value if isinstance(value, Lengths) else Lengths.parse(str(value))
            if lengths.p95 > MAX_LENGTH_TOKENS:
                raise ValueError(f"lengths past {MAX_LENGTH_TOKENS:,} tokens (1 << 24)")
            return lengths
        if isinstance(default, bool):
            raise ValueError("booleans are not parameters here")
        if isinstance(default, int):
            number = int(str(value))
            if key in PREFIX_GROUP_KEYS and number > MAX_PREFIX_GROUPS:
                raise ValueError(f"more than {MAX_PREFIX_GROUPS:,}, built one by one")
            return number
        if isinstance(default, float):
            real = float(str(value))
            # NOTE: every float parameter is a time, a rate or a count: a NaN think time made
            # each session's next turn due at NaN seconds, and the load sent far fewer requests
            if not 0 <= real < math.inf:
                raise ValueError("it must be a finite number, 0 or more")
            return real
        if default is None or isinstance(default, str):
            return None if value in (None, "", "none") else str(value)
    except (ValueError, TypeError, AssertionError) as exc:
        hint = " (lengths are P50:P95 in tokens)" if isinstance(default, Lengths) else ""
        raise SpecError(f"workload {name!r}: {key}={value!r} is not valid{hint}: {exc}") from None
    raise SpecError(f"workload {name!r}: {key} cannot be set here")
