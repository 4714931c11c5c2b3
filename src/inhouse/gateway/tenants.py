"""Tenants: who a key belongs to, which models they may use, their tier and limits."""

from __future__ import annotations

from pathlib import Path

from inhouse.errors import SpecError
from inhouse.gateway.keys import KeyRing
from inhouse.openai_errors import ApiError
from inhouse.spec.gateway import GatewaySpec, TenantSpec, TierSpec, parse_key_hash
from inhouse.spec.load import read_keys_file

DEMO_TENANT = "demo"


class Tenants:
    def __init__(self, spec: GatewaySpec, demo_key: str | None = None, base: Path | None = None):
        self.tiers: dict[str, TierSpec] = spec.all_tiers
        self.by_name: dict[str, TenantSpec] = {t.name: t for t in spec.tenants}
        entries = [(t.name, entry) for t in spec.tenants for entry in t.keys]
        if spec.keys_file:
            path = Path(spec.keys_file)
            if not path.is_absolute() and base is not None:
                path = base / path
            for tenant, entry in read_keys_file(path):
                if tenant not in self.by_name:
                    self.by_name[tenant] = TenantSpec(name=tenant)
                entries.append((tenant, entry))
        _check_key_ids(entries)
        self.keys = KeyRing(entries)
        if demo_key:
            if DEMO_TENANT not in self.by_name:
                self.by_name[DEMO_TENANT] = TenantSpec(name=DEMO_TENANT, tier="interactive")
            self.keys.add_plain(DEMO_TENANT, demo_key)

    def authenticate(self, authorization: str | None) -> TenantSpec:
        if not authorization:
            raise ApiError(
                401,
                "You didn't provide an API key. Send it as `Authorization: Bearer KEY`.",
                reason="unauthorized",
                error_type="invalid_request_error",
            )
        scheme, _, key = authorization.partition(" ")
        tenant = self.keys.tenant_of(key.strip()) if scheme.lower() == "bearer" else None
        if tenant is None:
            raise ApiError(
                401,
                "Incorrect API key provided.",
                reason="unauthorized",
                error_type="invalid_request_error",
            )
        return self.by_name[tenant]

    def tier_of(self, tenant: TenantSpec) -> TierSpec:
        return self.tiers[tenant.tier]


def _check_key_ids(entries: list[tuple[str, str]]) -> None:
    """Refuse one key id listed for two tenants (or with two hashes): the key ring keeps the
    last, so a line copied into another tenant's entry (or the keys file) would move the key
    to that tenant, its tier and its limits, with nothing said."""
    first: dict[str, tuple[str, str]] = {}
    for tenant, entry in entries:
        key_id = parse_key_hash(entry)[0]
        seen = first.setdefault(key_id, (tenant, entry))
        if seen != (tenant, entry):
            raise SpecError(
                f"key id {key_id!r} is listed for tenant {seen[0]!r} and again for tenant "
                f"{tenant!r}{' with another hash' if seen[0] == tenant else ''}; a key belongs "
                "to one tenant: remove one of the lines (stack `keys`, keys_file or the Secret)"
            )
