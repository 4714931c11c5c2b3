"""Certificates are checked at verification time: an expired signing certificate (or CA) is
refused, naming the certificate, the day it expired and the option that accepts it
(`--allow-expired-certificate`, stack `allow_expired_certificate: true`); one not valid yet is
refused whatever the option (the node's clock is wrong, or the certificate is). model-signing
alone checks the chain as of the signing certificate's first valid day, so all of these
verified."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tests.weights.clients import CountingClient
from tests.weights.pki import DAY, Pki, ca_certificate, write_pki
from tests.weights.tiny_model import write_tiny_model

from inhouse.weights.errors import VerificationFailed, WeightsError
from inhouse.weights.messages import describe_failure
from inhouse.weights.pull import PullRequest, pull_model
from inhouse.weights.registry import push_model
from inhouse.weights.s3 import RegistryUrl, make_client
from inhouse.weights.signature import default_signature_path, sign_model
from inhouse.weights.trust import Trust
from inhouse.weights.verify import check_signature, verify_model


def _signed(tmp_path: Path, pki: Pki) -> Path:
    model = write_tiny_model(tmp_path / "m", num_shards=1, shard_bytes=4096)
    # as if signed the day the certificate became valid (sign refuses one out of it now)
    sign_model(model, pki.key, certificate=pki.certificate, certificate_chain=(pki.ca,),
               now=pki.leaf().not_valid_before_utc)  # fmt: skip
    return model


def _allowing(trust: Trust) -> Trust:
    return dataclasses.replace(trust, allow_expired_certificate=True)


def test_a_current_certificate_verifies(tmp_path: Path) -> None:
    pki = write_pki(tmp_path / "pki")
    assert verify_model(_signed(tmp_path, pki), pki.trust).ok


def test_an_expired_signing_certificate_is_refused_unless_allowed(tmp_path: Path) -> None:
    pki = write_pki(tmp_path / "pki", leaf_days=(-730, -1))
    model = _signed(tmp_path, pki)
    result = verify_model(model, pki.trust)
    assert not result.ok
    (problem,) = result.problems
    expired_on = pki.leaf().not_valid_after_utc.strftime("%Y-%m-%d %H:%M UTC")
    assert problem.kind == "expired" and problem.path == str(default_signature_path(model))
    assert expired_on in problem.detail and "CN=test release" in problem.detail
    assert "--allow-expired-certificate" in problem.detail
    assert "allow_expired_certificate" in describe_failure(result)
    assert verify_model(model, _allowing(pki.trust)).ok


def test_an_expired_ca_is_refused_unless_allowed(tmp_path: Path) -> None:
    pki = write_pki(tmp_path / "pki", leaf_days=(-300, 300), ca_days=(-400, -2))
    model = _signed(tmp_path, pki)
    (problem,) = verify_model(model, pki.trust).problems
    expired_on = pki.root().not_valid_after_utc.strftime("%Y-%m-%d %H:%M UTC")
    assert problem.kind == "expired" and "CN=test CA" in problem.detail
    assert expired_on in problem.detail
    assert verify_model(model, _allowing(pki.trust)).ok


def test_a_certificate_not_valid_yet_is_refused_even_when_expiry_is_allowed(
    tmp_path: Path,
) -> None:
    pki = write_pki(tmp_path / "pki", leaf_days=(2, 400))
    model = _signed(tmp_path, pki)
    for trust in (pki.trust, _allowing(pki.trust)):
        (problem,) = verify_model(model, trust).problems
        assert problem.kind == "expired" and "not valid until" in problem.detail
        assert "clock" in problem.detail


def test_the_check_before_a_pull_refuses_an_expired_certificate(tmp_path: Path) -> None:
    """A pull checks the signature before any download: an expired certificate fails there,
    in milliseconds, not after the model was fetched."""
    pki = write_pki(tmp_path / "pki", leaf_days=(-730, -1))
    model = _signed(tmp_path, pki)
    checked = check_signature(default_signature_path(model), pki.trust)
    assert checked.first is not None and checked.first.kind == "expired"
    assert check_signature(default_signature_path(model), _allowing(pki.trust)).ok


def test_an_expired_certificate_of_another_ca_is_a_bad_signature_not_an_expiry(
    tmp_path: Path,
) -> None:
    """Expiry is only told for a certificate that chains to the trusted CA: one from anyone
    else is refused as the library refuses it."""
    pki = write_pki(tmp_path / "pki", leaf_days=(-730, -1))
    other = write_pki(tmp_path / "other")
    (problem,) = verify_model(_signed(tmp_path, pki), other.trust).problems
    assert problem.kind == "signature"


def test_allowing_expiry_needs_a_certificate_chain(tmp_path: Path) -> None:
    (tmp_path / "key.pub").write_text("")
    with pytest.raises(WeightsError, match="--allow-expired-certificate"):
        Trust.from_args(tmp_path / "key.pub", allow_expired_certificate=True)


def test_a_pull_refuses_an_expired_certificate_before_any_download(
    tmp_path: Path, registry: str
) -> None:
    pki = write_pki(tmp_path / "pki", leaf_days=(-730, -1))
    url = RegistryUrl.parse(registry)
    push_model(make_client(), _signed(tmp_path, pki), url, "acme/tiny", "v1")
    request = PullRequest(url, "acme/tiny", "v1", tmp_path / "cache", pki.trust)
    counting = CountingClient(make_client())
    with pytest.raises(VerificationFailed) as refused:
        pull_model(request, counting)
    assert counting.blob_gets == 0
    assert refused.value.verification.first is not None
    assert refused.value.verification.first.kind == "expired"
    assert "expired on" in str(refused.value) and "--allow-expired-certificate" in str(
        refused.value
    )
    pulled = pull_model(dataclasses.replace(request, trust=_allowing(pki.trust)))
    assert pulled.verification is not None and pulled.verification.ok


@pytest.mark.parametrize(
    ("leaf_days", "ca_days", "said"),
    [((-730, -1), (-3650, 3650), "CN=test release expired on"),
     ((-300, 300), (-400, -2), r"its CA CN=test CA \(.*ca\.pem\) expired on"),
     ((2, 400), (-3650, 3650), "CN=test release is not valid until")],
    ids=["signing-certificate-expired", "ca-expired", "not-valid-yet"],
)  # fmt: skip
def test_signing_with_a_certificate_out_of_its_validity_is_refused(
    tmp_path: Path, leaf_days: tuple[float, float], ca_days: tuple[float, float], said: str
) -> None:
    """Signing with an expired certificate (or CA) succeeded, and so did the push: every node
    then refused the revision (`certificate out of its validity`), found at 3 a.m. by whoever
    scaled the pool, not by the release owner who could sign again with a current one."""
    pki = write_pki(tmp_path / "pki", leaf_days=leaf_days, ca_days=ca_days)
    model = write_tiny_model(tmp_path / "m", num_shards=1, shard_bytes=4096)
    with pytest.raises(WeightsError, match=said) as refused:
        sign_model(model, pki.key, certificate=pki.certificate, certificate_chain=(pki.ca,))
    assert "every verifier" in str(refused.value)
    assert not default_signature_path(model).exists()


def test_a_ca_renewed_with_its_key_keeps_its_signatures_in_force(tmp_path: Path) -> None:
    """A CA renewed with the same key (same name, a new validity) vouches for the signing
    certificates the old one issued. With both in the trust (the ConfigMap during the
    rotation), the path was built as of the signing certificate's first day, through the old
    CA, and refused as expired, though the renewed CA vouches for it now."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])

    old = ca_certificate(ca_key, name, now, (-400, -2))
    renewed = ca_certificate(ca_key, name, now, (-1, 3650))
    pki = write_pki(tmp_path / "pki", leaf_days=(-300, 300))  # its leaf, re-issued below
    key = serialization.load_pem_private_key(pki.key.read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    leaf = (
        x509.CertificateBuilder().subject_name(pki.leaf().subject).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - 300 * DAY).not_valid_after(now + 300 * DAY)
    )  # fmt: skip
    for extension in pki.leaf().extensions:
        leaf = leaf.add_extension(extension.value, extension.critical)
    pem = serialization.Encoding.PEM
    pki.certificate.write_bytes(leaf.sign(ca_key, hashes.SHA256()).public_bytes(pem))
    (tmp_path / "old.pem").write_bytes(old.public_bytes(pem))
    (tmp_path / "trust.pem").write_bytes(old.public_bytes(pem) + renewed.public_bytes(pem))
    model = write_tiny_model(tmp_path / "m", num_shards=1, shard_bytes=4096)
    sign_model(model, pki.key, certificate=pki.certificate,
               certificate_chain=(tmp_path / "old.pem",), now=now - 300 * DAY)  # fmt: skip
    result = verify_model(model, Trust(certificate_chain=(tmp_path / "trust.pem",)))
    assert result.ok, result.problems
    (problem,) = verify_model(model, Trust(certificate_chain=(tmp_path / "old.pem",))).problems
    assert problem.kind == "expired" and "CN=test CA" in problem.detail  # the old CA alone
