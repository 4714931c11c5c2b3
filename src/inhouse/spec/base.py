"""The base of every spec a person writes (stack, requirements, tenants, endpoints).

Beyond pydantic's defaults it refuses two values that pass for numbers and mean nothing:

* NaN and infinity (YAML's `.nan`, `.inf`): NaN fails `gt=0` with a message that misleads
  ("should be greater than 0"), infinity passes it and then breaks arithmetic far from the
  file (`host_kv_gib: .inf` was an OverflowError in `inhouse render`).
* A boolean where a number goes: pydantic reads `true` as 1, and YAML 1.1 reads `yes`, `on`
  and `no` as booleans, so `replicas: yes` was one replica and a tenant's `rpm: yes` one
  request a minute, with nothing said. Fields that take a boolean keep taking one.
"""

from __future__ import annotations

import types
from functools import cache
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

# Replicas of one pool (and a scaled pool's slots). Each is a simulated engine in `simulate`,
# a port in render's scripts and a slot in the gateway: a stray digit (1e11) was a
# MemoryError after half a minute; a pool of more than this is two pools.
MAX_REPLICAS = 1024


def _leaf_types(annotation: Any) -> set[Any]:
    """The types a field's value may have at its top level (unions and Literals unpacked)."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return set().union(*(_leaf_types(arg) for arg in get_args(annotation)))
    if origin is Literal:
        return {type(value) for value in get_args(annotation)}
    return {origin or annotation}


class SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        field = info.field_name
        if isinstance(value, bool) and field is not None and _wants_number(cls, field):
            raise ValueError(
                f"{str(value).lower()} is a boolean (YAML reads yes/no/on/off/true/false as "
                "one) where a number goes; write the number"
            )
        return value


@cache
def _wants_number(model: type[BaseModel], field: str) -> bool:
    leaves = _leaf_types(model.model_fields[field].annotation)
    return bool(leaves & {int, float}) and bool not in leaves
