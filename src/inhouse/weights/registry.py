"""The weight registry on an S3 bucket: push a signed model, list, and read a revision.

    s3://BUCKET/PREFIX/blobs/sha256/<hex>                   file contents, by SHA-256
    s3://BUCKET/PREFIX/models/<name>/<revision>/model.sig   the signature
    s3://BUCKET/PREFIX/models/<name>/<revision>/manifest.json

Files are stored once by content, so a new revision uploads only the files that changed (a
file already there is read back and uploaded again if its bytes are not its SHA-256).
A revision is immutable and complete once its manifest exists: push uploads the blobs, then
the signature, then the manifest, and refuses a revision that already has one. Each blob is
uploaded as its file is read and hashed (a multipart upload, completed only once the bytes
sent are the signed ones; file_pass.py, blob_upload.py).
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import re
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inhouse.errors import SpecError
from inhouse.spec.catalog import get_model
from inhouse.spec.weights import check_model_name, check_revision
from inhouse.weights.blob_upload import PARTS_IN_FLIGHT, BlobUpload
from inhouse.weights.errors import WeightsError
from inhouse.weights.file_pass import (
    Digester,
    FileDigests,
    ModelFile,
    list_model_files,
    read_file,
    resource_names,
)
from inhouse.weights.manifest import (
    FileEntry,
    RegistryManifest,
    SignatureEntry,
    model_digest,
    parse_manifest,
)
from inhouse.weights.messages import describe_problem
from inhouse.weights.s3 import RegistryUrl, is_not_found, s3_errors
from inhouse.weights.signature import (
    Statement,
    default_signature_path,
    new_hashing,
    read_statement,
)
from inhouse.weights.verdict import Problem
from inhouse.weights.verify import diff_resources

MANIFEST = "manifest.json"
SIGNATURE = "model.sig"
# A revision's manifest and signature list one entry per file (per shard with shard hashing):
# a few hundred kilobytes for the largest checkpoints. Anything past this is not ours.
MAX_METADATA_BYTES = 64 << 20
NUM_UPLOAD_FILES = 4  # files read (and uploaded) at once, each in up to PARTS_IN_FLIGHT parts
SHA256_HEX = re.compile("[0-9a-f]{64}")
READ_BYTES = 8 * 2**20  # a reused blob is read back in chunks this size


def blob_key(registry: RegistryUrl, sha256: str) -> str:
    return registry.key("blobs", "sha256", sha256)


def revision_key(registry: RegistryUrl, name: str, revision: str, leaf: str) -> str:
    return registry.key("models", name, revision, leaf)


@dataclass(frozen=True, slots=True)
class PushResult:
    manifest: RegistryManifest
    uploaded_bytes: int
    reused_bytes: int  # blobs already in the registry (an earlier revision had them)
    repaired: tuple[str, ...] = ()  # files whose registry copy was altered: uploaded again


def catalog_license(name: str) -> str:
    try:
        return get_model(name).license
    except SpecError:
        return "unknown (not in the model catalog; pass --license)"


def hash_files(model_dir: Path) -> list[FileEntry]:
    """Per-file SHA-256 and size, by model-signing's own hashing (git metadata aside)."""
    try:
        config = new_hashing().use_file_serialization(hashing_algorithm="sha256")
        result = config.hash(model_dir)
    except (OSError, ValueError) as exc:
        raise WeightsError(f"cannot hash {model_dir}: {exc}") from exc
    return [
        FileEntry(
            path=rd.identifier,
            size=(model_dir / rd.identifier).stat().st_size,
            sha256=rd.digest.digest_hex,
        )
        for rd in result.resource_descriptors()
    ]


