"""A test's own CA and code-signing certificate, with the validity windows a test needs (an
expired signing certificate, an expired CA, one not valid yet): `inhouse weights keygen
--certificate` only writes current ones."""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from inhouse.weights.trust import Trust

DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Pki:
    ca: Path
    key: Path
    certificate: Path
    trust: Trust

    def leaf(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.certificate.read_bytes())

    def root(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.ca.read_bytes())


def _usage(cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign,
        crl_sign=cert_sign, encipher_only=False, decipher_only=False,
    )  # fmt: skip


def ca_certificate(
    key: ec.EllipticCurvePrivateKey,
    name: x509.Name,
    now: datetime.datetime,
    days: tuple[float, float],
) -> x509.Certificate:
    """A self-signed CA certificate for `key`, valid from `now + days[0]` to `now + days[1]`."""
    return (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now + days[0] * DAY).not_valid_after(now + days[1] * DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip


def write_pki(
    out: Path,
    leaf_days: tuple[float, float] = (-1, 365),
    ca_days: tuple[float, float] = (-3650, 3650),
) -> Pki:
    """A CA and a signing certificate valid from `now + days[0]` to `now + days[1]` each."""
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = ca_certificate(ca_key, ca_name, now, ca_days)
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test release")]))
        .issuer_name(ca_name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + leaf_days[0] * DAY).not_valid_after(now + leaf_days[1] * DAY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    pem = serialization.Encoding.PEM
    (out / "ca.pem").write_bytes(ca.public_bytes(pem))
    (out / "signing.pem").write_bytes(leaf.public_bytes(pem))
    private = key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(out / "key.priv", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(private)
    trust = Trust(certificate_chain=(out / "ca.pem",))
    return Pki(out / "ca.pem", out / "key.priv", out / "signing.pem", trust)
