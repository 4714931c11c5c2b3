"""Keys and certificates: what signs a model, and what a verifier trusts.

Offline PKI only, no Sigstore and no network: an elliptic-curve key pair (`inhouse weights
keygen`), or a signing certificate issued by the organisation's own CA, verified against that
CA's chain. Both are OpenSSF model-signing's own signers and verifiers.

Certificates are checked as of now: model-signing checks a chain as of the signing
certificate's first valid day (offline, a signature carries no trusted time), so on its own an
expired certificate verifies for ever. `certificate_out_of_force` refuses a chain with a
certificate past its expiry (unless the trust allows expired ones) or not valid yet.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from OpenSSL import crypto

from inhouse.weights.errors import WeightsError

PRIVATE_KEY_FILE = "key.priv"
PUBLIC_KEY_FILE = "key.pub"
CA_FILE = "ca.pem"
CA_KEY_FILE = "ca.priv"
CERTIFICATE_FILE = "signing.pem"


@dataclass(frozen=True, slots=True)
class Trust:
    """What verifies a signature: a PEM public key, or PEM CA certificates (a chain)."""

    public_key: Path | None = None
    certificate_chain: tuple[Path, ...] = ()
    allow_expired_certificate: bool = False  # verify past a certificate's expiry, knowingly

    def __post_init__(self) -> None:
        assert (self.public_key is None) != (not self.certificate_chain), "exactly one trust"
        assert not (self.allow_expired_certificate and self.public_key), "a key has no expiry"

    @classmethod
    def from_args(
        cls,
        public_key: str | Path | None,
        chain: tuple[str | Path, ...] = (),
        allow_expired_certificate: bool = False,
    ) -> Trust:
        """Checked user input: exactly one of the two, the files exist, and expired
        certificates are allowed only with a certificate chain."""
        if (public_key is None) == (not chain):
            raise WeightsError(
                "give --public-key PUB (the release key's public half) or --certificate-chain "
                "CA.pem ... (your CA's certificates), exactly one"
            )
        if allow_expired_certificate and public_key is not None:
            raise WeightsError(
                "--allow-expired-certificate (allow_expired_certificate) is for a "
                "--certificate-chain; a bare --public-key has no expiry: drop the option"
            )
        paths = [Path(public_key)] if public_key is not None else [Path(c) for c in chain]
        for path in paths:
            if not path.is_file():
                raise WeightsError(f"cannot read {path}: no such file")
            _check_pem(path, is_key=public_key is not None)
        if public_key is not None:
            return cls(public_key=paths[0])
        return cls(certificate_chain=tuple(paths),
                   allow_expired_certificate=allow_expired_certificate)  # fmt: skip

    def describe(self) -> str:
        if self.public_key is not None:
            return f"public key {self.public_key}"
        chain = "certificate chain " + ", ".join(str(p) for p in self.certificate_chain)
        return chain + (" (expired certificates allowed)" if self.allow_expired_certificate else "")


def _check_pem(path: Path, is_key: bool) -> None:
    """A trusted public key is a PEM public key, a CA file holds PEM certificates; anything
    else is the wrong file (a WeightsError saying which), not a signature that fails."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise WeightsError(f"cannot read {path}: {exc.strerror}") from exc
    if b"PRIVATE KEY-----" in data:
        raise WeightsError(
            f"{path} is a private key: verifiers need only its public half (`key.pub`, from "
            "keygen). Whoever can read a private key signs weights your engines serve: remove "
            "it from wherever verifiers run (and from the ConfigMap), and give key.pub"
        )
    try:
        if is_key:
            serialization.load_pem_public_key(data)
        else:
            x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        if is_key:
            hint = " (a certificate: give your CA's with --certificate-chain)" if (
                b"BEGIN CERTIFICATE" in data) else ""  # fmt: skip
            raise WeightsError(
                f"{path} is not a PEM public key{hint}: --public-key (public_key) takes the "
                "release key's public half, `key.pub` from keygen"
            ) from exc
        raise WeightsError(
            f"{path} holds no PEM certificate: --certificate-chain (certificate_chain) takes "
            "your CA's certificates (e.g. ca.pem); a bare key goes with --public-key"
        ) from exc


