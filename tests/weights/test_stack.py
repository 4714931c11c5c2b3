"""What `inhouse up` hands vLLM is the directory that was verified, not a name that can be
pointed elsewhere after the check: `prepare_weights` returns real, content-addressed paths."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tests.weights.conftest import Keys, Tampering
from tests.weights.pki import write_pki
from tests.weights.tiny_model import write_tiny_model

from inhouse.spec.stack import parse_stack
from inhouse.weights.errors import VerificationFailed
from inhouse.weights.registry import push_model
from inhouse.weights.s3 import RegistryUrl, make_client
from inhouse.weights.signature import default_signature_path, sign_model
from inhouse.weights.stack import prepare_weights
from inhouse.weights.verify import verify_model


def _stack(weights: dict[str, object]) -> object:
    pool = {"name": "chat", "model": "tiny", "weights": weights}
    return parse_stack({"name": "s", "pools": [pool]})


def test_a_weights_dir_behind_a_symlink_is_loaded_from_what_was_verified(
    signed_model: Path, keys: Keys, tmp_path: Path
) -> None:
    """`weights_dir: current` (a symlink a deploy flips, as many do). up verified current's
    target, pulled the other pools' weights for minutes, then started vLLM on `current`,
    whatever it named by then: a flip in between served weights nobody verified."""
    current = tmp_path / "current"
    current.symlink_to(signed_model)
    shutil.copy(signed_model.with_name("tiny.sig"), default_signature_path(current))
    weights = {"weights_dir": str(current), "public_key": str(keys.public)}
    ready = prepare_weights(_stack(weights), tmp_path, tmp_path / "cache")  # type: ignore[arg-type]
    unverified = tmp_path / "unverified"
    shutil.copytree(signed_model, unverified)
    Tampering("byte", "altered", "model-00002-of-00002.safetensors").apply(unverified)
    current.unlink()
    current.symlink_to(unverified)  # after the check, before vLLM opens a file
    loaded = ready["chat"].path
    assert loaded == signed_model.resolve()
    assert verify_model(loaded, keys.trust, signed_model.with_name("tiny.sig")).ok


def test_a_registry_pool_is_loaded_from_its_content_address(
    signed_model: Path, keys: Keys, registry: str, tmp_path: Path
) -> None:
    """The by-name link can be pointed elsewhere after the check (by hand, or by a pull once
    its link was removed); the content-addressed directory that was verified cannot."""
    url = RegistryUrl.parse(registry)
    digest = push_model(make_client(), signed_model, url, "acme/tiny", "v1").manifest.digest
    weights = {"registry": registry, "name": "acme/tiny", "revision": "v1",
               "public_key": str(keys.public)}  # fmt: skip
    cache = tmp_path / "cache"
    ready = prepare_weights(_stack(weights), tmp_path, cache)  # type: ignore[arg-type]
    assert ready["chat"].path == cache / "sha256" / digest.split(":")[1]
    assert not ready["chat"].path.is_symlink()


def test_the_stack_can_allow_expired_certificates(tmp_path: Path) -> None:
    """`allow_expired_certificate: true` reaches the verifier (up pulls and verifies with
    it); without it an expired certificate is refused."""
    pki = write_pki(tmp_path / "pki", leaf_days=(-730, -1))
    model = write_tiny_model(tmp_path / "m", num_shards=1, shard_bytes=4096)
    sign_model(model, pki.key, certificate=pki.certificate, certificate_chain=(pki.ca,),
               now=pki.leaf().not_valid_before_utc)  # fmt: skip
    weights = {"weights_dir": str(model), "certificate_chain": [str(pki.ca)]}
    with pytest.raises(VerificationFailed, match="expired on"):
        prepare_weights(_stack(weights), tmp_path, tmp_path / "c")  # type: ignore[arg-type]
    allowing = {**weights, "allow_expired_certificate": True}
    ready = prepare_weights(_stack(allowing), tmp_path, tmp_path / "c")  # type: ignore[arg-type]
    assert ready["chat"].path == model.resolve()


def test_a_pool_whose_weights_cannot_be_had_is_named(
    signed_model: Path, keys: Keys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stack's second pool with a mistyped key path, or a registry `up` cannot reach, failed
    with 'cannot read keys/relase.pub: no such file' or 'cannot reach the S3 server': which of
    the pools, `inhouse up` did not say (a VerificationFailed named it; a WeightsError not)."""
    from inhouse.weights.errors import WeightsError

    missing_key = {"weights_dir": str(signed_model), "public_key": "keys/relase.pub"}
    with pytest.raises(WeightsError, match=r"^pool 'chat': cannot read .*relase\.pub"):
        prepare_weights(_stack(missing_key), tmp_path, tmp_path / "c")  # type: ignore[arg-type]
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "0")
    unreachable = {"registry": "s3://models/prod", "name": "acme/tiny", "revision": "v1",
                   "public_key": str(keys.public)}  # fmt: skip
    with pytest.raises(WeightsError, match=r"^pool 'chat': .*cannot reach the S3 server"):
        prepare_weights(_stack(unreachable), tmp_path, tmp_path / "c")  # type: ignore[arg-type]
