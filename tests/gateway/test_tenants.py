"""Tenants built from the gateway spec and its keys file (`inhouse.gateway.tenants`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from inhouse.errors import SpecError
from inhouse.gateway.keys import create_key
from inhouse.gateway.tenants import Tenants
from inhouse.spec.gateway import parse_gateway


def test_a_key_listed_for_two_tenants_is_refused(tmp_path: Path) -> None:
    # The key ring kept the last line: acme's key authenticated as `admin` (its own tier and
    # limits), with nothing said.
    _, entry = create_key()
    (tmp_path / "keys").write_text(f"admin {entry}\n", encoding="utf-8")
    spec = parse_gateway({"keys_file": "keys", "tenants": [{"name": "acme", "keys": [entry]}]})
    with pytest.raises(SpecError, match="listed for tenant 'acme' and again for tenant 'admin'"):
        Tenants(spec, base=tmp_path)


def test_the_same_line_twice_is_harmless(tmp_path: Path) -> None:
    key, entry = create_key()
    (tmp_path / "keys").write_text(f"acme {entry}\nacme {entry}\n", encoding="utf-8")
    tenants = Tenants(parse_gateway({"keys_file": "keys"}), base=tmp_path)
    assert tenants.authenticate(f"Bearer {key}").name == "acme"
