"""The gateway's `--endpoints` file: where each pool's engines are.

    {"pools": {"chat": ["http://chat-0.ns.svc:8000", "http://chat-1.ns.svc:8000"],
               "long": ["http://long-engine.ns.svc.cluster.local:8000"]},
     "discovery": {"long": {"dns": "long-engine.ns.svc.cluster.local.", "port": 8000,
                            "max_replicas": 6}}}

`pools` lists one URL per replica (`inhouse up` writes only this). A pool named under
`discovery` (`inhouse render` writes it for a pool KEDA scales) is a headless Service: the
gateway resolves `dns` every `gateway.discovery.interval_s` and routes to each address it
returns, on `port`, in at most `max_replicas` slots (the ScaledObject's `maxReplicaCount`);
its `pools` entry is then only a fallback for gateways that predate discovery.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field, ValidationError

from inhouse.errors import SpecError
from inhouse.spec.base import MAX_REPLICAS, SpecModel
from inhouse.spec.errors_format import describe_validation_error

DOCS = 'docs/gateway.md ("Scaled pools: replicas from DNS")'


class DiscoveryTarget(SpecModel):
    """A scaled pool's headless Service: its DNS name, the engines' port, the most replicas."""

    dns: str = Field(min_length=1, description="the headless Service's name")
    port: int = Field(ge=1, le=65535)
    max_replicas: int | None = Field(
        default=None,
        ge=1,
        le=MAX_REPLICAS,
        description="replica slots (None: gateway.discovery's default)",
    )


class Endpoints(SpecModel):
    pools: dict[str, list[str]]
    discovery: dict[str, DiscoveryTarget] = Field(default_factory=dict)


def parse_endpoints(data: Any, source: str) -> Endpoints:
    """An endpoints file's parsed JSON as a typed value; errors name the field and the fix."""
    if not isinstance(data, dict):
        raise SpecError(
            f'{source}: an endpoints file is a JSON object {{"pools": {{POOL: [URL, ...]}}}} '
            f"(`inhouse up` and `inhouse render` write it; see {DOCS})"
        )
    try:
        endpoints = Endpoints.model_validate(data)
    except ValidationError as exc:
        problems = describe_validation_error(exc, source, DOCS)
        raise SpecError(
            f"{problems}\n  fix: write the file again with `inhouse render` (scaled pools' "
            f"`discovery`) or `inhouse up` (`pools`), or correct it by {DOCS}"
        ) from None
    for pool, target in endpoints.discovery.items():
        if ":" in target.dns or "/" in target.dns:
            raise SpecError(
                f"{source}: discovery.{pool}.dns: {target.dns!r} is a URL or has a port; give "
                f"the bare DNS name (the port goes in discovery.{pool}.port)"
            )
    return endpoints


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            # JSON's own parsers keep the last value silently: a pool listed twice would lose
            # its first list of engines with nothing said.
            raise ValueError(f"duplicate key {key!r}; keep one entry per name")
        out[key] = value
    return out


def parse_endpoints_text(text: str, source: str) -> Endpoints:
    """An endpoints file's text (JSON) as a typed value; `source` names it in errors."""
    try:
        data = json.loads(text, object_pairs_hook=_refuse_duplicates)
    except ValueError as exc:
        raise SpecError(f"{source}: not valid JSON: {exc}") from None
    except RecursionError:
        raise SpecError(f"{source}: nested too deeply to read; see {DOCS}") from None
    return parse_endpoints(data, source)
