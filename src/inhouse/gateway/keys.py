"""API keys: created once, stored only as salted SHA-256 hashes, checked in one dict lookup.

A key seen before is recognised by its keyed BLAKE2b MAC under a salt drawn for this process
(one C call, no OpenSSL name lookup: ~0.7 µs against ~2.4 µs for `hmac.digest`); only keys that
passed the full check enter that table, so it holds at most one entry per valid key and never a
key in the clear.

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
    only as its MAC (keyed BLAKE2b) under a salt drawn for this process."""

    def __init__(self, entries: Iterable[tuple[str, str]] = ()) -> None:
        self._by_id: dict[str, tuple[str, bytes, bytes]] = {}
        self._salt = secrets.token_bytes(16)
        self._known: dict[bytes, str] = {}  # MAC of a plain or already verified key -> tenant
        self._plain: set[bytes] = set()  # MACs of the keys given in the clear
        for tenant, entry in entries:
            self.add(tenant, entry)

    def _mac(self, key: str) -> bytes:
        return hashlib.blake2b(key.encode(), key=self._salt, digest_size=32).digest()

    def add_plain(self, tenant: str, key: str) -> None:
        mac = self._mac(key)
        self._plain.add(mac)
        self._known[mac] = tenant

    def add(self, tenant: str, entry: str) -> None:
        key_id, salt, digest = parse_key_hash(entry)
        self._by_id[key_id] = (tenant, salt, digest)
        # A verdict cached for a key with this id may be stale now: keep only the plain keys.
        self._known = {mac: t for mac, t in self._known.items() if mac in self._plain}

    def __len__(self) -> int:
        return len(self._by_id) + len(self._plain)

    def tenant_of(self, key: str) -> str | None:
        mac = self._mac(key)
        tenant = self._known.get(mac)
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
            self._known[mac] = tenant
            return tenant
        return None