def push_model(
    client: Any,
    model_dir: Path,
    registry: RegistryUrl,
    name: str,
    revision: str,
    signature: Path | None = None,
    license: str | None = None,
) -> PushResult:
    check_model_name(name)
    check_revision(revision)
    signature = signature or default_signature_path(model_dir)
    try:
        statement = read_statement(signature)
    except WeightsError as exc:
        raise WeightsError(f"signature {signature}: {exc}") from exc
    files = _list_files(model_dir)
    if not files:
        raise WeightsError(
            f"{model_dir} holds no files (git metadata aside): nothing to push; is it the "
            "model's directory?"
        )
    _refuse_uncovered(signature, _unlisted(statement, files))
    hashed: dict[str, FileDigests] = {}
    if not statement.lists_sha256:
        # NOTE: blake2, blake3 or shards do not list the SHA-256s that name the blobs: one read
        # hashes both, and refuses an altered file before anything is uploaded.
        hashed = _hash_files_once(model_dir, statement, files)
        _refuse_uncovered(signature, diff_resources(statement.resources, _resources(hashed)))
    manifest_key = revision_key(registry, name, revision, MANIFEST)
    with s3_errors(f"push {name}@{revision}", registry):
        if _exists(client, registry.bucket, manifest_key):
            raise WeightsError(
                f"{name}@{revision} is already in {registry}; revisions are immutable: push a "
                "new revision"
            )
        stored = _store_blobs(client, model_dir, registry, statement, files, hashed)
        entries = _commit_blobs(stored, statement, hashed, signature)
        signature_bytes = signature.read_bytes()
        manifest = new_manifest(name, revision, entries, signature_bytes, license)
        key = revision_key(registry, name, revision, SIGNATURE)
        client.put_object(Bucket=registry.bucket, Key=key, Body=signature_bytes)
        client.put_object(
            Bucket=registry.bucket,
            Key=manifest_key,
            Body=manifest.model_dump_json(indent=1).encode(),
            ContentType="application/json",
        )
    return PushResult(manifest, stored.uploaded_bytes, stored.reused_bytes, stored.repaired)


def _list_files(model_dir: Path) -> list[ModelFile]:
    try:
        return list_model_files(model_dir)
    except (OSError, ValueError) as exc:
        raise WeightsError(f"cannot hash {model_dir}: {exc}") from exc


def _unlisted(statement: Statement, files: list[ModelFile]) -> list[Problem]:
    """Files the signature does not list, and files it lists that are not here: by name,
    before any file is read."""
    names = {n: "" for f in files for n in resource_names(statement, f)}
    signed = {n: "" for n in statement.resources}
    return [p for p in diff_resources(signed, names) if p.kind != "altered"]


def _resources(digests: dict[str, FileDigests]) -> dict[str, str]:
    return {name: hex for d in digests.values() for name, hex in d.resources.items()}


def _refuse_uncovered(signature: Path, problems: list[Problem], during: bool = False) -> None:
    """Refuse to push files the signature does not cover exactly (signed another copy?)."""
    if not problems:
        return
    listed = "\n".join(f"  {describe_problem(p)}" for p in problems[:5])
    raise WeightsError(
        f"{signature} does not cover this directory as it is now:\n{listed}\n"
        + (
            "It changed while it was pushed: push again once nothing writes to it."
            if during
            else "Sign it again (`inhouse weights sign`) before pushing (or, if nothing "
            "changed it on purpose, push again once nothing writes to it)."
        )
    )


def _hash_files_once(
    model_dir: Path, statement: Statement, files: list[ModelFile]
) -> dict[str, FileDigests]:
    def digest(file: ModelFile) -> FileDigests:
        return _read(model_dir, Digester(statement, file.path))

    with ThreadPoolExecutor(max_workers=NUM_UPLOAD_FILES) as pool:
        return {f.path: d for f, d in zip(files, pool.map(digest, files), strict=True)}


