"""The weight registry on an S3 bucket: push a signed model, list, and read a revision.

    s3://BUCKET/PREFIX/blobs/sha256/<hex>                   file contents, by SHA-256
    s3://BUCKET/PREFIX/models/<name>/<revision>/model.sig   the signature
    s3://BUCKET/PREFIX/models/<name>/<revision>/manifest.json

Files are stored once by content, so a new revision uploads only the files that changed (a
file already there is read back and uploaded again if its bytes are not its SHA-256).
A revision is immutable and complete once its manifest exists: push uploads the blobs, then
the signature, then the manifest, and refuses a revision that already has one.
"""

from __future__ import annotations

import datetime
import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from boto3.s3.transfer import TransferConfig

from inhouse.errors import SpecError
from inhouse.spec.catalog import get_model
from inhouse.spec.weights import check_model_name, check_revision
from inhouse.weights.errors import WeightsError
from inhouse.weights.manifest import (
    FileEntry,
    RegistryManifest,
    SignatureEntry,
    model_digest,
    parse_manifest,
)
from inhouse.weights.s3 import RegistryUrl, is_not_found, s3_errors
from inhouse.weights.signature import (
    Statement,
    configure_hashing,
    default_signature_path,
    new_hashing,
    read_statement,
)

MANIFEST = "manifest.json"
SIGNATURE = "model.sig"
# A revision's manifest and signature list one entry per file (per shard with shard hashing):
# a few hundred kilobytes for the largest checkpoints. Anything past this is not ours.
MAX_METADATA_BYTES = 64 << 20
UPLOAD = TransferConfig(
    multipart_threshold=64 * 2**20, multipart_chunksize=64 * 2**20, max_concurrency=4
)
NUM_UPLOAD_FILES = 4  # files uploaded at once, each in up to max_concurrency parts
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


def check_covers(
    statement: Statement, files: list[FileEntry], signature: Path, model_dir: Path
) -> None:
    """Refuse to push files the signature does not cover exactly (signed another copy?)."""
    from inhouse.weights.messages import describe_problem
    from inhouse.weights.verify import diff_resources

    if statement.lists_sha256:
        problems = diff_resources(statement.resources, {f.path: f.sha256 for f in files})
    else:
        # NOTE: shards or another hash: the directory hashed again as the signer hashed it.
        # Comparing the file names alone let a file altered after signing be pushed, and
        # every node then refused the revision, which cannot be pushed over.
        problems = diff_resources(statement.resources, _signer_digests(statement, model_dir))
    if problems:
        listed = "\n".join(f"  {describe_problem(p)}" for p in problems[:5])
        raise WeightsError(
            f"{signature} does not cover this directory as it is now:\n{listed}\n"
            "Sign it again (`inhouse weights sign`) before pushing."
        )


def _signer_digests(statement: Statement, model_dir: Path) -> dict[str, str]:
    """Each resource's digest (a file, or a `file:start:end` shard) as the signer's hashing
    finds it in `model_dir` now."""
    try:
        result = configure_hashing(new_hashing(), statement, []).hash(model_dir)
    except (OSError, ValueError) as exc:
        raise WeightsError(f"cannot hash {model_dir}: {exc}") from exc
    return {rd.identifier: rd.digest.digest_hex for rd in result.resource_descriptors()}


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
    files = hash_files(model_dir)
    if not files:
        raise WeightsError(
            f"{model_dir} holds no files (git metadata aside): nothing to push; is it the "
            "model's directory?"
        )
    check_covers(statement, files, signature, model_dir)
    manifest_key = revision_key(registry, name, revision, MANIFEST)
    with s3_errors(f"push {name}@{revision}", registry):
        if _exists(client, registry.bucket, manifest_key):
            raise WeightsError(
                f"{name}@{revision} is already in {registry}; revisions are immutable: push a "
                "new revision"
            )
        uploaded, reused, repaired = _upload_blobs(client, model_dir, registry, files)
        signature_bytes = signature.read_bytes()
        manifest = new_manifest(name, revision, files, signature_bytes, license)
        key = revision_key(registry, name, revision, SIGNATURE)
        client.put_object(Bucket=registry.bucket, Key=key, Body=signature_bytes)
        client.put_object(
            Bucket=registry.bucket,
            Key=manifest_key,
            Body=manifest.model_dump_json(indent=1).encode(),
            ContentType="application/json",
        )
    return PushResult(manifest, uploaded, reused, repaired)


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


def _upload_blobs(
    client: Any, model_dir: Path, registry: RegistryUrl, files: list[FileEntry]
) -> tuple[int, int, tuple[str, ...]]:
    """Upload the blobs the registry lacks; returns (bytes uploaded, bytes reused, files whose
    registry copy was altered and was uploaded again)."""
    unique = {f.sha256: f for f in files}.values()

    def upload(entry: FileEntry) -> tuple[int, int, bool]:
        key = blob_key(registry, entry.sha256)
        exists = _exists(client, registry.bucket, key, entry.size)
        # NOTE: a blob is reused only when its bytes are its name's SHA-256: one altered in
        # the bucket (same size) would otherwise stay, in every revision that shares it.
        if exists and _sha256_of(client, registry.bucket, key) == entry.sha256:
            return 0, entry.size, False
        client.upload_file(str(model_dir / entry.path), registry.bucket, key, Config=UPLOAD)
        return entry.size, 0, exists

    with ThreadPoolExecutor(max_workers=NUM_UPLOAD_FILES) as pool:
        counts = list(pool.map(upload, unique))
    repaired = tuple(sorted(e.path for e, c in zip(unique, counts, strict=True) if c[2]))
    return sum(c[0] for c in counts), sum(c[1] for c in counts), repaired


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
