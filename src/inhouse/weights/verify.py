"""Verify a model directory against its signature: model-signing's verifier, our verdict.

    result = verify_model(Path("/models/tiny"), Trust(public_key=Path("key.pub")))
    if not result.ok:
        print(result.first.kind, result.first.path)   # e.g. "altered model-00001.safetensors"

The library does the work: it checks the signature with the trusted key or certificate chain,
hashes the directory (its own hashing, configured as the signer's was) and compares. We keep
the manifest its hashing produced, so that a mismatch becomes one `Problem` per file instead of
the library's sentence, and tell a bad signature from a bad directory by whether hashing ran.
Nothing is ever trusted from the statement before the library has verified the envelope.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from model_signing import hashing, manifest, verifying

from inhouse.weights.errors import VerificationFailed, WeightsError
from inhouse.weights.file_pass import ModelFile, resource_names
from inhouse.weights.signature import (
    Statement,
    configure_hashing,
    default_signature_path,
    inside,
    new_hashing,
    new_verifying,
    read_statement,
)
from inhouse.weights.trust import Trust, certificate_out_of_force
from inhouse.weights.verdict import Problem, Verification, sorted_problems

# resource (file, or `file:start:end`) -> the library's Digest (its class is in a private module)
Digests = dict[str, Any]


class _RecordingHashing(hashing.Config):
    """The library's hashing configuration, remembering whether it ran and what it found.

    With `precomputed` digests (a pull hashes each file with the library as soon as its last
    byte is written, while the rest downloads), the manifest is built from them instead of
    reading the files again, but only when the directory holds exactly those regular files
    and nothing else (no symlink, no special file, no extra or missing file); otherwise the
    library hashes everything as usual.
    """

    def __init__(self, statement: Statement, precomputed: Digests | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.started = False
        self.result: manifest.Manifest | None = None
        self._statement = statement
        self._precomputed = precomputed

    def hash(
        self,
        model_path: hashing.PathLike,
        *,
        files_to_hash: Iterable[hashing.PathLike] | None = None,
    ) -> manifest.Manifest:
        self.started = True
        root = Path(os.fsdecode(model_path))
        if self._precomputed is not None and files_to_hash is None and self._covers(root):
            kind = manifest.SerializationType.from_args(self._statement.serialization)
            items = [kind.new_item(name, d) for name, d in self._precomputed.items()]
            self.result = manifest.Manifest(root.name, items, kind)
        else:
            self.result = super().hash(model_path, files_to_hash=files_to_hash)
        return self.result

    def add_ignored_paths(
        self, *, model_path: hashing.PathLike, paths: Iterable[hashing.PathLike]
    ) -> None:
        """NOTE: the library's verifier calls this with the paths the signer ignored (the
        statement's `ignore_paths`), which it would then skip. They are not skipped: a file
        the signature does not cover is `extra` whatever the signer left out (an ignored
        tokenizer or modeling .py would be loaded unverified). Git metadata and the signature
        itself stay aside, as `configure_hashing` set them."""

    def _covers(self, root: Path) -> bool:
        assert self._precomputed is not None, "only with precomputed digests"
        expected = {name.split(":")[0] for name in self._precomputed}
        found: set[str] = set()
        for directory, subdirs, files in os.walk(root):
            for name in subdirs + files:
                path = Path(directory) / name
                if path.is_symlink() or not (path.is_dir() or path.is_file()):
                    return False
            for name in files:
                path = Path(directory) / name
                file = ModelFile(path.relative_to(root).as_posix(), path.stat().st_size)
                # NOTE: a file with no resource (an empty one under shards) the library's own
                # hash of the directory lists none of either.
                if resource_names(self._statement, file):
                    found.add(file.path)
        return found == expected


class FileHashes:
    """Library digests of a model's files, computed in the background as each file completes
    (`add(path)`); `digests()` waits for them all."""

    def __init__(self, model_dir: Path, statement: Statement, workers: int = 2) -> None:
        self.model_dir = model_dir
        self.statement = statement
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="weights-hash")
        self._futures: list[Future[Digests]] = []

    def add(self, path: str) -> None:
        self._futures.append(self._pool.submit(self._hash, path))

    def _hash(self, path: str) -> Digests:
        config = configure_hashing(new_hashing(), self.statement, [])
        result = config.hash(self.model_dir, files_to_hash=[self.model_dir / path])
        return {rd.identifier: rd.digest for rd in result.resource_descriptors()}

    def digests(self) -> Digests | None:
        """Every digest, or None when a file could not be hashed (verification then hashes
        everything and reports why)."""
        merged: Digests = {}
        try:
            for future in self._futures:
                merged.update(future.result())
        except (OSError, ValueError):
            return None
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)
        return merged


def _verifier(trust: Trust) -> verifying.Config:
    config = new_verifying()
    if trust.public_key is not None:
        return config.use_elliptic_key_verifier(public_key=trust.public_key)
    return config.use_certificate_verifier(certificate_chain=trust.certificate_chain)


def verify_model(
    model_dir: Path,
    trust: Trust,
    signature: Path | None = None,
    precomputed: Digests | None = None,
) -> Verification:
    """Check `model_dir` against `signature` (default `MODEL_DIR.sig`). Never raises for a
    verification failure: the result says what failed. A symlinked directory (a cache's
    by-name link) is followed; symlinks inside it are refused unless the signer allowed them.
    `precomputed`: the library's digests of the files, taken as they were written (pull)."""
    signature = signature or default_signature_path(model_dir)
    base = Verification(model_dir, signature, trust.describe())
    real_dir = model_dir.resolve()
    if not real_dir.is_dir():  # first: a mistyped directory is not a signature problem
        detail = "not a directory" if real_dir.exists() else "no such directory"
        return _with(base, Problem("unreadable", str(model_dir), detail))
    try:
        statement = read_statement(signature)
    except WeightsError as exc:
        return _with(base, Problem("signature", str(signature), str(exc)))
    if not statement.resources:  # NOTE: it would verify any empty directory
        detail = "it covers no files (an empty directory was signed): it verifies no model"
        return _with(base, Problem("signature", str(signature), detail))
    mismatch = _trust_mismatch(statement, trust)
    if mismatch:
        return _with(base, Problem("signature", str(signature), mismatch))
    if trust.certificate_chain:  # before hashing: an expired certificate fails at once
        expired = certificate_out_of_force(statement.certificates, trust)
        if expired:
            return _with(base, Problem("expired", str(signature), expired))
    within = inside(signature, real_dir)
    hashes = _RecordingHashing(statement, precomputed)
    configure_hashing(hashes, statement, [within] if within else [])
    try:
        _verifier(trust).set_hashing_config(hashes).verify(real_dir, signature)
    except Exception as exc:
        return _with(base, *_problems(exc, hashes, statement, signature, model_dir))
    sizes = (_size(real_dir / name) for name in statement.files)
    return Verification(model_dir, signature, base.trust, (), len(statement.files), sum(sizes))


