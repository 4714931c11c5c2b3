"""One registry of routing policies, keyed by the name a stack file uses."""

from __future__ import annotations

import inspect
from collections.abc import Mapping

from inhouse.errors import SpecError
from inhouse.routing.framework import Policy, PolicyContext
from inhouse.routing.policies.cache_aware import CacheAware
from inhouse.routing.policies.least_loaded import LeastLoaded
from inhouse.routing.policies.oracle import Oracle
from inhouse.routing.policies.round_robin import RoundRobin
from inhouse.routing.policies.session import SessionAffinity

POLICIES: dict[str, type[Policy]] = {
    "round_robin": RoundRobin,
    "least_loaded": LeastLoaded,
    "session": SessionAffinity,
    "cache_aware": CacheAware,
    "oracle": Oracle,
}


def policy_names() -> list[str]:
    return list(POLICIES)


def policy_params(name: str) -> dict[str, object]:
    """A policy's parameters and their defaults."""
    signature = inspect.signature(_policy_class(name).__init__)
    return {
        param.name: param.default
        for param in list(signature.parameters.values())[2:]
        if param.default is not inspect.Parameter.empty
    }


def make_policy(
    name: str, context: PolicyContext, params: Mapping[str, object] | None = None
) -> Policy:
    """Build a policy by name with its parameters checked against its signature."""
    cls = _policy_class(name)
    defaults = policy_params(name)
    kwargs: dict[str, object] = {}
    for key, value in (params or {}).items():
        if key not in defaults:
            allowed = ", ".join(defaults) or "none"
            raise SpecError(
                f"routing.params.{key}: unknown parameter of policy {name!r}; it takes: {allowed}"
            )
        kwargs[key] = _coerce(name, key, value, defaults[key])
    return cls(context, **kwargs)


def _policy_class(name: str) -> type[Policy]:
    try:
        return POLICIES[name]
    except KeyError:
        raise SpecError(
            f"routing policy {name!r} is unknown; use one of: {', '.join(POLICIES)}"
        ) from None


def _coerce(policy: str, key: str, value: object, default: object) -> object:
    kind = type(default)
    try:
        if kind is bool or isinstance(value, bool):
            raise TypeError
        if kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise TypeError
            return int(value)  # type: ignore[call-overload]
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise SpecError(
            f"routing.params.{key}: policy {policy!r} needs a {kind.__name__}, got {value!r}"
        ) from None
