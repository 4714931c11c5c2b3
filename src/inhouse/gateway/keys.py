"""API keys: created once, stored only as salted SHA-256 hashes, checked in one dict lookup.

A key reads `ihk-<id>-<secret>`: 8 hex digits of public id and 32 URL-safe characters (192
bits) of secret. The stored line is `ihk1$<id>$<salt hex>$<sha256(salt + key) hex>`. Random
192-bit secrets cannot be guessed, so a fast hash is enough (no password stretching); the salt
keeps equal keys from hashing alike across stacks.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable

from inhouse.spec.gateway import KEY_HASH_SCHEME, parse_key_hash


def create_key() -> tuple[str, str]:
    """A new key and its hash line: (key, `ihk1$id$salt$hash`)."""
    key_id = secrets.token_hex(4)
    key = f"ihk-{key_id}-{secrets.token_urlsafe(24)}"
    return key, hash_key(key)


def hash_key(key: str, salt: bytes | None = None) -> str:
    key_id = key_id_of(key)
    assert key_id is not None, "hash_key needs a key made by create_key"
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.sha256(salt + key.encode()).hexdigest()
    return f"{KEY_HASH_SCHEME}${key_id}${salt.hex()}${digest}"


def key_id_of(key: str) -> str | None:
    parts = key.split("-", 2)
    if len(parts) != 3 or parts[0] != "ihk" or len(parts[1]) != 8:
        return None
    return parts[1]


class KeyRing:
    """Key id → (tenant, salt, digest). `tenant_of(key)` is None for an unknown or wrong key.

    A key given in the clear at start-up (the demo key of `inhouse up`, any string) is kept
    only as an HMAC under a salt drawn for this process."""

    def __init__(self, entries: Iterable[tuple[str, str]] = ()) -> None:
        self._by_id: dict[str, tuple[str, bytes, bytes]] = {}
        self._salt = secrets.token_bytes(16)
        self._plain: dict[bytes, str] = {}
        for tenant, entry in entries:
            self.add(tenant, entry)

    def add_plain(self, tenant: str, key: str) -> None:
        self._plain[hmac.digest(self._salt, key.encode(), "sha256")] = tenant

    def add(self, tenant: str, entry: str) -> None:
        key_id, salt, digest = parse_key_hash(entry)
        self._by_id[key_id] = (tenant, salt, digest)

    def __len__(self) -> int:
        return len(self._by_id) + len(self._plain)

    def tenant_of(self, key: str) -> str | None:
        if self._plain:
            tenant = self._plain.get(hmac.digest(self._salt, key.encode(), "sha256"))
            if tenant is not None:
                return tenant
        key_id = key_id_of(key)
        if key_id is None:
            return None
        found = self._by_id.get(key_id)
        if found is None:
            return None
        tenant, salt, digest = found
        if hmac.compare_digest(hashlib.sha256(salt + key.encode()).digest(), digest):
            return tenant
        return None