def check_signature(signature: Path, trust: Trust) -> Verification:
    """Whether the signature itself verifies with `trust`, without the model: the library
    checks the envelope before it hashes, so against an empty directory a good signature
    fails only with every file `missing`, and a bad one with a `signature` problem."""
    with tempfile.TemporaryDirectory(prefix="inhouse-sigcheck-") as empty:
        result = verify_model(Path(empty), trust, signature)
    bad = tuple(p for p in result.problems if p.kind != "missing")
    num_files = sum(1 for p in result.problems if p.kind == "missing")
    return Verification(signature.parent, signature, result.trust, bad, num_files)


def require_verified(model_dir: Path, trust: Trust, signature: Path | None = None) -> Verification:
    """`verify_model`, raising `VerificationFailed` (worded for a person) when it fails."""
    from inhouse.weights.messages import describe_failure

    result = verify_model(model_dir, trust, signature)
    if not result.ok:
        raise VerificationFailed(result, describe_failure(result))
    return result


def _trust_mismatch(statement: Statement, trust: Trust) -> str | None:
    if statement.signer == "certificate" and trust.public_key is not None:
        return "it was signed with a certificate: verify with --certificate-chain (your CA)"
    if statement.signer == "key" and trust.certificate_chain:
        return "it was signed with a bare key, not a certificate: verify with --public-key"
    return None


def _with(base: Verification, *problems: Problem) -> Verification:
    return Verification(base.model_dir, base.signature, base.trust, sorted_problems(list(problems)))


def _problems(
    exc: Exception,
    hashes: _RecordingHashing,
    statement: Statement,
    signature: Path,
    model_dir: Path,
) -> list[Problem]:
    detail = str(exc) or type(exc).__name__
    if hashes.result is not None:
        digests = {
            rd.identifier: rd.digest.digest_hex for rd in hashes.result.resource_descriptors()
        }
        found = diff_resources(statement.resources, digests)
        if found:
            return found
        return [Problem("signature", str(signature), detail)]
    if hashes.started:  # the signature verified; the directory could not be hashed
        return [Problem("unreadable", str(model_dir), detail)]
    if type(exc).__name__ == "InvalidSignature":
        detail = "the signature does not match its statement under this key (altered or forged)"
    return [Problem("signature", str(signature), detail)]


def diff_resources(expected: dict[str, str], found: dict[str, str]) -> list[Problem]:
    """One problem per file (`name` or `name:start:end` shards): extra, missing, or altered
    (any of its shards differs), sorted by path."""
    problems: dict[str, Problem] = {}
    for name in sorted(set(found) | set(expected)):
        path = name.split(":")[0]
        if path in problems:
            continue
        if name not in expected:
            problems[path] = Problem("extra", path, "not covered by the signature")
        elif name not in found:
            problems[path] = Problem("missing", path, "signed but not in the directory")
        elif found[name] != expected[name]:
            problems[path] = Problem("altered", path, "", expected[name], found[name])
    return list(problems.values())


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
