"""`KeyRing`: stored hashes checked once, then recognised by a MAC; plain keys never kept."""

from __future__ import annotations

import hashlib

import pytest

from inhouse.gateway.keys import KeyRing, create_key


def test_a_verified_key_is_remembered_by_its_mac_and_a_wrong_one_never(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key, entry = create_key()
    ring = KeyRing([("acme", entry)])
    full_checks = []
    sha256 = hashlib.sha256

    def counted(data: bytes = b"") -> object:
        full_checks.append(1)
        return sha256(data)

    monkeypatch.setattr(hashlib, "sha256", counted)
    assert ring.tenant_of(key) == "acme"
    assert ring.tenant_of(key) == "acme"
    assert len(full_checks) == 1  # the second time, by its MAC
    wrong = key[:-1] + ("x" if key[-1] != "x" else "y")
    assert ring.tenant_of(wrong) is None
    assert ring.tenant_of(wrong) is None
    assert len(full_checks) == 3  # a wrong key is checked in full every time
    assert key not in repr(vars(ring))  # nothing in the clear


def test_re_adding_a_key_id_forgets_what_was_verified_for_it() -> None:
    key, entry = create_key()
    ring = KeyRing([("acme", entry)])
    ring.add_plain("demo", "demo-key")
    assert ring.tenant_of(key) == "acme"
    _, other = create_key()
    key_id = entry.split("$")[1]
    ring.add("globex", other.replace(other.split("$")[1], key_id, 1))  # same id, other hash
    assert ring.tenant_of(key) is None
    assert ring.tenant_of("demo-key") == "demo"
    assert len(ring) == 2
