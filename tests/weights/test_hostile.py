"""What a hostile reviewer tries on verification: every hash the signer offers, signatures
whose statement asks for hashing that cannot be done, special files where a signature or a
model file should be. Each is refused with a `Problem` (never a traceback, never a hang)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from tests.weights.conftest import Keys, Tampering
from tests.weights.tiny_model import write_tiny_model

from inhouse.weights.signature import HashAlgorithm, default_signature_path, sign_model
from inhouse.weights.verdict import Verification
from inhouse.weights.verify import check_signature, verify_model

TIMEOUT_S = 30
ONE_SHARD = "model-00001-of-00001.safetensors"


@pytest.fixture
def small_model(tmp_path: Path, keys: Keys) -> Path:
    model = write_tiny_model(tmp_path / "m", num_shards=1, shard_bytes=4096)
    sign_model(model, keys.private)
    return model


def verify_within(model: Path, keys: Keys, signature: Path | None = None) -> Verification:
    """`verify_model` in a thread, failing the test (not hanging it) if it never returns."""
    results: list[Verification | BaseException] = []

    def run() -> None:
        try:
            results.append(verify_model(model, keys.trust, signature))
        except BaseException as exc:  # handed to the test
            results.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(TIMEOUT_S)
    assert not thread.is_alive(), f"verify_model still running after {TIMEOUT_S} s"
    (result,) = results
    if isinstance(result, BaseException):
        raise result
    return result


@pytest.mark.parametrize("algorithm", ["sha256", "blake2", "blake3"])
def test_every_hash_the_signer_offers_verifies(
    tmp_path: Path, keys: Keys, algorithm: HashAlgorithm
) -> None:
    """`sign --hash blake2` writes `hash_type: blake2b` (the digest's name), which the library's
    hashing configuration does not accept by that name: verification raised a ValueError."""
    model = write_tiny_model(tmp_path / "m", num_shards=1, shard_bytes=4096)
    sign_model(model, keys.private, hash_algorithm=algorithm)
    assert verify_model(model, keys.trust).ok
    assert check_signature(default_signature_path(model), keys.trust).ok
    Tampering("byte", "altered", ONE_SHARD).apply(model)
    (problem,) = verify_model(model, keys.trust).problems
    assert (problem.kind, problem.path) == ("altered", ONE_SHARD)