def _when(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def certificate_out_of_force(
    certificates: tuple[bytes, ...], trust: Trust, now: datetime.datetime | None = None
) -> str | None:
    """Why the signing certificate (DER `certificates[0]`, the bundle's others after it) may
    not be used `now`, or None. In force when a path to `trust`'s CA is valid now (a CA
    renewed with its key included); else told on the path model-signing builds (as of the
    signing certificate's first valid day): every certificate on it must be valid now; an
    expired one passes when the trust allows it. A
    certificate that does not chain to the CA at all is left to the library, which refuses it
    as a bad signature (an expiry is only told of a certificate the CA issued)."""
    now = now or datetime.datetime.now(datetime.UTC)
    if _verified_path(certificates, trust, now):
        # NOTE: a path valid now is in force, though the library's, as of the signing
        # certificate's first day, may run through a CA since renewed with the same key.
        return None
    path = _verified_path(certificates, trust, None)
    for position, certificate in enumerate(path):
        role = "the signing certificate" if position == 0 else "its CA certificate"
        name = f"{role} {certificate.subject.rfc4514_string()}"
        if now < certificate.not_valid_before_utc:
            return (
                f"{name} is not valid until {_when(certificate.not_valid_before_utc)} (it is "
                f"{_when(now)} here): check this node's clock, or the certificate's dates"
            )
        if now > certificate.not_valid_after_utc and not trust.allow_expired_certificate:
            return (
                f"{name} expired on {_when(certificate.not_valid_after_utc)}. A signature "
                "carries no trusted time, so one made before that day cannot be told from one "
                "made after it: have the release owner sign again with a current certificate, "
                "or accept it knowingly with --allow-expired-certificate (the stack's "
                "`allow_expired_certificate: true`)"
            )
    return None


def signing_out_of_force(
    certificate: Path, chain: tuple[Path, ...], now: datetime.datetime | None = None
) -> str | None:
    """Why a signature made `now` with `certificate` (its issuers in `chain`) would be refused
    by every verifier, or None: a certificate among them is expired or not valid yet. A file
    that is not PEM certificates is left to the library, which says so."""
    now = now or datetime.datetime.now(datetime.UTC)
    try:
        loaded = [
            (path, c) for path in (certificate, *chain)
            for c in x509.load_pem_x509_certificates(path.read_bytes())
        ]  # fmt: skip
    except (ValueError, OSError):
        return None
    for path, found in loaded:
        name = found.subject.rfc4514_string()
        name = name if path == certificate else f"its CA {name} ({path})"
        if now < found.not_valid_before_utc:
            return (
                f"{name} is not valid until {_when(found.not_valid_before_utc)} (it is "
                f"{_when(now)} here), and every verifier would refuse this signature: check "
                "this machine's clock, or the certificate's dates"
            )
        if now > found.not_valid_after_utc:
            return (
                f"{name} expired on {_when(found.not_valid_after_utc)}, and every verifier "
                "would refuse this signature: have your CA issue a current one and sign with it"
            )
    return None


def _verified_path(
    certificates: tuple[bytes, ...], trust: Trust, at: datetime.datetime | None
) -> list[x509.Certificate]:
    """The certificates from the signing one up to a trusted CA, each valid `at`; as
    model-signing checks them (as of the signing certificate's first day) when `at` is None.
    Empty when there is none (the library then refuses the signature itself, saying why)."""
    try:
        signing, *others = (x509.load_der_x509_certificate(c) for c in certificates)
        trusted = x509.load_pem_x509_certificates(
            b"".join(p.read_bytes() for p in trust.certificate_chain)
        )
    except (ValueError, OSError):
        return []
    store = crypto.X509Store()
    for certificate in trusted:
        store.add_cert(crypto.X509.from_cryptography(certificate))
    store.set_time(at or signing.not_valid_before_utc)
    context = crypto.X509StoreContext(
        store,
        crypto.X509.from_cryptography(signing),
        [crypto.X509.from_cryptography(c) for c in others],
    )
    try:
        return [c.to_cryptography() for c in context.get_verified_chain()]
    except crypto.X509StoreContextError:
        return []


def keygen(
    out_dir: Path, with_certificate: bool = False, subject: str = "inhouse release"
) -> list[Path]:
    """Write a P-256 key pair (`key.priv` mode 0600, `key.pub`) to `out_dir`; with a
    certificate, also a self-signed CA (`ca.pem`, `ca.priv`) and a code-signing certificate for
    the key (`signing.pem`). Refuses to overwrite anything. Returns the files written."""
    names = [PRIVATE_KEY_FILE, PUBLIC_KEY_FILE]
    if with_certificate:
        names += [CA_FILE, CA_KEY_FILE, CERTIFICATE_FILE]
    # NOTE: lexists: a link planted where a key goes (dangling or not) is there too
    existing = [out_dir / n for n in names if os.path.lexists(out_dir / n)]
    if existing:
        raise WeightsError(
            f"{existing[0]} already exists; keygen never overwrites a key (choose another --out "
            "or move the old keys away first)"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    written = [_write_private(out_dir / PRIVATE_KEY_FILE, key)]
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    written.append(_write_new(out_dir / PUBLIC_KEY_FILE, public, 0o644))
    if with_certificate:
        written += _write_certificates(out_dir, key, subject)
    return written


def _write_private(path: Path, key: ec.EllipticCurvePrivateKey) -> Path:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return _write_new(path, pem, 0o600)


def _write_new(path: Path, data: bytes, mode: int) -> Path:
    """Create `path` afresh with `data`: never over a file, never through a link (O_EXCL)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return path


def _write_certificates(out_dir: Path, key: ec.EllipticCurvePrivateKey, subject: str) -> list[Path]:
    """A self-signed CA valid 10 years and a code-signing leaf for `key` valid 2 years."""
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{subject} CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    leaf_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    leaf = (
        x509.CertificateBuilder()
        .subject_name(leaf_name)
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=730))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    _write_new(out_dir / CA_FILE, ca.public_bytes(pem), 0o644)
    _write_new(out_dir / CERTIFICATE_FILE, leaf.public_bytes(pem), 0o644)
    ca_key_path = _write_private(out_dir / CA_KEY_FILE, ca_key)
    return [out_dir / CA_FILE, ca_key_path, out_dir / CERTIFICATE_FILE]


def _usage(cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )
