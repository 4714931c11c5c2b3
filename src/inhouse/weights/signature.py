"""Signing a model directory, and reading what a signature says, with OpenSSF model-signing.

A signature is model-signing's Sigstore bundle (a DSSE envelope around an in-toto statement
listing every file and its digest), signed offline with a key or a certificate. Its default
path is beside the directory: `MODEL_DIR.sig`. `read_statement` decodes the statement without
checking it, which is only ever used to configure hashing the way the signer did and to word a
failure after the library has verified the envelope.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from model_signing import hashing, signing, verifying

from inhouse.weights.errors import WeightsError

HashAlgorithm = Literal["sha256", "blake2", "blake3"]
HASH_ALGORITHMS: tuple[HashAlgorithm, ...] = ("sha256", "blake2", "blake3")
# A statement names its hash by the digest's name (`blake2b`); the library's hashing
# configuration by the algorithm's (`blake2`).
_ALGORITHM_OF_DIGEST: dict[str, HashAlgorithm] = {
    "sha256": "sha256",
    "blake2b": "blake2",
    "blake3": "blake3",
}
SIGNATURE_SUFFIX = ".sig"


# model-signing leaves its configurations' constructors unannotated: typed once, here.
def new_hashing() -> hashing.Config:
    return hashing.Config()  # type: ignore[no-untyped-call]


def new_signing() -> signing.Config:
    return signing.Config()  # type: ignore[no-untyped-call]


def new_verifying() -> verifying.Config:
    return verifying.Config()  # type: ignore[no-untyped-call]


def default_signature_path(model_dir: Path | str) -> Path:
    """`MODEL_DIR.sig`, beside the directory (never inside it, so it is not a model file)."""
    text = str(model_dir).rstrip("/") or "/"
    return Path(text + SIGNATURE_SUFFIX)


@dataclass(frozen=True, slots=True)
class Statement:
    """A signature's claims, not yet trusted: how the signer hashed, and what it listed."""

    serialization: dict[str, Any]
    resources: dict[str, str]  # file (or `file:start:end` shard) -> hex digest
    signer: Literal["key", "certificate", "other"] = "key"
    certificates: tuple[bytes, ...] = ()  # DER, the signing certificate first (certificate)

    @property
    def method(self) -> str:
        return str(self.serialization.get("method", ""))

    @property
    def files(self) -> list[str]:
        return sorted({name.split(":")[0] for name in self.resources})

    @property
    def lists_sha256(self) -> bool:
        """Whether it signs each file's SHA-256, the digests a registry manifest and the
        cache's content address are made of (not so for blake2, blake3 or shards)."""
        return self.method == "files" and self.serialization.get("hash_type") == "sha256"


def read_statement(signature: Path) -> Statement:
    """Decode the statement inside a signature file. WeightsError saying what is wrong (the
    caller names the file)."""
    if signature.exists() and not signature.is_file():
        # NOTE: reading a FIFO would wait for a writer forever.
        raise WeightsError("not a regular file (a directory, FIFO or device): pass the .sig file")
    try:
        bundle = json.loads(signature.read_text(encoding="utf-8"))
        payload = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"], validate=True))
        predicate = payload["predicate"]
        serialization = dict(predicate["serialization"])
        resources = {str(r["name"]): str(r["digest"]) for r in predicate["resources"]}
        material = bundle["verificationMaterial"]
        certificates = _certificates(material)
    except FileNotFoundError as exc:
        raise WeightsError("no such file (sign the model, or pass --signature)") from exc
    except OSError as exc:
        raise WeightsError(f"cannot read it: {exc.strerror}") from exc
    except (ValueError, binascii.Error, KeyError, TypeError) as exc:
        raise WeightsError(
            "not an OpenSSF model-signing signature (cannot decode its statement: "
            f"{type(exc).__name__}: {exc}); it is corrupt or truncated"
        ) from exc
    if serialization.get("method") not in ("files", "shards"):
        raise WeightsError(f"unknown serialization {serialization.get('method')!r}")
    signer: Literal["key", "certificate", "other"] = "other"
    if isinstance(material, dict) and "x509CertificateChain" in material:
        signer = "certificate"
    elif isinstance(material, dict) and "publicKey" in material:
        signer = "key"
    statement = Statement(serialization, resources, signer, certificates)
    try:  # hashing is configured from it before the library checks the envelope
        configure_hashing(new_hashing(), statement, [])
    except (KeyError, ValueError, TypeError) as exc:
        raise WeightsError(
            "its statement asks for hashing that model-signing cannot do "
            f"({type(exc).__name__}: {exc}); it is corrupt or was altered"
        ) from exc
    return statement


def _certificates(material: object) -> tuple[bytes, ...]:
    """The DER certificates a bundle embeds (signing certificate first), none for a key."""
    if not isinstance(material, dict) or "x509CertificateChain" not in material:
        return ()
    listed = material["x509CertificateChain"]["certificates"]
    return tuple(base64.b64decode(c["rawBytes"], validate=True) for c in listed)


def configure_hashing(
    config: hashing.Config, statement: Statement, ignored: list[str]
) -> hashing.Config:
    """The library's hashing `config` set up as the signer's was (method, algorithm, symlinks,
    shard size), ignoring `ignored` paths relative to the model (the signature, if inside)."""
    args = statement.serialization
    # NOTE: symlinks are refused whatever the signer allowed (a link re-pointed after the
    # check hands the engine other files); the library's Config refuses them anyway unless
    # its own flag is set, which this never does.
    common: dict[str, Any] = {
        "hashing_algorithm": _ALGORITHM_OF_DIGEST[str(args["hash_type"])],
        "allow_symlinks": False,
    }
    if statement.method == "shards":
        config.use_shard_serialization(shard_size=int(args["shard_size"]), **common)
    else:
        config.use_file_serialization(**common)
    return config.set_ignored_paths(paths=ignored, ignore_git_paths=True)


def inside(path: Path, directory: Path) -> str | None:
    """`path` relative to `directory` when it lies inside it, else None."""
    try:
        return str(path.resolve().relative_to(directory.resolve()))
    except ValueError:
        return None


def sign_model(
    model_dir: Path,
    private_key: Path,
    signature: Path | None = None,
    certificate: Path | None = None,
    certificate_chain: tuple[Path, ...] = (),
    hash_algorithm: HashAlgorithm = "sha256",
    now: datetime.datetime | None = None,
) -> Path:
    """Sign every file of `model_dir` (git metadata aside) and write the signature atomically
    (default `MODEL_DIR.sig`). With `certificate`, sign as that certificate (its chain is
    embedded), refused when a certificate of it is out of its validity `now` (default: the
    clock's); else with the bare key. Returns the signature's path."""
    if not model_dir.is_dir():
        raise WeightsError(f"{model_dir} is not a directory; sign the model's directory")
    _refuse_loose_key(private_key)
    if certificate is not None:
        from inhouse.weights.trust import signing_out_of_force

        refused = signing_out_of_force(certificate, certificate_chain, now)
        if refused:
            raise WeightsError(f"cannot sign with {certificate}: {refused}")
    target = signature or default_signature_path(model_dir)
    config = new_signing()
    try:
        if certificate is not None:
            config.use_certificate_signer(
                private_key=private_key,
                signing_certificate=certificate,
                certificate_chain=certificate_chain,
            )
        else:
            config.use_elliptic_key_signer(private_key=private_key)
    except (OSError, ValueError, TypeError) as exc:
        raise WeightsError(f"cannot sign with {private_key}: {exc}") from exc
    hashes = new_hashing().use_file_serialization(hashing_algorithm=hash_algorithm)
    within = inside(target, model_dir)
    hashes.set_ignored_paths(paths=[within] if within else [], ignore_git_paths=True)
    # NOTE: written first in a directory made afresh under a random name (a guessable file name
    # could be a link someone planted); empty while the model is hashed, should it lie inside
    try:
        scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    except OSError as exc:
        raise WeightsError(f"cannot write the signature {target}: {exc.strerror}") from exc
    temporary = scratch / target.name
    try:
        config.set_hashing_config(hashes).sign(model_dir, temporary)
        if not read_statement(temporary).resources:
            # NOTE: a signature of nothing verifies every empty directory (an unmounted volume)
            raise WeightsError(
                f"{model_dir} holds no files (git metadata aside): nothing to sign; is it the "
                "model's directory (a volume not mounted)?"
            )
        os.replace(temporary, target)
    except (OSError, ValueError) as exc:
        raise WeightsError(f"cannot sign {model_dir}: {exc}") from exc
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


def _refuse_loose_key(private_key: Path) -> None:
    """A private key that others can read (group or world bits) is refused, as ssh refuses
    one: whoever reads it signs weights every engine will serve."""
    try:
        mode = private_key.stat().st_mode
    except OSError:
        return  # the library says what is wrong with a key it cannot read
    if mode & 0o077:
        raise WeightsError(
            f"cannot sign with {private_key}: others can read it (mode {mode & 0o777:04o}), and "
            f"whoever reads it can sign weights your engines serve; `chmod 600 {private_key}` "
            "(keygen writes it so; a Kubernetes Secret: defaultMode 0400) and keep it offline"
        )
