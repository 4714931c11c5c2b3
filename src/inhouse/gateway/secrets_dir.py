"""Tenants and their key hashes from a mounted secrets directory (`INHOUSE_SECRETS_DIR`).

On Kubernetes the gateway's stack file comes from a ConfigMap, which must hold no key material,
and its tenants' keys from the Secret `gateway-tenant-keys`, mounted at `/etc/inhouse/secrets`.
The directory may hold either file, or both (docs/gateway.md, "Keys from a Secret"):

* `tenants.yaml`: `tenants:` in the stack's own format (`name`, `keys` as hash lines, and
  optionally `tier`, `models`, `limits`). A tenant the stack already names gets these keys added
  to its own; its tier, models and limits stay the stack's (the ConfigMap is reviewed like
  code), and a Secret that tries to change them is refused. A tenant only the Secret names is
  created from its entry.
* `keys`: `TENANT HASH` lines, the format of `gateway.keys_file`.

Only hashes are ever stored (`inhouse gateway keys create` prints a key and its hash line). A
directory that is set but yields no key is an error: a gateway that silently made up a demo
key would lock every client out at each restart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from inhouse.errors import SpecError
from inhouse.spec.errors_format import describe_validation_error
from inhouse.spec.gateway import GatewaySpec, TenantSpec
from inhouse.spec.load import read_keys_file, read_spec_text
from inhouse.spec.yaml_load import load_yaml

ENV = "INHOUSE_SECRETS_DIR"
TENANTS_FILE = "tenants.yaml"
KEYS_FILE = "keys"


def _read_tenants(path: Path) -> list[TenantSpec]:
    data: Any = load_yaml(read_spec_text(path, "tenants file"), str(path))
    if not isinstance(data, dict) or not isinstance(data.get("tenants"), list):
        raise SpecError(
            f"{path}: expected a mapping with `tenants:` (a list of name, keys, and optionally "
            "tier, models, limits; see docs/gateway.md)"
        )
    out = []
    for index, entry in enumerate(data["tenants"]):
        try:
            out.append(TenantSpec.model_validate(entry))
        except ValidationError as exc:
            raise SpecError(
                describe_validation_error(exc, f"{path}: tenants[{index}]", "docs/gateway.md")
            ) from None
    return out


def _merge(spec: GatewaySpec, found: list[TenantSpec], source: Path) -> GatewaySpec:
    by_name = {t.name: t for t in spec.tenants}
    default = TenantSpec(name="x")
    for tenant in found:
        known = by_name.get(tenant.name)
        if known is None:
            by_name[tenant.name] = tenant
            continue
        for field in ("tier", "models", "limits"):
            if getattr(tenant, field) != getattr(default, field):
                raise SpecError(
                    f"{source}: tenant {tenant.name!r} sets {field}, which the stack's gateway "
                    "section already defines for it; keep only `name` and `keys` in the Secret"
                )
        by_name[tenant.name] = known.model_copy(update={"keys": (*known.keys, *tenant.keys)})
    return spec.model_copy(update={"tenants": tuple(by_name.values())})


def load_secrets_dir(spec: GatewaySpec, directory: str | None) -> GatewaySpec:
    """The gateway spec with the tenants and keys of `directory` merged in (unchanged when
    `directory` is None or empty)."""
    if not directory:
        return spec
    root = Path(directory)
    if not root.is_dir():
        raise SpecError(
            f"{ENV}={directory}: not a directory; mount the Secret gateway-tenant-keys there "
            "(docs/gateway.md, 'Keys from a Secret'), or unset it"
        )
    tenants = root / TENANTS_FILE
    if tenants.is_file():
        spec = _merge(spec, _read_tenants(tenants), tenants)
    keys = root / KEYS_FILE
    if keys.is_file():
        found = [TenantSpec(name=t, keys=(k,)) for t, k in read_keys_file(keys)]
        spec = _merge(spec, found, keys)
    if not any(t.keys for t in spec.tenants) and not spec.keys_file:
        raise SpecError(
            f"{ENV}={directory}: no key found (expected {TENANTS_FILE} or {KEYS_FILE}); create "
            "it with `kubectl create secret generic gateway-tenant-keys "
            f"--from-file={TENANTS_FILE}` (docs/gateway.md, 'Keys from a Secret')"
        )
    return spec
