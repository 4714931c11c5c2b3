"""The licence catalog (`spec/data/licenses.yaml`): what each model licence allows, restricts and
requires, with the sources the summary was read from. Keyed by the `license` names of the model
catalog; `get_licence(model.license)`."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from inhouse.errors import SpecError

TenantClass = Literal["production", "research"]


class LicenceSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    family: str
    spdx: str | None = None
    commercial_use: bool
    redistribution: str
    use_restrictions: tuple[str, ...] = ()
    attribution: str
    tenant_classes: tuple[TenantClass, ...] = Field(min_length=1)
    sources: tuple[str, ...] = Field(min_length=1)


@cache
def licence_catalog() -> dict[str, LicenceSpec]:
    text = resources.files("inhouse.spec").joinpath("data", "licenses.yaml").read_text("utf-8")
    entries = [LicenceSpec.model_validate(e) for e in yaml.safe_load(text)]
    return {e.name: e for e in entries}


def get_licence(name: str) -> LicenceSpec:
    catalog = licence_catalog()
    if name not in catalog:
        raise SpecError(
            f"licence {name!r} is not in spec/data/licenses.yaml; known: {', '.join(catalog)}. "
            "Add an entry with its terms and the source they were read from"
        )
    return catalog[name]
