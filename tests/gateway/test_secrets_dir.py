"""Tenants and key hashes from a mounted secrets directory (`INHOUSE_SECRETS_DIR`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from inhouse.errors import SpecError
from inhouse.gateway.keys import create_key
from inhouse.gateway.secrets_dir import load_secrets_dir
from inhouse.gateway.tenants import Tenants
from inhouse.spec.gateway import parse_gateway

STACK_GATEWAY = {"tenants": [{"name": "crm", "tier": "interactive", "models": ["chat"]}]}


def write(directory: Path, name: str, data: object) -> None:
    text = data if isinstance(data, str) else yaml.safe_dump(data)
    (directory / name).write_text(text)


def test_keys_of_a_stack_tenant_are_added_and_its_tier_kept(tmp_path: Path) -> None:
    key, entry = create_key()
    write(tmp_path, "tenants.yaml", {"tenants": [{"name": "crm", "keys": [entry]}]})
    spec = load_secrets_dir(parse_gateway(STACK_GATEWAY), str(tmp_path))
    (crm,) = spec.tenants
    assert (crm.tier, crm.models, crm.keys) == ("interactive", ("chat",), (entry,))
    assert Tenants(spec).authenticate(f"Bearer {key}").name == "crm"


def test_a_tenant_only_the_secret_names_is_created(tmp_path: Path) -> None:
    key, entry = create_key()
    other_key, other = create_key()
    write(
        tmp_path, "tenants.yaml", {"tenants": [{"name": "batch", "tier": "batch", "keys": [entry]}]}
    )
    write(tmp_path, "keys", f"# comment\nops {other}\n")
    tenants = Tenants(load_secrets_dir(parse_gateway(STACK_GATEWAY), str(tmp_path)))
    assert tenants.authenticate(f"Bearer {key}").tier == "batch"
    assert tenants.authenticate(f"Bearer {other_key}").name == "ops"


def test_the_secret_may_not_rewrite_a_stack_tenants_limits(tmp_path: Path) -> None:
    _, entry = create_key()
    write(
        tmp_path, "tenants.yaml", {"tenants": [{"name": "crm", "tier": "batch", "keys": [entry]}]}
    )
    with pytest.raises(SpecError, match="tenant 'crm' sets tier"):
        load_secrets_dir(parse_gateway(STACK_GATEWAY), str(tmp_path))


@pytest.mark.parametrize(
    ("files", "match"),
    [
        ({}, "no key found .expected tenants.yaml or keys.*kubectl create secret"),
        ({"tenants.yaml": "tenants: [oops"}, "tenants.yaml: not valid YAML"),
        ({"tenants.yaml": {"crm": {}}}, "expected a mapping with `tenants:`"),
        (
            {"tenants.yaml": {"tenants": [{"name": "x", "key": "y"}]}},
            r"(?s)tenants\[0\].*key: unknown field.*docs/gateway.md",
        ),
        ({"keys": "crm not-a-hash\n"}, r"keys:1: "),
    ],
)
def test_a_bad_secret_names_the_file_and_the_fix(
    tmp_path: Path, files: dict[str, object], match: str
) -> None:
    for name, data in files.items():
        write(tmp_path, name, data)
    with pytest.raises(SpecError, match=match):
        load_secrets_dir(parse_gateway(STACK_GATEWAY), str(tmp_path))


def test_unset_leaves_the_spec_alone_and_a_missing_dir_is_an_error(tmp_path: Path) -> None:
    spec = parse_gateway(STACK_GATEWAY)
    assert load_secrets_dir(spec, None) is spec
    assert load_secrets_dir(spec, "") is spec
    with pytest.raises(SpecError, match="not a directory; mount the Secret gateway-tenant-keys"):
        load_secrets_dir(spec, str(tmp_path / "absent"))


def test_a_secret_tenant_named_twice_in_one_entry_is_refused(tmp_path: Path) -> None:
    # yaml.safe_load kept the second name: the key went to a new tenant `admin` with nothing
    # said, not to `crm`.
    entry = create_key()[1]
    (tmp_path / "tenants.yaml").write_text(
        f"tenants:\n  - name: crm\n    name: admin\n    keys: ['{entry}']\n", encoding="utf-8"
    )
    with pytest.raises(SpecError, match=r"tenants\.yaml: .*duplicate key 'name'"):
        load_secrets_dir(parse_gateway(STACK_GATEWAY), str(tmp_path))