def _read(model_dir: Path, digester: Digester, upload: BlobUpload | None = None) -> FileDigests:
    try:
        return read_file(model_dir / digester.path, digester, upload.write if upload else None)
    except OSError as exc:
        raise WeightsError(f"cannot read {model_dir / digester.path}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class _Blob:
    sha256: str  # what its files must hash to (the signature's, or the first read's)
    files: tuple[ModelFile, ...]  # the files holding it; the first is uploaded


@dataclass(frozen=True, slots=True)
class _Stored:
    """The blobs as one read of each file left them: uploads sent, none committed."""

    read: dict[str, FileDigests]  # what this read found, by path
    uploads: tuple[BlobUpload, ...]
    uploaded_bytes: int
    reused_bytes: int
    repaired: tuple[str, ...]


def _store_blobs(
    client: Any,
    model_dir: Path,
    registry: RegistryUrl,
    statement: Statement,
    files: list[ModelFile],
    hashed: dict[str, FileDigests],
) -> _Stored:
    """Read each file once (a file already `hashed` only to upload it), uploading the blobs the
    registry lacks as they are read: a reused blob is one whose bytes are its name's SHA-256
    (one altered in the bucket would otherwise stay, in every revision that shares it). On any
    error every upload is aborted."""
    by_sha256: dict[str, list[ModelFile]] = {}
    for f in files:
        expected = statement.resources[f.path] if statement.lists_sha256 else hashed[f.path].sha256
        by_sha256.setdefault(expected, []).append(f)
    blobs = tuple(_Blob(sha256, tuple(group)) for sha256, group in by_sha256.items())
    uploads: list[BlobUpload] = []
    refused = threading.Event()  # a file read is not what the signature says: start no more

    def store(blob: _Blob) -> tuple[dict[str, FileDigests], int, int, bool]:
        if refused.is_set():
            return {}, 0, 0, False
        result = store_one(blob)
        if any(d.sha256 != blob.sha256 for d in result[0].values()):
            refused.set()
        return result

    def store_one(blob: _Blob) -> tuple[dict[str, FileDigests], int, int, bool]:
        first = blob.files[0]
        key = blob_key(registry, blob.sha256) if SHA256_HEX.fullmatch(blob.sha256) else None
        exists = key is not None and _exists(client, registry.bucket, key, first.size)
        if exists and _sha256_of(client, registry.bucket, str(key)) == blob.sha256:
            read = {f.path: _read(model_dir, Digester(statement, f.path))
                    for f in blob.files if f.path not in hashed}  # fmt: skip
            return read, 0, first.size, False
        upload = None
        if key is not None:  # NOTE: else no file can match the signature: refused below
            upload = BlobUpload(client, registry.bucket, key, first.size, parts)
            uploads.append(upload)
        digester = Digester(statement, first.path, only_sha256=first.path in hashed)
        read = {first.path: _read(model_dir, digester, upload)}
        if upload is not None:
            upload.close()
        for f in blob.files[1:]:
            if f.path not in hashed:
                read[f.path] = _read(model_dir, Digester(statement, f.path))
        return read, read[first.path].size, 0, exists

    try:
        # NOTE: the files' pool exits first: its threads wait on parts in the other
        with (
            ThreadPoolExecutor(max_workers=NUM_UPLOAD_FILES * (PARTS_IN_FLIGHT + 1)) as parts,
            ThreadPoolExecutor(max_workers=NUM_UPLOAD_FILES) as pool,
        ):
            results = list(pool.map(store, blobs))
    except BaseException:
        _abort(uploads)
        raise
    return _Stored(
        {path: d for r in results for path, d in r[0].items()},
        tuple(uploads),
        sum(r[1] for r in results),
        sum(r[2] for r in results),
        tuple(sorted(b.files[0].path for b, r in zip(blobs, results, strict=True) if r[3])),
    )


def _commit_blobs(
    stored: _Stored, statement: Statement, hashed: dict[str, FileDigests], signature: Path
) -> list[FileEntry]:
    """Complete the uploads once the bytes sent are the signed ones; else abort them all and
    refuse. The files' manifest entries."""
    try:
        if statement.lists_sha256:  # files not read (refused before their turn) aside
            signed = {p: statement.resources[p] for p in stored.read}
            _refuse_uncovered(signature, diff_resources(signed, _resources(stored.read)))
        else:  # the bytes uploaded are the bytes hashed and checked: read again, compared
            changed = [
                Problem("altered", p, "", hashed[p].sha256, d.sha256)
                for p, d in sorted(stored.read.items())
                if d.sha256 != hashed[p].sha256
            ]
            _refuse_uncovered(signature, changed, during=True)
        for upload in stored.uploads:
            upload.complete()
    except BaseException:
        _abort(stored.uploads)
        raise
    found = stored.read if statement.lists_sha256 else hashed
    return [FileEntry(path=p, size=found[p].size, sha256=found[p].sha256) for p in sorted(found)]


def _abort(uploads: Iterable[BlobUpload]) -> None:
    """Abort every upload not completed, on the way out of a failed push: best effort, so that
    the failure itself is what is raised. NOTE: an upload the server does not let us abort
    (it is gone) stays open: nothing is stored under its key, and a bucket lifecycle rule
    (AbortIncompleteMultipartUpload) drops its parts."""
    for upload in uploads:
        with contextlib.suppress(Exception):
            upload.abort()


def new_manifest(
    name: str, revision: str, files: list[FileEntry], signature: bytes, license: str | None
) -> RegistryManifest:
    return RegistryManifest(
        name=name,
        revision=revision,
        digest=model_digest(files),
        license=license or catalog_license(name),
        pushed_at=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        signature=SignatureEntry(size=len(signature), sha256=hashlib.sha256(signature).hexdigest()),
        files=tuple(files),
    )


def _exists(client: Any, bucket: str, key: str, size: int | None = None) -> bool:
    try:
        head = client.head_object(Bucket=bucket, Key=key)
    except Exception as exc:
        if is_not_found(exc):
            return False
        raise
    return size is None or int(head["ContentLength"]) == size


def _sha256_of(client: Any, bucket: str, key: str) -> str:
    """The SHA-256 of an object's bytes, read back in chunks."""
    digest = hashlib.sha256()
    body = client.get_object(Bucket=bucket, Key=key)["Body"]
    try:
        for chunk in iter(lambda: body.read(READ_BYTES), b""):
            digest.update(chunk)
    finally:
        body.close()
    return digest.hexdigest()


def list_revisions(
    client: Any, registry: RegistryUrl, name: str | None = None
) -> list[tuple[str, str]]:
    """(name, revision) of every complete revision (its manifest exists)."""
    base = registry.key("models", name or "") + "/"
    found = []
    with s3_errors(f"list {registry}", registry):
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=registry.bucket, Prefix=base
        )
        for page in pages:
            for item in page.get("Contents", []):
                key: str = item["Key"]
                if not key.endswith("/" + MANIFEST):
                    continue
                middle = key[len(registry.key("models")) + 1 : -len(MANIFEST) - 1]
                model, _, revision = middle.rpartition("/")
                if model and (name is None or model == name):
                    found.append((model, revision))
    return found


def resolve_revision(client: Any, registry: RegistryUrl, name: str, revision: str | None) -> str:
    if revision is not None:
        return check_revision(revision)
    manifests = read_manifests(client, registry, check_model_name(name))
    if not manifests:
        raise WeightsError(
            f"no revision of {name!r} in {registry}; `inhouse weights ls --registry "
            f"{registry}` lists what is there"
        )
    return manifests[0].revision


def read_revision(
    client: Any, registry: RegistryUrl, name: str, revision: str
) -> tuple[RegistryManifest, bytes]:
    """A revision's manifest and signature bytes (checked against the manifest's record)."""
    where = f"{registry}/models/{name}/{revision}"
    with s3_errors(f"read {name}@{revision}", registry):
        try:
            text = _get(client, registry.bucket, revision_key(registry, name, revision, MANIFEST))
        except Exception as exc:
            if not is_not_found(exc):
                raise
            known = _known_revisions(client, registry, name)
            raise WeightsError(
                f"{name}@{revision} is not in {registry}; revisions there: "
                f"{', '.join(known) or 'none'}"
            ) from exc
        manifest = parse_manifest(text, f"{where}/{MANIFEST}")
        signature = _get(client, registry.bucket, revision_key(registry, name, revision, SIGNATURE))
    if (manifest.name, manifest.revision) != (name, revision):
        raise WeightsError(f"{where}/{MANIFEST} describes {manifest.name}@{manifest.revision}")
    return manifest, signature


def _known_revisions(client: Any, registry: RegistryUrl, name: str) -> list[str]:
    """A model's revisions, the newest pushed first; by name when a manifest cannot be read
    (a broken one must not hide that the revision asked for is not there)."""
    try:
        return [m.revision for m in read_manifests(client, registry, name)]
    except WeightsError:
        return sorted(revision for _, revision in list_revisions(client, registry, name))


def read_manifests(
    client: Any, registry: RegistryUrl, name: str | None = None
) -> list[RegistryManifest]:
    """Every complete revision's manifest (of `name`, or all), the newest pushed first."""
    manifests = []
    for model, revision in list_revisions(client, registry, name):
        with s3_errors(f"read {model}@{revision}", registry):
            text = _get(client, registry.bucket, revision_key(registry, model, revision, MANIFEST))
        manifests.append(parse_manifest(text, f"{registry}/models/{model}/{revision}"))
    return sorted(manifests, key=lambda m: (m.pushed_at, m.revision), reverse=True)


def _get(client: Any, bucket: str, key: str) -> bytes:
    """A manifest's or signature's bytes, refused past `MAX_METADATA_BYTES` without reading
    on: the registry is not trusted (only the signature is), and a pull runs in every engine
    pod's init container, where an object of gigabytes read whole would take the pod down."""
    response = client.get_object(Bucket=bucket, Key=key)
    body = response["Body"]
    try:
        length = response.get("ContentLength")
        data: bytes = b"" if _over_limit(length) else body.read(MAX_METADATA_BYTES + 1)
    finally:
        body.close()
    if _over_limit(length) or len(data) > MAX_METADATA_BYTES:
        size = f"{length:,} bytes" if isinstance(length, int) else "larger"
        raise WeightsError(
            f"s3://{bucket}/{key} is {size}, over the {MAX_METADATA_BYTES >> 20} MiB a manifest "
            "or signature may have: it is not what `inhouse weights push` wrote; push the "
            "revision again, or pull another"
        )
    return data


def _over_limit(length: object) -> bool:
    return isinstance(length, int) and length > MAX_METADATA_BYTES
